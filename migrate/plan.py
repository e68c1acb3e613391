"""The migration plan: a legacy TOML (plus legacy command-line overrides) as titan config objects.

:func:`build_plan` reads and checks one TOML exactly as ``titan-validate`` does, then puts every
key's value at its home (``migrate/homes.py``) inside the default config tree of the right trainer
class (``migrate/targets/config_objects.py``). What cannot be carried is recorded, never lost silently: every key
of the input gets a :class:`KeyOutcome`, and everything dropped, inert, renamed or changing
behaviour gets a diagnostic with a stable code. Two renderers read the plan: code
(``migrate/codegen/render_code.py``, a ``config_registry.py`` module) and live (``migrate/targets/live.py``, the
same config objects in memory), so a TOML run and its generated registry run cannot differ.

The plan never imports titan: the classes are named by path and their defaults come from the
generated ``migrate/targets/titan_spec.py``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from migrate import homes as homes_table
from migrate.codegen import names
from migrate.extension_classes import GeneratedClass, GeneratedField, generate_classes
from migrate.targets.config_objects import (
    ClassInfo,
    Default,
    Obj,
    RegistryCall,
    UnsupportedModel,
    default_object,
    same,
)
from migrate.upgrades import Upgrade
from schemas import rules
from schemas.builtin_extensions import KNOWN_EXTENSIONS
from schemas.diagnostics import Diagnostic, Severity, Span
from schemas.spec import MISSING, ExtensionSpec, SectionSpec
from schemas.toml_check import CheckOptions, FileCheck, check_file

TRAINER = homes_table.TRAINER
FT_TRAINER = "titan.experiments.ft.trainer:FaultTolerantTrainer.Config"
FLUX_TRAINER = "titan.models.flux.trainer:FluxTrainer.Config"
IN_BACKWARD = "titan.components.optimizer:OptimizersInBackwardContainer.Config"

MODEL_TRAINERS = {"llama3_ft": FT_TRAINER, "flux": FLUX_TRAINER}
"""``model.name`` values that need a trainer subclass even when none of their keys is written."""

EXTENSION_TRAINERS = {"ft": FT_TRAINER, "flux": FLUX_TRAINER}
"""Built-in custom config modules whose sections live on a trainer subclass."""

TITAN_FAMILIES = names.FAMILIES
"""Model families titan has registries for (``titan.models.SUPPORTED_MODELS``; a test keeps
the two equal, this module cannot import titan)."""

FAMILY_ALIASES = {"llama3_ft": "llama3"}

BLOCKING_CODES = frozenset(
    {
        "unknown-key",
        "wrong-type",
        "invalid-choice",
        "invalid-value",
        "out-of-range",
        "moved-key",
        "ignored-key",
    }
)
"""Findings on a key that make its value impossible to carry (it is reported instead)."""

VALIDATION_SHAPE = {
    "validation.local_batch_size": "training.local_batch_size",
    "validation.seq_len": "training.seq_len",
}
"""Legacy validation shape keys and the training keys titan's validator follows when unset."""


class KeyOutcome:
    """What became of one input key."""

    __slots__ = ("key", "status", "paths", "note", "era")

    STATUSES = (
        "carried",
        "default",
        "structural",
        "upgraded",
        "renamed",
        "dropped",
        "inert",
        "rejected",
    )
    """``carried``: written at ``paths``; ``default``: the value equals the target default, so
    nothing needs writing; ``structural``: it chose a class or object; ``upgraded``: a key of an
    older torchtitan carried through its v0.2.2 form (``schemas.eras``; the note names the era and
    the v0.2.2 keys); ``renamed``: carried under a new name (stale converter names with
    ``--fix-stale-names``); ``dropped``: titan has no place for it (or, from an older torchtitan,
    v0.2.2 had none); ``inert``: it had no effect in v0.2.2 either; ``rejected``: invalid, not
    carried."""

    def __init__(
        self, key: str, status: str, paths: tuple[str, ...] = (), note: str = "", era: str = ""
    ) -> None:
        assert status in self.STATUSES, status
        self.key = key
        self.status = status
        self.paths = paths
        self.note = note
        self.era = era
        """For a key of an older torchtitan: where and when it lived (``schemas.eras``)."""

    def __repr__(self) -> str:
        era = f", era={self.era!r}" if self.era else ""
        return f"KeyOutcome({self.key!r}, {self.status!r}, {self.paths!r}, {self.note!r}{era})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KeyOutcome):
            return NotImplemented
        return (self.key, self.status, self.paths, self.note, self.era) == (
            other.key,
            other.status,
            other.paths,
            other.note,
            other.era,
        )

    __hash__ = None  # type: ignore[assignment]


