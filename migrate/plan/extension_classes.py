"""A custom config module's sections as generated titan config classes.

A legacy ``job.custom_config_module`` merged its ``JobConfig`` dataclass into the schema (new
sections, new fields in existing sections, changed defaults). The registry world says the same
with a ``Trainer.Config`` subclass (reference ``new_system.md`` section 5):

- a new section ``[team]`` (with nested ``[team.alerts]``) becomes classes ``Team`` and
  ``TeamAlerts`` and a field ``team: Team = field(default_factory=Team)`` on the subclass;
- new or re-defaulted fields of an existing section (``[training] probe_warmup_steps``) become a
  subclass of that section's titan class (``ProbeExtensionTrainingConfig(TrainingConfig)``) that
  the trainer subclass uses for the field;
- the trainer subclass (``ProbeExtensionTrainerConfig(Trainer.Config)``) is what the registry
  function returns.

- new fields of ``[model]`` (``npu_fused_attention``) become a subclass of the model family's
  config class (``ForkExtLlama3ModelConfig(Llama3Model.Config)``): the fork's model code reads
  them from the model config, where ``titan.models.extend_model`` puts them on top of what
  ``model_registry(flavor)`` built.

The module is read statically (``titan.schemas.extension_reader``), so nothing of the user's code runs.
Parts that have no titan home (fields added to ``[job]``, to ``[model]`` of a family whose model
config class titan cannot name, a section whose name is already a titan field) are returned as
notes; their keys are then reported as dropped.

A TOML value is written in the type its field declares (:func:`conform`): an array for a
``tuple[str, ...]`` field becomes a tuple, as titan's own config check requires.
"""

from __future__ import annotations

import re
from typing import Any

from titan.migrate.codegen.names import free_name, rename_reason
from titan.migrate.plan import homes as homes_table
from titan.migrate.targets.config_objects import (
    ClassInfo,
    Default,
    default_object,
    info,
    register,
    same,
)
from titan.schemas.extension_fields import field_name_problem
from titan.schemas.legacy_spec import LEGACY_SPEC
from titan.schemas.spec import MISSING, ExtensionSpec, FieldSpec, SectionSpec


def generated_path(module: str, name: str, target: str = "titan") -> str:
    """Class path of a generated class; the module (and the trainer it extends, for other
    targets than titan) is part of it, so two modules or two targets never clash."""
    where = module if target == "titan" else f"{module} for {target}"
    return f"<generated {where}>:{name}"


def spec_module(where: str) -> str:
    """The custom module a generated class came from, from its :class:`ClassInfo` module."""
    return where.removeprefix("<generated ").removesuffix(">").partition(" for ")[0]


def is_generated(path: str) -> bool:
    return path.startswith("<generated ")


def camel(name: str) -> str:
    """``probe_extension`` -> ``ProbeExtension``; always an identifier."""
    words = re.split(r"[^0-9A-Za-z]+", name)
    text = "".join(w[:1].upper() + w[1:] for w in words if w)
    return text if text and not text[0].isdigit() else f"X{text}"


class GeneratedField:
    """One field of a generated dataclass."""

    __slots__ = ("name", "annotation", "default", "doc")

    def __init__(self, name: str, annotation: Any, default: Any, doc: str | None) -> None:
        self.name = name
        self.annotation = annotation
        """A typing object, or a generated class path for a nested section."""
        self.default = default
        """A literal, a :class:`Default` of a generated class, or ``MISSING``."""
        self.doc = doc


class GeneratedClass:
    """A ``@dataclass(kw_only=True, slots=True)`` the migration writes for a custom module."""

    __slots__ = ("name", "base", "doc", "fields")

    def __init__(
        self, name: str, base: str | None, doc: str | None, fields: list[GeneratedField]
    ) -> None:
        self.name = name
        self.base = base
        """Class path of the titan class it extends, or ``None``."""
        self.doc = doc
        self.fields = fields


