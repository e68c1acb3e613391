"""The migration plan: a legacy TOML as config objects, and everything its report must say.

``build`` is the entry (:func:`~titan.migrate.plan.build.build_plan`); ``migration_plan`` holds the data
types; the steps that fill a ``draft`` live by responsibility (``trainers``, ``custom_modules``,
``carry``, ``model_keys``, ``converters``, ``comments``). What feeds the plan: ``homes`` (where each
legacy key goes), ``overrides`` (legacy command-line flags), ``upgrades`` (older torchtitan eras),
``extension_classes`` (classes generated for custom config modules); ``report`` renders it.
"""