class Plan:
    """One legacy TOML as titan config objects, plus everything the report must say."""

    __slots__ = (
        "source",
        "function",
        "description",
        "root",
        "classes",
        "diagnostics",
        "outcomes",
        "comments",
        "preamble",
        "todos",
        "extension",
        "module_files",
        "declared_extensions",
        "text",
        "effective",
        "target",
        "locals",
        "user_extension",
        "spans",
    )

    def __init__(self, source: str, function: str) -> None:
        self.source = source
        """The file as the user named it."""
        self.function = function
        """Name of the registry function."""
        self.description: str | None = None
        """``job.description``: the docstring."""
        self.root: Obj | None = None
        """The config, ``None`` when the file could not be read or parsed."""
        self.classes: list[GeneratedClass] = []
        """Classes generated for a custom config module, in dependency order."""
        self.diagnostics: list[Diagnostic] = []
        """The validator's findings on the file, then the migration's own."""
        self.outcomes: dict[str, KeyOutcome] = {}
        """Every input key (dotted) -> what became of it, in file order."""
        self.comments: dict[str, tuple[tuple[str, ...], str | None]] = {}
        """Config path -> (leading comment lines, trailing comment) carried from the TOML."""
        self.preamble: tuple[str, ...] = ()
        """The file's leading comment block."""
        self.todos: dict[str, list[str]] = {}
        """Config path (``""`` for the whole function) -> things a human must decide."""
        self.extension: str | None = None
        """The custom config module (its short name when it is a built-in one)."""
        self.module_files: tuple[str, ...] = ()
        """The custom config module files read for this TOML (inputs, never to be written)."""
        self.declared_extensions: tuple[str, ...] = ()
        """The modules merged because the project declares them (``[tool.titan] extensions``)."""
        self.text: str | None = None
        """The TOML source, for reports that show the line of a finding."""
        self.effective: dict[str, Any] = {}
        """Every v0.2.2 base-schema key -> the value a v0.2.2 run of the file used (written or
        default, after the era chain and overrides); an invalid key (rejected, reported) has its
        default, as in the titan config. Other targets (``migrate/targets/upstream.py``) are built
        from it."""
        self.target = "titan"
        """The trainer the config is written for (``migrate.targets.choice``)."""
        self.user_extension: ExtensionSpec | None = None
        """The user's custom config modules merged into one (built-in ones excluded)."""
        self.spans: dict[str, Span] = {}
        """Dotted key -> where the file writes it."""
        self.locals: dict[str, Any] = {}
        """Names the function assigns before building the config (``model_spec``), referred to
        by :class:`~migrate.targets.config_objects.Local` values in the tree."""

    @property
    def ok(self) -> bool:
        """Whether a config was produced."""
        return self.root is not None

    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity is Severity.ERROR]

    def lossless(self) -> bool:
        """Every key carried (or already the default, or upgraded from an older torchtitan),
        nothing dropped, inert or rejected."""
        return self.ok and all(
            o.status in ("carried", "default", "structural", "upgraded")
            for o in self.outcomes.values()
        )

    def todo(self, path: str, text: str) -> None:
        self.todos.setdefault(path, []).append(text)


# --------------------------------------------------------------------------- names


def function_name(path: str | Path, model_name: Any) -> str:
    """``<family>_<stem>``: ``debug_model`` -> ``debugmodel``, ``.`` -> ``_``, no doubled prefix.

    The family is the legacy ``model.name`` (``llama3_ft/debug_model.toml`` ->
    ``llama3_ft_debugmodel``); anything that is not an identifier character becomes ``_``. A name
    the generated module cannot define (``llama3`` is also an imported package, ``list`` a
    builtin, ``class`` a keyword) gets a ``_`` suffix (:func:`natural_function_name` is the name
    before that)."""
    return names.free_name(natural_function_name(path, model_name))


def natural_function_name(path: str | Path, model_name: Any) -> str:
    """The function name the file and model ask for, before reserved names are avoided."""
    stem = Path(path).stem.replace("debug_model", "debugmodel").replace(".", "_")
    family = model_name if isinstance(model_name, str) and model_name else "llama3"
    family = family.replace(".", "_").replace("/", "_")
    name = stem if stem == family or stem.startswith(f"{family}_") else f"{family}_{stem}"
    name = re.sub(r"\W", "_", name, flags=re.ASCII).lower()
    if not name or name[0].isdigit():
        name = f"config_{name}"
    return name[:60]  # `def <name>() -> X.Config:` must fit the 100-column line


# --------------------------------------------------------------------------- reading


def flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted leaf key -> value (arrays of tables stay values of their key)."""
    leaves: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            if not value:
                leaves[f"{prefix}{key}"] = value  # an empty table is still an input key
            leaves |= flatten(value, f"{prefix}{key}.")
        else:
            leaves[f"{prefix}{key}"] = value
    return leaves


def schema_default(schema: SectionSpec, key: str) -> Any:
    section: Any = schema
    spec = None
    for part in key.split("."):
        spec = section.field(part) if isinstance(section, SectionSpec) else None
        if spec is None:
            return MISSING
        section = spec.annotation
    return spec.default


def copy_value(value: Any) -> Any:
    """A deep copy of a TOML value (so two homes never share one list)."""
    if isinstance(value, list):
        return [copy_value(v) for v in value]
    if isinstance(value, dict):
        return {k: copy_value(v) for k, v in value.items()}
    return value


# --------------------------------------------------------------------------- the builder


def build_plan(
    path: str | Path,
    *,
    overrides: Sequence[str] = (),
    fix_stale_names: bool = False,
    options: CheckOptions | None = None,
    shown: str | None = None,
    function: str | None = None,
    model_registries: Mapping[str, str] | None = None,
) -> Plan:
    """Check ``path`` (with legacy flags ``overrides`` applied) and plan its migration.

    ``model_registries`` (``--model-registry NAME=package.module``) and the project's declared
    ``[tool.titan] model-registries`` name the packages of model families titan does not ship;
    the command line wins."""
    shown = shown or str(path)
    check, override_values, upgrade = _check(path, overrides, options or CheckOptions(), shown)
    document = check.document
    model_name = (document or {}).get("model", {}).get("name", "llama3")
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
    _Builder(plan, check, override_values, fix_stale_names, registries).build()
    upgrade.record(plan, check, outcome=KeyOutcome)
    return plan


def _model_registries(path: str | Path, given: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """Model name -> (package, where it is declared): the project's declaration, then the
    command line's ``--model-registry`` over it."""
    from schemas import project

    found = {
        name: (module, "declared in pyproject.toml")
        for name, module in project.for_file(path).model_registries
    }
    found.update((name, (module, "--model-registry")) for name, module in given.items())
    return found


def _renamed_function(wanted: str, name: str, shown: str) -> Diagnostic:
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
    path: str | Path, overrides: Sequence[str], options: CheckOptions, shown: str
) -> tuple[FileCheck, dict[str, Any], Upgrade]:
    """The validator's check of the file, upgraded from older torchtitan eras (``schemas.eras``)
    and with the override flags applied on top, before the rules: the plan is built from the
    document a v0.2.2 run of the upgraded file would read."""
    from migrate.overrides import apply_overrides, custom_module_flag, parse_overrides

    parsed: dict[str, Any] = {}
    module = custom_module_flag(list(overrides)) if overrides else None
    if module is not None:
        options = _with_extension(options, module)

    def adjust(document: dict, schema: SectionSpec) -> tuple[dict, list[Diagnostic]]:
        document = upgrade.adjust(document, schema)
        if not overrides:
            return document, []
        result = parse_overrides(list(overrides), schema)
        parsed.update(result.values)
        upgrade.overridden = frozenset(result.values)
        return apply_overrides(document, result.values), list(result.diagnostics)

    upgrade = Upgrade()
    check = check_file(path, options, shown=shown, adjust=adjust)
    written = upgrade.module()
    if written is not None and written not in {e.module for e in check.extensions}:
        # v0.1.0's fault-tolerance keys now need their module, which the file did not name:
        # check again with it merged, as v0.2.2 would read the upgraded file.
        parsed.clear()
        upgrade = Upgrade(old=frozenset(step.old for step in upgrade.steps))
        check = check_file(path, _with_extension(options, written), shown=shown, adjust=adjust)
    upgrade.respan(check)
    return check, parsed, upgrade


def _with_extension(options: CheckOptions, module: str) -> CheckOptions:
    import dataclasses

    return dataclasses.replace(options, extensions=(*options.extensions, module))