class GeneratedClasses:
    """What :func:`generate_classes` made of one custom config module."""

    __slots__ = ("classes", "root", "notes", "renames", "redeclared", "model", "types")

    def __init__(
        self,
        classes: list[GeneratedClass],
        root: str,
        notes: list[tuple[str, str]],
        renames: list[tuple[str, str]],
        redeclared: frozenset[str] = frozenset(),
        model: str | None = None,
        types: dict[str, Any] | None = None,
    ) -> None:
        self.classes = classes
        """The classes in dependency order."""
        self.root = root
        """Class path of the trainer subclass a registry function returns."""
        self.notes = notes
        """(dotted key, text) for each part that cannot be carried."""
        self.renames = renames
        """(dotted key, text) for each class that could not take its natural name."""
        self.redeclared = redeclared
        """Keys the module redeclares as another kind (a section as a value, or back): the
        legacy run used a value that titan's config has no place for."""
        self.model = model
        """Class path of the generated subclass of the model config that holds the module's
        new ``[model]`` fields; ``None`` when it adds none (or they have no home)."""
        self.types = types or {}
        """Dotted legacy key -> the type its generated field declares (:func:`conform`)."""


def generate_classes(
    extension: ExtensionSpec,
    trainer: str,
    schema: SectionSpec,
    *,
    target: str = "titan",
    section_homes: dict[str, str] | None = None,
    model_config: str | None = None,
) -> GeneratedClasses:
    """The classes of ``extension`` on top of ``trainer`` (a trainer config class path of
    ``target``, whose sections live at ``section_homes``: titan's by default). New ``[model]``
    fields extend ``model_config``, the class path of the family's model config (``None``: they
    have no home)."""
    builder = _Generator(extension, target, section_homes or homes_table.SECTION_HOMES)
    builder.model_config = model_config
    root_fields: list[Any] = []
    trainer_defaults = default_object(trainer)
    for spec in extension.root.fields:
        base = LEGACY_SPEC.field(spec.name)
        if builder.unusable(spec.name, spec.name):
            continue
        if not isinstance(spec.annotation, SectionSpec):
            builder.notes.append(
                (spec.name, f"top-level field `{spec.name}` of {extension.module} has no home")
            )
            continue
        if base is not None and isinstance(base.annotation, SectionSpec):
            root_fields += builder.merged(
                spec.name, spec.annotation, base.annotation, trainer_defaults
            )
            continue
        if spec.name in trainer_defaults.fields:
            builder.notes.append(
                (
                    spec.name,
                    f"section [{spec.name}] of {extension.module} has the name of a titan "
                    "Trainer.Config field, so it cannot be added; its keys are not carried",
                )
            )
            continue
        section = builder.section(spec.name, spec.annotation)
        root_fields.append(
            GeneratedField(
                spec.name, section, Default(section, {}), spec.annotation.doc or spec.doc
            )
        )
    name = builder.name(builder.prefix + "TrainerConfig", key="job.custom_config_module")
    doc = extension.root.doc or f"A training run with the sections of {extension.module}."
    root = builder.add(name, trainer, doc, root_fields)
    return GeneratedClasses(
        builder.classes,
        root,
        builder.notes,
        builder.renames,
        frozenset(builder.redeclared),
        model=builder.model,
        types=builder.types,
    )


