"""Built-in copies of the custom config modules that torchtitan v0.2.2 shipped.

Each file re-declares one upstream ``JobConfig`` (fields, types, defaults, one-sentence docs) so
that a TOML naming the upstream module validates without torchtitan installed. titan never imports
these files: ``titan.schemas.extension_reader`` reads them with the same static reader it uses for a
user's module. They import only ``dataclasses`` and ``typing`` so that importing them is harmless.
"""