class _Builder:
    """Fills one :class:`Plan` from a checked document."""

    def __init__(
        self,
        plan: Plan,
        check: FileCheck,
        overrides: dict[str, Any],
        fix_stale_names: bool,
        model_registries: dict[str, tuple[str, str]] | None = None,
    ) -> None:
        self.plan = plan
        self.plan_model_registries = model_registries or {}
        """Legacy model name -> (package with ``model_registry``, where it was declared)."""
        self.check = check
        self.schema: SectionSpec = check.schema  # type: ignore[assignment]
        self.document: dict[str, Any] = check.document  # type: ignore[assignment]
        self.leaves = flatten(self.document)
        self.overrides = overrides
        self.fix_stale_names = fix_stale_names
        self.blocked = self._blocked_keys()
        module = self.leaves.get("job.custom_config_module")
        extension_modules = [e.module for e in check.extensions]
        if not isinstance(module, str) and extension_modules:
            module = extension_modules[0]  # given on the command line
        self.extension = KNOWN_EXTENSIONS.get(module, module) if isinstance(module, str) else None
        plan.extension = self.extension
        plan.module_files = tuple(e.file for e in check.extensions if e.file)
        plan.declared_extensions = check.declared
        self.user_extension = _combined(
            [e for e in check.extensions if e.module not in KNOWN_EXTENSIONS]
        )
        self.uncarried: dict[str, str] = {}
        """Keys of the custom module's classes that cannot be carried, with why."""
        self.redeclared: frozenset[str] = frozenset()
        """Those of them the legacy run used as another kind than titan's config has."""

    # ----------------------------------------------------------------- helpers

    def span(self, key: str) -> Span:
        parts = tuple(key.split("."))
        found = None
        while parts and found is None:
            key_span = self.check.spans.get(parts)
            if key_span is not None:
                found = Span(file=self.plan.source, line=key_span.line, col=key_span.col)
            parts = parts[:-1]
        return found or Span(file=self.plan.source, line=1, col=1)

    def report(
        self,
        code: str,
        key: str,
        message: str,
        hint: str | None = None,
        severity: Severity = Severity.WARNING,
    ) -> None:
        self.plan.diagnostics.append(
            Diagnostic(
                code=code,
                severity=severity,
                path=key,
                message=message,
                hint=hint,
                span=self.span(key),
            )
        )

    def outcome(self, key: str, status: str, paths: tuple[str, ...] = (), note: str = "") -> None:
        if key in self.leaves:
            self.plan.outcomes[key] = KeyOutcome(key, status, paths, note)

    def _blocked_keys(self) -> set[str]:
        """Keys with a finding that makes their value impossible to carry."""
        blocked = set()
        for finding in self.check.diagnostics:
            if finding.code in BLOCKING_CODES and finding.severity is Severity.ERROR:
                blocked.add(finding.path)
        return blocked

    def is_blocked(self, key: str) -> bool:
        parts = key.split(".")
        return any(".".join(parts[:end]) in self.blocked for end in range(1, len(parts) + 1))

    def set(self, path: str, value: Any) -> None:
        """Put ``value`` at a config path of the tree."""
        *parents, name = path.split(".")
        node: Any = self.root
        for part in parents:
            node = node.fields[part]
            if not isinstance(node, Obj):
                raise KeyError(path)
        if name not in node.fields:
            raise KeyError(path)
        node.fields[name] = copy_value(value)

    # ----------------------------------------------------------------- the steps

    def build(self) -> None:
        plan = self.plan
        description = self.leaves.get("job.description")
        plan.description = description if isinstance(description, str) else None
        self.base_trainer = self.trainer_class()
        trainer = self.custom_classes(self.base_trainer)
        self.custom_module()
        self.root = default_object(trainer)
        for key, value in self.leaves.items():
            self.carry(key, value)
        self.model()
        self.tokenizer_path()
        self.converters()
        self.optimizer()
        self.validation_shape()
        self.unaccounted()
        plan.root = self.root
        plan.user_extension = self.user_extension
        plan.spans = {
            ".".join(parts): Span(file=plan.source, line=found.line, col=found.col)
            for parts, found in self.check.spans.items()
            if all(isinstance(p, str) for p in parts)
        }
        plan.effective = {
            key: copy_value(default if self.is_blocked(key) else self.leaves.get(key, default))
            for key, default in _base_defaults(self.schema).items()
        }
        self.comments()

    def trainer_class(self) -> str:
        """The trainer config class the keys need (base, fault-tolerant or Flux)."""
        wanted: dict[str, str] = {}
        model_name = self.leaves.get("model.name")
        if model_name in MODEL_TRAINERS:
            wanted[MODEL_TRAINERS[model_name]] = "model.name"
        if self.extension in EXTENSION_TRAINERS:
            wanted.setdefault(EXTENSION_TRAINERS[self.extension], "job.custom_config_module")
        for key, value in self.leaves.items():
            found = homes_table.home(key, extension=self.extension)
            if found is None or found.trainer == TRAINER or self.is_blocked(key):
                continue
            if found.kind != "dropped" and not same(value, schema_default(self.schema, key)):
                wanted.setdefault(found.trainer, key)
        if len(wanted) > 1:
            names = ", ".join(
                f"{cls.rpartition(':')[2]} (for {key})" for cls, key in wanted.items()
            )
            first = next(iter(wanted))
            self.report(
                "trainer-conflict",
                next(iter(wanted.values())),
                f"the keys need different trainers: {names}; using the first",
                "split the file in two, one TOML per trainer, or delete the keys of the trainer "
                "you do not mean",
                severity=Severity.ERROR,
            )
            self.plan.todo("", f"the keys need different trainers: {names}")
            return first
        return next(iter(wanted), TRAINER)

    def carry(self, key: str, value: Any) -> None:
        """Put one input key at its home, or record why it cannot go anywhere."""
        if isinstance(value, dict) and not value and not self.is_blocked(key):
            # an empty table sets nothing: every key of the section keeps its default
            self.outcome(key, "default", note="an empty table")
            return
        if self.is_blocked(key):
            self.outcome(key, "rejected", note="invalid: see the finding at this key")
            self.plan.todo("", f"`{key} = {_show(value)}` was not carried: it is invalid")
            return
        parts = key.split(".")
        owner = next(
            (
                ".".join(parts[:end])
                for end in range(len(parts), 0, -1)
                if ".".join(parts[:end]) in self.redeclared
            ),
            None,
        )
        noted = self.uncarried.get(owner) if owner is not None else None
        if noted is not None:  # redeclared as another kind: titan's home would misread it
            self.outcome(key, "dropped", note=noted)
            self.report(
                "dropped-key",
                key,
                f"`{key} = {_show(value)}` is not carried: {noted}",
                "give the value a field of its own in the custom module (a new name), or set it "
                "in the registry function by hand",
                severity=Severity.ERROR,  # the legacy run used it; the migrated one cannot
            )
            self.plan.todo("", f"`{key} = {_show(value)}` is not carried")
            return
        found = homes_table.home(key, extension=self.extension)
        if found is None:
            self.carry_custom(key, value)
            return
        if found.kind == "structural" or found.kind == "converter":
            return  # model(), converters(), optimizer() and custom_classes() handle these
        if key in VALIDATION_SHAPE:
            return  # validation_shape()
        if found.kind == "dropped":
            self.drop(key, value, found.note)
            return
        paths = (found.path, *found.also)
        if found.trainer not in (TRAINER, self.base_trainer):
            if same(value, schema_default(self.schema, key)):
                self.outcome(key, "default", note="the default; needs no trainer subclass")
            else:
                self.drop(key, value, f"needs {found.trainer.rpartition(':')[2]}")
            return
        try:
            if same(value, self.root.get(found.path)) and all(
                same(value, self.root.get(p)) for p in found.also
            ):
                self.outcome(key, "default", paths)
                return
            for path in paths:
                self.set(path, value)
        except (KeyError, AttributeError):  # a custom module replaced the object it lives in
            self.outcome(key, "dropped", note="its home is not a config object in this config")
            self.report(
                "dropped-key",
                key,
                f"`{key} = {_show(value)}` is not carried: its home `{found.path}` is not part "
                "of the generated config (a custom config module redeclares a section on its way)",
                "move the value into the custom module's own field, or drop the redeclaration",
                severity=Severity.ERROR,
            )
            self.plan.todo("", f"`{key} = {_show(value)}` is not carried")
            return
        self.outcome(key, "carried", paths, found.note if found.kind == "moved" else "")

    def drop(self, key: str, value: Any, why: str) -> None:
        default = schema_default(self.schema, key)
        if same(value, default):
            self.outcome(key, "dropped", note=f"{why} (the value was the default)")
            self.report(
                "dropped-key",
                key,
                f"`{key}` is not carried: {why}; the file wrote its default",
                "delete the key: it sets the default, so the run is the same without it",
                severity=Severity.INFO,
            )
            return
        self.outcome(key, "dropped", note=why)
        self.report(
            "dropped-key",
            key,
            f"`{key} = {_show(value)}` is not carried: {why}",
            "check that the run does without it (a TODO in the generated module lists it), "
            "then delete it from the TOML",
        )
        self.plan.todo("", f"`{key} = {_show(value)}` is not carried: {why}")

    # ----------------------------------------------------------------- structural keys

    def model(self) -> None:
        name = self.leaves.get("model.name", schema_default(self.schema, "model.name"))
        flavor = self.leaves.get("model.flavor", schema_default(self.schema, "model.flavor"))
        keys = [k for k in ("model.name", "model.flavor") if k in self.leaves]
        if (
            not isinstance(name, str)
            or not isinstance(flavor, str)
            or any(map(self.is_blocked, keys))
        ):
            return  # reported by the check
        family = FAMILY_ALIASES.get(name, name)
        from schemas import flavors

        if family in TITAN_FAMILIES and flavor in (flavors.flavor_names(family) or ()):
            self.root.fields["model_spec"] = RegistryCall(family, flavor)
            for key in keys:
                self.outcome(key, "structural", ("model_spec",))
            return
        declared = self.plan_model_registries.get(name)
        if declared is not None:  # the user's own family (or flavors titan does not ship)
            module, origin = declared
            self.plan.diagnostics = [  # answered: the model is the user's declared family
                d
                for d in self.plan.diagnostics
                if not (d.code in ("unknown-model", "unknown-flavor") and d.path in keys)
            ]
            self.root.fields["model_spec"] = RegistryCall(name, flavor, module=module)
            for key in keys:
                self.outcome(key, "structural", ("model_spec",), f"{module}.model_registry")
            self.report(
                "custom-model",
                keys[0] if keys else "model.name",
                f"`{name}` flavor `{flavor}` comes from {module}.model_registry ({origin}); "
                "titan does not check its flavors or train it without that package",
                f"make sure {module} is importable where the registry runs (titan-train imports "
                "it by that name)",
                severity=Severity.INFO,
            )
            return
        why = (
            f"titan has no `{name}` model family"
            if family not in TITAN_FAMILIES
            else f"`{name}` has no flavor `{flavor}`"
        )
        self.root.fields["model_spec"] = UnsupportedModel(name, flavor)
        for key in keys:
            self.outcome(key, "structural", ("model_spec",), why)
        self.report(
            "unsupported-model",
            keys[0] if keys else "model.name",
            f"{why}: the config records the model by name but titan cannot train it",
            f"declare the family: titan-migrate --model-registry {name}=PACKAGE.MODULE (or "
            "[tool.titan] model-registries in pyproject.toml); until then the generated config "
            "records it with titan.models.unsupported_model(name, flavor)",
        )
        self.plan.todo("model_spec", f"{why}; choose a model_registry(...) titan can train")

    def tokenizer_path(self) -> None:
        """v0.2.2 copied the deprecated ``model.tokenizer_path`` over ``hf_assets_path`` after
        loading, so the run read its tokenizer (and HF assets) from there, whatever
        ``model.hf_assets_path`` said."""
        key, other = "model.tokenizer_path", "model.hf_assets_path"
        value = self.leaves.get(key)
        if key not in self.leaves or self.is_blocked(key) or not isinstance(value, str):
            return
        found = homes_table.home(key, extension=self.extension)
        self.set(found.path, value)
        self.outcome(key, "carried", (found.path,), found.note)
        if other in self.leaves and not self.is_blocked(other):
            if same(self.leaves[other], value):
                self.outcome(other, "carried", (found.path,))
                return
            self.outcome(other, "inert", note="v0.2.2 replaced it with model.tokenizer_path")
            self.report(
                "behaviour-change",
                other,
                f"`{other} = {_show(self.leaves[other])}` had no effect: v0.2.2 replaced it with "
                f"`{key} = {_show(value)}`, so the migrated config reads its assets from there",
                "delete model.tokenizer_path and set model.hf_assets_path to the folder you mean",
                severity=Severity.WARNING,
            )

    def unaccounted(self) -> None:
        """Every input key gets an outcome: one that no step placed is reported, never lost."""
        for key, value in self.leaves.items():
            if key in self.plan.outcomes:
                continue
            self.outcome(key, "dropped", note="titan-migrate has no rule for this key")
            self.report(
                "dropped-key",
                key,
                f"`{key} = {_show(value)}` is not carried: titan-migrate has no rule for it",
                "set its registry field by hand (titan-validate --config checks the result) and "
                "report the key to titan",
                severity=Severity.ERROR,
            )
            self.plan.todo("", f"`{key} = {_show(value)}` is not carried")

    def converters(self) -> None:
        """``model.converters`` in order, each carrying its ``[quantize.*]`` table.

        A stale name (``"float8"``) is carried only with ``--fix-stale-names``. Whether the
        legacy run had the converter depends on the file's era: a file whose old keys date it to
        when torchtitan registered the name (``rules.stale_name_dated``) ran with it, and the
        migrated config keeps it; a later file failed on the name, and enabling the converter is
        new."""
        names = self.leaves.get("model.converters", [])
        if self.is_blocked("model.converters") or not isinstance(names, list):
            names = []
        built: list[Obj] = []
        enabled: list[str] = []
        renamed = False
        original: dict | None = None
        stale: set[str] = set()  # targets reached through an old name
        twice = 0
        for name in names:
            target = name
            if name in rules.STALE_CONVERTER_NAMES:
                target = rules.STALE_CONVERTER_NAMES[name]
                if original is None:  # the file as written: the era chain moved its old keys
                    import tomllib

                    original = tomllib.loads(self.check.text or "")
                dated = rules.stale_name_dated(name, original)
                era, months = rules.STALE_NAME_ERAS[name].era, rules.STALE_NAME_ERAS[name].months
                if not self.fix_stale_names:
                    self.report(
                        "stale-name",
                        "model.converters",
                        f'converter "{name}" is not carried: it was {era}, and `{dated}` dates '
                        "this file there, so its run had the converter; v0.2.2 does not know "
                        "the name"
                        if dated
                        else f'converter "{name}" is not carried: it is a stale name v0.2.2 '
                        "failed on",
                        f'rerun with --fix-stale-names to keep it as "{target}"'
                        if dated
                        else f'rerun with --fix-stale-names to migrate it as "{target}", if the '
                        f"file dates from {months} (its run had the converter then)",
                    )
                    self.plan.todo(
                        "model_converters",
                        f'model.converters lists "{name}", the name of "{target}" {era}; rerun '
                        "with --fix-stale-names to keep the converter"
                        if dated
                        else f'model.converters lists the stale name "{name}" (v0.2.2 failed on '
                        f'it with KeyError); rerun with --fix-stale-names to enable "{target}"',
                    )
                    continue
                renamed = True
                self.resolved(name, target)
                self.report(
                    "stale-name",
                    "model.converters",
                    f'converter "{name}" is migrated as "{target}" (--fix-stale-names): it was '
                    f"{era}, and `{dated}` dates this file there, so the migrated config keeps "
                    "the converter its run had"
                    if dated
                    else f'converter "{name}" is migrated as "{target}" (--fix-stale-names); '
                    "v0.2.2 failed on the old name, so this run enables a converter the legacy "
                    "run never had",
                    "nothing to do; `titan-validate --fix` writes the new name into the TOML"
                    if dated
                    else f"keep it if the file dates from {months}, when its run had the "
                    f'converter; otherwise leave "{name}" out of model.converters',
                )
            if target in enabled and (name != target or target in stale):
                twice += 1  # listed twice through an old name (and the era chain's old switch)
                continue
            if name != target:
                stale.add(target)
            if target not in _converter_classes():
                self.plan.todo("model_converters", f"unknown converter {_show(name)} not carried")
                continue
            options = {
                found.path: value
                for key, value in self.leaves.items()
                if key.rpartition(".")[0] == target
                and (found := homes_table.home(key)) is not None
                and found.kind == "converter"
                and not self.is_blocked(key)
            }
            converter = default_object(_converter_classes()[target])
            converter.fields.update({k: copy_value(v) for k, v in options.items()})
            built.append(converter)
            enabled.append(target)
        if "model.converters" in self.leaves:
            if len(enabled) + twice == len(names):
                status = "renamed" if renamed else ("carried" if names else "default")
                self.outcome("model.converters", status, ("model_converters.converters",))
            else:
                self.outcome(
                    "model.converters",
                    "dropped",
                    note="names that are not registered converters were not carried",
                )
        self.root.fields["model_converters"].fields["converters"] = built
        self.converter_tables(enabled)
        if "quantize.linear.float8" in enabled:
            self.float8_tensor_parallel()

    def resolved(self, name: str, target: str) -> None:
        """Drop the validator's findings that ``--fix-stale-names`` answered: the unknown name
        and the table it made inert (the stale-name warning says what happened instead)."""
        self.plan.diagnostics = [
            d
            for d in self.plan.diagnostics
            if not (d.code == "unknown-converter" and f'"{name}"' in d.message)
            and not (d.code == "inert-section" and d.path == target)
        ]

    def converter_tables(self, enabled: list[str]) -> None:
        for key in self.leaves:
            found = homes_table.home(key)
            if found is None or found.kind != "converter" or self.is_blocked(key):
                continue
            table = key.rpartition(".")[0]
            if table in enabled:
                self.outcome(
                    key, "carried", (f"model_converters.converters[{table}].{found.path}",)
                )
                continue
            self.outcome(key, "inert", note=f"converter {table} is not enabled")
        inert = sorted(
            {k.rpartition(".")[0] for k, o in self.plan.outcomes.items() if o.status == "inert"}
        )
        for table in inert:
            self.plan.todo(
                "model_converters",
                f"[{table}] was inert in v0.2.2 (its converter is not in model.converters) and is "
                "not carried; list the converter to enable it",
            )

    def float8_tensor_parallel(self) -> None:
        tp = self.root.get("parallelism.tensor_parallel_degree")
        if isinstance(tp, int) and tp > 1:
            self.report(
                "behaviour-change",
                "model.converters",
                "with tensor parallel, v0.2.2 never used the float8 tensor-parallel plan (its "
                'parallelize functions looked for "float8" in model.converters); the registry-era '
                "trainer does, so float8 now also applies inside the TP-sharded linears",
                "compare the losses of a short run with the v0.2.2 run's before relying on it",
            )

    def optimizer(self) -> None:
        key = "optimizer.early_step_in_backward"
        value = self.leaves.get(key)
        if key not in self.leaves or self.is_blocked(key):
            return
        if value is True:
            old = self.root.fields["optimizer"]
            swapped = default_object(IN_BACKWARD)
            swapped.fields.update(old.fields)
            self.root.fields["optimizer"] = swapped
            self.outcome(key, "structural", ("optimizer",), "OptimizersInBackwardContainer.Config")
        else:
            self.outcome(key, "default", ("optimizer",))

    def validation_shape(self) -> None:
        """The legacy validation batch shape (8 x 2048) was independent of training; titan's
        validator follows training unless told, so write the legacy shape where they differ,
        whether or not the file has a [validation] table (validation can be switched on later
        with a flag)."""
        for key, training_key in VALIDATION_SHAPE.items():
            if self.is_blocked(key) or self.is_blocked(training_key):
                continue
            found = homes_table.home(key, extension=self.extension)
            legacy = self.leaves.get(key, schema_default(self.schema, key))
            training = self.leaves.get(training_key, schema_default(self.schema, training_key))
            if same(legacy, training):
                self.outcome(key, "default", (found.path,), "equal to the training value")
                continue
            self.set(found.path, legacy)
            self.outcome(key, "carried", (found.path,), found.note)
            if key not in self.leaves:
                self.plan.comments.setdefault(
                    found.path,
                    (
                        (f"legacy {key} defaulted to {legacy!r}, not to {training_key}",),
                        None,
                    ),
                )

    # ----------------------------------------------------------------- custom config modules

    def custom_classes(self, trainer: str) -> str:
        """Generate the classes of a user's custom config module; returns the trainer class."""
        extension = self.user_extension
        if extension is None:
            return trainer
        generated = generate_classes(extension, trainer, self.schema)
        self.plan.classes = generated.classes
        self.uncarried.update(generated.notes)
        self.redeclared = generated.redeclared
        for key, note in generated.notes:
            self.report(
                "extension-class",
                key,
                note,
                "rename the field in the custom config module (and its key in the TOMLs), or set "
                "the value by hand in the registry function",
                severity=Severity.WARNING,
            )
            self.plan.todo("", note)
        for key, text in generated.renames:
            self.report(
                "renamed-class",
                key,
                text,
                "the TOML keys are unchanged; only the generated class has another name",
                severity=Severity.INFO,
            )
        root = generated.root
        self.outcome(
            "job.custom_config_module", "structural", (), f"returns {root.rpartition(':')[2]}"
        )
        return root

    def custom_module(self) -> None:
        """A built-in custom module chooses the trainer class, or (experiments titan does not
        train) is reported with its keys."""
        key = "job.custom_config_module"
        if key not in self.leaves or key in self.plan.outcomes or self.is_blocked(key):
            return
        if self.extension in EXTENSION_TRAINERS:
            trainer = EXTENSION_TRAINERS[self.extension].rpartition(":")[2]
            self.outcome(key, "structural", (), f"its sections live on {trainer}")
        elif any(
            d.code == "extension-error" and d.path == key for d in self.check.diagnostics
        ):  # not found or unreadable: the finding says where it was looked for
            self.outcome(key, "rejected", note="the module could not be read: see the finding")
            self.plan.todo("", f"the custom config module {self.extension!r} could not be read")
        else:
            self.drop(key, self.leaves[key], f"titan has no {self.extension} trainer")

    def carry_custom(self, key: str, value: Any) -> None:
        """A key of a custom module: a field of a generated class, or of a dropped experiment."""
        path = _custom_path(key)
        try:
            current = self.root.get(path)
        except (KeyError, AttributeError):
            self.outcome(key, "dropped", note="no field for it in the generated classes")
            self.report(
                "dropped-key",
                key,
                f"`{key}` has no home in the generated classes",
                "declare it in the custom config module's dataclass for its section, or set it "
                "by hand in the registry function",
            )
            self.plan.todo("", f"`{key} = {_show(value)}` is not carried")
            return
        if same(value, current):
            self.outcome(key, "default", (path,))
            return
        self.set(path, value)
        self.outcome(key, "carried", (path,))

    # ----------------------------------------------------------------- comments

    def comments(self) -> None:
        """Carry the TOML's comments to the config paths their keys went to."""
        text = self.check.text
        if not text:
            return
        from migrate.tomledit.comments import preamble, toml_comments

        self.plan.preamble = preamble(text)
        for parts, found in toml_comments(text).items():
            if not all(isinstance(p, str) for p in parts):
                continue
            key = ".".join(parts)
            outcome = self.plan.outcomes.get(key)
            lines, trailing = tuple(found.leading), found.trailing
            if outcome is not None and outcome.status in ("carried", "renamed") and outcome.paths:
                path = outcome.paths[0]
            elif key in _SECTION_PATHS:
                path = _SECTION_PATHS[key]
            else:
                continue
            if "[" in path:
                continue  # inside the converter list: not addressable by a path
            old_lines, old_trailing = self.plan.comments.get(path, ((), None))
            self.plan.comments[path] = (old_lines + lines, old_trailing or trailing)


