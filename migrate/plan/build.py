"""The migration plan: a legacy TOML (plus legacy command-line overrides) as titan config objects.

:func:`build_plan` reads and checks one TOML exactly as ``titan-validate`` does, then puts every
key's value at its home (``migrate/plan/homes.py``) inside the default config tree of the right
trainer class (``migrate/targets/config_objects.py``). What cannot be carried is recorded, never
lost silently: every key of the input gets a :class:`~titan.migrate.plan.migration_plan.KeyOutcome`, and
everything dropped, inert, renamed or changing behaviour gets a diagnostic with a stable code. Two
renderers read the plan: code (``migrate/codegen/render_code.py``, a ``config_registry.py``
module) and live (``migrate/targets/live.py``, the same config objects in memory), so a TOML run
and its generated registry run cannot differ.

This module is the entry: reading and checking the file, naming the registry function, and
running the steps over a :class:`~titan.migrate.plan.draft.PlanDraft` in their order (:func:`fill`).
The steps live by responsibility: ``trainers`` (which trainer class), ``custom_modules``,
``carry`` (each key to its home, or dropped), ``model_keys``, ``converters``, ``comments``.

The plan never imports titan: the classes are named by path and their defaults come from the
generated ``migrate/targets/titan_spec.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from titan.migrate.codegen import names
from titan.migrate.plan import flavor_era, forge_apps, measured
from titan.migrate.plan import homes as homes_table
from titan.migrate.plan.carry import carry, optimizer, unaccounted, validation_shape
from titan.migrate.plan.comments import carry_comments
from titan.migrate.plan.converters import converters
from titan.migrate.plan.custom_modules import combined, custom_classes, custom_module
from titan.migrate.plan.draft import PlanDraft
from titan.migrate.plan.legacy_values import copy_value, schema_default
from titan.migrate.plan.migration_plan import KeyOutcome, Plan
from titan.migrate.plan.model_keys import model, tokenizer_path
from titan.migrate.plan.trainers import trainer_class
from titan.migrate.plan.upgrades import Upgrade
from titan.migrate.targets.config_objects import default_object
from titan.schemas.builtin_extensions import KNOWN_EXTENSIONS
from titan.schemas.diagnostics import Diagnostic, Severity, Span
from titan.schemas.spec import SectionSpec
from titan.schemas.toml_check import CheckOptions, FileCheck, check_file, check_sections


def function_name(path: str | Path, model_name: Any) -> str:
    """``<family>_<stem>``: ``debug_model`` -> ``debugmodel``, ``.`` -> ``_``, no doubled prefix.

    The family is the legacy ``model.name`` (``llama3_ft/debug_model.toml`` ->
    ``llama3_ft_debugmodel``). The name is made a public ASCII identifier
    (:func:`titan.migrate.codegen.names.public_identifier`: ``_x`` -> ``x``, ``a-b`` -> ``a_b``),
    and a name the generated module cannot define (``llama3`` is also an imported package,
    ``list`` a builtin, ``class`` a keyword) gets a ``_`` suffix (:func:`natural_function_name`
    is the name before both)."""
    return names.free_name(names.public_identifier(natural_function_name(path, model_name)))


def natural_function_name(path: str | Path, model_name: Any) -> str:
    """The function name the file and model ask for, before it is made a public identifier
    and reserved names are avoided."""
    stem = Path(path).stem.replace("debug_model", "debugmodel").replace(".", "_")
    family = model_name if isinstance(model_name, str) and model_name else "llama3"
    family = family.replace(".", "_").replace("/", "_")
    name = stem if stem == family or stem.startswith(f"{family}_") else f"{family}_{stem}"
    return name.lower()


def build_plan(
    path: str | Path,
    *,
    overrides: Sequence[str] = (),
    fix_stale_names: bool = False,
    options: CheckOptions | None = None,
    shown: str | None = None,
    function: str | None = None,
    model_registries: Mapping[str, str] | None = None,
    era: str | None = None,
    sections: Mapping[str, Any] | None = None,
) -> Plan:
    """Check ``path`` (with legacy flags ``overrides`` applied) and plan its migration.

    ``model_registries`` (``--model-registry NAME=package.module``) and the project's declared
    ``[tool.titan] model-registries`` name the packages of model families titan does not ship;
    the command line wins. ``era`` (``--era YYYY-MM[-DD]``) dates the file for its era's defaults
    instead of the evidence it holds (:mod:`titan.schemas.era_defaults`). ``sections`` (the
    legacy sections as a dict) are planned instead of the file, ``path`` then only naming them
    (the working folder's project applies)."""
    shown = shown or str(path)
    from titan.schemas import era_pragma, project

    era_source = "--era"
    if era is None and sections is None:  # the file may say when it was written
        from titan.schemas.toml_source import read_text

        era, era_source = era_pragma.era_of(read_text(path, shown=shown)[0]), era_pragma.SOURCE
    check, override_values, upgrade = _check(
        path,
        overrides,
        options or CheckOptions(),
        shown,
        era=era,
        era_source=era_source,
        project_era=project.for_file(path).era,
        sections=sections,
    )
    document = check.document
    model = (document or {}).get("model")
    # A `model` that is not a table is a finding of the check; the name then falls back.
    model_name = model.get("name", "llama3") if isinstance(model, dict) else "llama3"
    plan = Plan(shown, function or function_name(path, model_name))
    plan.diagnostics = list(check.diagnostics)
    if function is None:
        wanted = natural_function_name(path, model_name)
        if wanted != plan.function:
            plan.diagnostics.append(_renamed_function(wanted, plan.function, shown))
    plan.text = check.text
    if document is None or check.schema is None:
        return plan  # unreadable, not TOML, or its custom module could not be read
    registries = _model_registries(path, model_registries or {})
    user_extension = combined([e for e in check.extensions if e.module not in KNOWN_EXTENSIONS])
    fill(
        PlanDraft(
            plan,
            check,
            override_values,
            fix_stale_names,
            model_registries=registries,
            user_extension=user_extension,
            fork=_fork(path),
        )
    )
    _unresolved(plan)
    upgrade.record_era(plan, outcome=KeyOutcome)
    flavor_era.apply(plan, upgrade.assumed, dated_by=upgrade.dated_by())
    measured.settle(plan, outcome=KeyOutcome)
    upgrade.record(plan, check, outcome=KeyOutcome)
    plan.behaviour_changes = measured.behaviour_changes(plan)
    return plan


def _unresolved(plan: Plan) -> None:
    """An app config's value that only Forge can compute (``${oc.env:...}``) was not read: the
    migration is not lossless until a human writes it."""
    for finding in plan.diagnostics:
        if finding.code == "interpolation":
            plan.todo("", f"set {finding.path}: the app config computes it at run time")


def _model_registries(path: str | Path, given: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """Model name -> (package, where it is declared): the project's declaration, then the
    command line's ``--model-registry`` over it."""
    from titan.schemas import project

    found = {
        name: (module, "declared in pyproject.toml")
        for name, module in project.for_file(path).model_registries
    }
    found.update((name, (module, "--model-registry")) for name, module in given.items())
    return found


def _fork(path: str | Path) -> Any:
    """The flavors, converters and model registries the project of ``path`` declares."""
    from titan.schemas import fork_names, project

    return fork_names.for_declaration(project.for_file(path))


def _renamed_function(wanted: str, name: str, shown: str) -> Diagnostic:
    """The finding that the registry function is not named as the file asks (a reserved name)."""
    return Diagnostic(
        code="renamed-function",
        severity=Severity.INFO,
        path="",
        message=f"the registry function is `{name}`: {names.rename_reason(wanted)}",
        hint=f"run it as `--config {name}`; the name comes from the TOML's file name (and its "
        "model.name): rename the file for another",
        span=Span(file=shown, line=1, col=1),
    )


def _check(
    path: str | Path,
    overrides: Sequence[str],
    options: CheckOptions,
    shown: str,
    *,
    era: str | None = None,
    era_source: str = "--era",
    project_era: str | None = None,
    sections: Mapping[str, Any] | None = None,
) -> tuple[FileCheck, dict[str, Any], Upgrade]:
    """The validator's check of the file, upgraded from older torchtitan eras (``titan.schemas.eras``)
    and with the override flags applied on top, before the rules: the plan is built from the
    document a v0.2.2 run of the upgraded file would read."""
    from titan.migrate.plan.overrides import apply_overrides, custom_module_flag, parse_overrides

    parsed: dict[str, Any] = {}
    module = custom_module_flag(list(overrides)) if overrides else None
    if module is not None:
        options = _with_extension(options, module)

    def adjust(
        document: dict, schema: SectionSpec, dated: tuple[str, str] | None = None
    ) -> tuple[dict, list[Diagnostic], str | None]:
        """The document upgraded through the era chain, with the override flags applied, and
        the day of the era it is read in (``None``: v0.2.2)."""
        upgrade.dated = dated
        if not overrides:
            return upgrade.adjust(document, schema), [], upgrade.day
        result = parse_overrides(list(overrides), schema)
        parsed.update(result.values)
        upgrade.overridden = frozenset(result.values)
        # the flags were the run's command line: an era default computed from another setting
        # (a warmup that was a share of training.steps) is computed from the flag's value
        upgrade.flags = dict(result.values)
        document = upgrade.adjust(document, schema)
        return apply_overrides(document, result.values), list(result.diagnostics), upgrade.day

    def check(options: CheckOptions) -> FileCheck:
        """The validator's check of the file, or of the sections in memory."""
        if sections is not None:
            return check_sections(sections, options, file=shown, adjust=adjust)
        return check_file(path, options, shown=shown, adjust=adjust)

    upgrade = Upgrade(era=era, era_source=era_source, project_era=project_era)
    checked = check(options)
    written = upgrade.module()
    if written is not None and written not in {e.module for e in checked.extensions}:
        # v0.1.0's fault-tolerance keys now need their module, which the file did not name:
        # check again with it merged, as v0.2.2 would read the upgraded file.
        parsed.clear()
        old = frozenset(step.old for step in upgrade.steps)
        upgrade = Upgrade(old=old, era=era, era_source=era_source, project_era=project_era)
        checked = check(_with_extension(options, written))
    upgrade.respan(checked)
    return checked, parsed, upgrade


def _with_extension(options: CheckOptions, module: str) -> CheckOptions:
    """``options`` with one more custom config module to merge."""
    import dataclasses

    return dataclasses.replace(options, extensions=(*options.extensions, module))


def fill(draft: PlanDraft) -> None:
    """Run the plan's steps over ``draft``, in the order their findings and outcomes depend on:
    the trainer class and custom classes first (they make the tree), then every key carried, then
    the keys whose steps read the carried tree, then the safety net and the comments."""
    plan = draft.plan
    description = draft.leaves.get("job.description")
    plan.description = description if isinstance(description, str) else None
    draft.base_trainer = trainer_class(draft)
    trainer = custom_classes(draft, trainer=draft.base_trainer)
    custom_module(draft)
    draft.root = default_object(trainer)
    for key, value in draft.leaves.items():
        carry(draft, key=key, value=value)
    model(draft)
    tokenizer_path(draft)
    converters(draft)
    optimizer(draft)
    validation_shape(draft)
    unaccounted(draft)
    plan.root = draft.root
    plan.user_extension = draft.user_extension
    plan.spans = {
        ".".join(parts): Span(file=plan.source, line=found.line, col=found.col)
        for parts, found in draft.check.spans.items()
        if all(isinstance(p, str) for p in parts)
    }
    plan.defaults = _base_defaults(draft.schema)
    plan.effective = {
        key: copy_value(default if draft.is_blocked(key) else draft.leaves.get(key, default))
        for key, default in plan.defaults.items()
    }
    forge_apps.checkpoint_folder(draft)  # corrects plan.effective for a Forge engine's folder
    forge_apps.todos(draft)
    carry_comments(draft)


def _base_defaults(schema: SectionSpec) -> dict[str, Any]:
    """Each v0.2.2 base-schema key -> its default in ``schema`` (a custom module may change
    one), in schema order."""
    return {key: schema_default(schema, key) for key in homes_table.base_homes()}