class _Generator:
    def __init__(
        self, extension: ExtensionSpec, target: str, section_homes: dict[str, str]
    ) -> None:
        self.target = target
        self.section_homes = section_homes
        self.extension = extension
        self.module = extension.module
        self.prefix = camel(extension.module.rpartition(".")[2])
        self.classes: list[Any] = []
        self.notes: list[tuple[str, str]] = []
        self.renames: list[tuple[str, str]] = []
        self.redeclared: set[str] = set()
        self.model_config: str | None = None
        self.model: str | None = None
        self.types: dict[str, Any] = {}
        # A class body that names a class (``field(default_factory=Team)``) after a field of
        # that name would get the field, so class names avoid every field name of the module.
        self.taken: set[str] = set(_field_names(extension.root))

    def name(self, wanted: str, *, key: str) -> str:
        """A class name for the section at ``key``: ``wanted`` unless that is reserved or taken."""
        name = free_name(wanted, taken=self.taken)
        if name != wanted:
            why = rename_reason(wanted, taken=self.taken)
            self.renames.append((key, f"the class for [{key}] is `{name}`: {why}"))
        self.taken.add(name)
        return name

    def unusable(self, key: str, name: str) -> bool:
        """Record a note and return True when ``name`` cannot be a dataclass field."""
        problem = field_name_problem(name)
        if problem is not None:
            self.notes.append((key, f"`{key}` of {self.module} is not carried: {problem}"))
        return problem is not None

    def add(self, name: str, base: str | None, doc: str | None, fields: list[Any]) -> str:
        """Record a class and make the plan's default trees know it."""
        generated = GeneratedClass(name, base, doc, fields)
        self.classes.append(generated)
        path = generated_path(self.module, name, self.target)
        defaults = dict(info(base).defaults) if base else {}
        for spec in fields:
            defaults[spec.name] = spec.default
        where = path.partition(":")[0]
        register(path, ClassInfo(where, name, name, defaults))
        return path

    def section(self, dotted: str, spec: SectionSpec) -> str:
        """A new section (and its nested ones) as plain generated classes."""
        fields = []
        for item in spec.fields:
            if self.unusable(f"{dotted}.{item.name}", item.name):
                continue
            if isinstance(item.annotation, SectionSpec):
                nested = self.section(f"{dotted}.{item.name}", item.annotation)
                fields.append(GeneratedField(item.name, nested, Default(nested, {}), item.doc))
            elif item.default is MISSING:
                self.notes.append(
                    (
                        f"{dotted}.{item.name}",
                        f"`{dotted}.{item.name}` has no default in {self.module}; not carried",
                    )
                )
            else:
                self.types[f"{dotted}.{item.name}"] = item.annotation
                fields.append(GeneratedField(item.name, item.annotation, item.default, item.doc))
        return self.add(self.name(camel(dotted), key=dotted), None, spec.doc, fields)

    def merged(self, dotted: str, spec: SectionSpec, base: SectionSpec, trainer: Any) -> list[Any]:
        """Fields a module adds to (or re-defaults in) an existing section: a subclass of the
        section's titan class, used by the trainer subclass. Returns the trainer fields."""
        changed = [f for f in spec.fields if not _same_field(f, base.field(f.name))]
        nested = [
            f
            for f in changed
            if isinstance(f.annotation, SectionSpec)
            and base.field(f.name) is not None
            and isinstance(base.field(f.name).annotation, SectionSpec)
        ]
        fields: list[Any] = []
        for item in nested:
            fields += self.merged(
                f"{dotted}.{item.name}", item.annotation, base.field(item.name).annotation, trainer
            )
        plain = []
        for item in changed:
            if item in nested:
                continue
            was = base.field(item.name)
            if was is not None and isinstance(was.annotation, SectionSpec) != isinstance(
                item.annotation, SectionSpec
            ):  # a section redeclared as a value, or a value as a section
                kind = "a section" if isinstance(was.annotation, SectionSpec) else "a value"
                self.redeclared.add(f"{dotted}.{item.name}")
                self.notes.append(
                    (
                        f"{dotted}.{item.name}",
                        f"`{dotted}.{item.name}` is {kind} in torchtitan and {self.module} "
                        "redeclares it as another kind; titan keeps torchtitan's, so this field "
                        "is not carried",
                    )
                )
                continue
            plain.append(item)
        if not plain:
            return fields
        if dotted == "model" and self.model_config is not None:
            self.model_fields([f for f in plain if base.field(f.name) is None])
            plain = [f for f in plain if base.field(f.name) is not None]
            if not plain:
                return fields
        home = self.section_homes.get(dotted)
        if home is None or "." in home or home not in trainer.fields:
            for item in plain:
                self.notes.append(
                    (
                        f"{dotted}.{item.name}",
                        f"`{dotted}.{item.name}` ({self.module}) extends [{dotted}], which has no "
                        "single titan config object to subclass; not carried",
                    )
                )
            return fields
        base_class = trainer.fields[home].cls
        new_fields = []
        for item in plain:
            if self.unusable(f"{dotted}.{item.name}", item.name):
                continue
            if isinstance(item.annotation, SectionSpec):
                nested_class = self.section(f"{dotted}.{item.name}", item.annotation)
                new_fields.append(
                    GeneratedField(item.name, nested_class, Default(nested_class, {}), item.doc)
                )
            elif item.default is MISSING:
                self.notes.append(
                    (f"{dotted}.{item.name}", f"`{dotted}.{item.name}` has no default; not carried")
                )
            else:
                self.types[f"{dotted}.{item.name}"] = item.annotation
                new_fields.append(
                    GeneratedField(item.name, item.annotation, item.default, item.doc)
                )
        owner = info(base_class).qualname.replace(".", "")
        name = self.name(self.prefix + owner, key=dotted)
        subclass = self.add(name, base_class, spec.doc or info(base_class).qualname, new_fields)
        doc = f"{info(base_class).qualname} with the fields {self.module} adds."
        return [*fields, GeneratedField(home, subclass, Default(subclass, {}), doc)]

    def model_fields(self, added: list[FieldSpec]) -> None:
        """The module's new ``[model]`` fields as a subclass of the family's model config class
        (:attr:`model_config`); every field gets a docstring, as titan's config classes do."""
        fields = []
        for item in added:
            key = f"model.{item.name}"
            if self.unusable(key, item.name):
                continue
            doc = item.doc or f"`{key}` of {self.module}."
            if isinstance(item.annotation, SectionSpec):
                nested = self.section(key, item.annotation)
                fields.append(GeneratedField(item.name, nested, Default(nested, {}), doc))
            elif item.default is MISSING:
                self.notes.append((key, f"`{key}` has no default in {self.module}; not carried"))
            else:
                self.types[key] = item.annotation
                fields.append(GeneratedField(item.name, item.annotation, item.default, doc))
        if not fields:
            return
        base = self.model_config
        owner = info(base).qualname.replace(".", "")
        name = self.name(self.prefix + owner, key="model")
        # Not the module's own docstring of [model]: this class is a model config, not a section.
        doc = f"{info(base).qualname} with the [model] fields of {self.module}."
        self.model = self.add(name, base, doc, fields)