_SECTION_PATHS = {section: path for section, path in homes_table.SECTION_HOMES.items()}
_SECTION_PATHS["quantize.linear.float8"] = "model_converters"


def _combined(extensions: list[ExtensionSpec]) -> ExtensionSpec | None:
    """The user's custom config modules as one (the file's own, ``--extension`` ones and the
    project's declared ones), merged in order as the validator merged them into the schema:
    their sections live on one generated trainer subclass."""
    if len(extensions) <= 1:
        return extensions[0] if extensions else None
    from schemas.merge import merge_sections

    root = extensions[0].root
    for extension in extensions[1:]:
        root = merge_sections(root, extension.root)
    notes = tuple(note for extension in extensions for note in extension.notes)
    first = extensions[0]  # its name is the plan's extension: generated classes are keyed by it
    return ExtensionSpec(module=first.module, root=root, origin=first.origin, notes=notes)


def _base_defaults(schema: SectionSpec) -> dict[str, Any]:
    """Each v0.2.2 base-schema key -> its default in ``schema`` (a custom module may change
    one), in schema order."""
    return {key: schema_default(schema, key) for key in homes_table.base_homes()}


def _custom_path(key: str) -> str:
    """Where a custom module's key lives: its section's home, then the same field names."""
    parts = key.split(".")
    for end in range(len(parts) - 1, 0, -1):
        section = ".".join(parts[:end])
        if section in homes_table.SECTION_HOMES:
            return ".".join([homes_table.SECTION_HOMES[section], *parts[end:]])
    return key


@functools.cache
def _converter_classes() -> dict[str, str]:
    """Converter name (its ``[quantize.*]`` table) -> config class, from the homes table."""
    return {
        found.legacy.rpartition(".")[0]: found.config_class
        for found in homes_table.base_homes().values()
        if found.kind == "converter"
    }


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


__all__ = [
    "ClassInfo",
    "Default",
    "GeneratedClass",
    "GeneratedField",
    "KeyOutcome",
    "Obj",
    "Plan",
    "RegistryCall",
    "UnsupportedModel",
    "build_plan",
    "function_name",
]