def conform(value: Any, annotation: Any) -> Any:
    """A TOML value in the shape ``annotation`` declares: arrays become tuples where it says
    ``tuple[...]`` (at any depth: ``dict[str, tuple[int, ...]]``, ``list[tuple[str, str]]``,
    ``tuple[str, ...] | None``); every other value is returned as it is."""
    import types
    import typing

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        for arm in args:  # the first arm the value has the shape of
            if isinstance(value, list) and typing.get_origin(arm) in (tuple, list):
                return conform(value, arm)
            if isinstance(value, dict) and typing.get_origin(arm) is dict:
                return conform(value, arm)
        return value
    if isinstance(value, list) and origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(conform(item, args[0]) for item in value)
        if len(args) == len(value):
            return tuple(conform(item, arm) for item, arm in zip(value, args, strict=True))
        return tuple(value)  # the wrong length: the validator reports it
    if isinstance(value, list) and origin is list and args:
        return [conform(item, args[0]) for item in value]
    if isinstance(value, dict) and origin is dict and len(args) == 2:
        return {key: conform(item, args[1]) for key, item in value.items()}
    return value


def _field_names(section: SectionSpec) -> set[str]:
    found = set()
    for item in section.fields:
        found.add(item.name)
        if isinstance(item.annotation, SectionSpec):
            found |= _field_names(item.annotation)
    return found


def _same_field(field: FieldSpec, base: FieldSpec | None) -> bool:
    if base is None:
        return False
    if isinstance(field.annotation, SectionSpec) or isinstance(base.annotation, SectionSpec):
        return False  # nested sections are compared field by field by the caller
    return field.annotation == base.annotation and same(field.default, base.default)
