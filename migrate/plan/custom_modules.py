"""Custom config modules: a user's module becomes generated classes (and the trainer subclass that
holds them); a built-in one chooses titan's trainer for it, or is reported when titan has none.
"""

from __future__ import annotations

import typing
from typing import Any

from titan.migrate.plan.carry import drop
from titan.migrate.plan.draft import PlanDraft
from titan.migrate.plan.extension_classes import conform, generate_classes
from titan.migrate.plan.legacy_values import schema_default
from titan.migrate.plan.model_keys import MODEL_CONFIGS, model_config_class
from titan.migrate.plan.trainers import EXTENSION_TRAINERS
from titan.schemas.diagnostics import Severity
from titan.schemas.spec import MISSING, ExtensionSpec


def combined(extensions: list[ExtensionSpec]) -> ExtensionSpec | None:
    """The user's custom config modules as one (the file's own, ``--extension`` ones and the
    project's declared ones), merged in order as the validator merged them into the schema:
    their sections live on one generated trainer subclass."""
    if len(extensions) <= 1:
        return extensions[0] if extensions else None
    from titan.schemas.merge import merge_sections

    root = extensions[0].root
    for extension in extensions[1:]:
        root = merge_sections(root, extension.root)
    notes = tuple(note for extension in extensions for note in extension.notes)
    first = extensions[0]  # its name is the plan's extension: generated classes are keyed by it
    return ExtensionSpec(module=first.module, root=root, origin=first.origin, notes=notes)


def custom_classes(draft: PlanDraft, *, trainer: str) -> str:
    """Generate the classes of a user's custom config module; returns the trainer class."""
    extension = draft.user_extension
    if extension is None:
        return trainer
    name = draft.leaves.get("model.name", schema_default(draft.schema, "model.name"))
    model_config = model_config_class(name) if isinstance(name, str) else None
    generated = generate_classes(extension, trainer, draft.schema, model_config=model_config)
    draft.plan.classes = generated.classes
    draft.uncarried.update(generated.notes)
    draft.redeclared = generated.redeclared
    draft.model_class = generated.model
    typed_leaves(draft, generated.types)
    if generated.model is not None:
        for key in draft.leaves:  # model_keys.model puts them in the model config
            if _new_model_field(key) and key not in draft.uncarried:
                draft.outcome(key, "carried", ("model_spec.model." + key.partition(".")[2],))
    for key, note in generated.notes:
        if model_config is None and _new_model_field(key):
            # The run read the value from its model; nothing else in titan's config can hold it.
            draft.outcome(key, "dropped", note="no model config class to extend")
            draft.report(
                "extension-class",
                key,
                f"`{key}` of {extension.module} is not carried: titan cannot name the model "
                f"config class of `{name}`, which its fields would extend",
                f"declare the field in the model config class that {name}'s model_registry "
                "builds and set it there; titan-migrate gives [model] fields a home for "
                "titan's families (" + ", ".join(sorted(MODEL_CONFIGS)) + ")",
                severity=Severity.ERROR,
            )
            draft.plan.todo("", note)
            continue
        draft.report(
            "extension-class",
            key,
            note,
            "rename the field in the custom config module (and its key in the TOMLs), or set "
            "the value by hand in the registry function",
            severity=Severity.WARNING,
        )
        draft.plan.todo("", note)
    for key, text in generated.renames:
        draft.report(
            "renamed-class",
            key,
            text,
            "the TOML keys are unchanged; only the generated class has another name",
            severity=Severity.INFO,
        )
    root = generated.root
    draft.outcome(
        "job.custom_config_module", "structural", (), f"returns {root.rpartition(':')[2]}"
    )
    return root


def typed_leaves(draft: PlanDraft, types: dict[str, Any]) -> None:
    """The file's values of generated fields in the types the fields declare: an array for a
    ``tuple[str, ...]`` field becomes a tuple, and a ``dict[...]`` field's table is one value
    (its keys are the dict's, not fields to find a home for), unless the check rejected part of
    it."""
    dicts = [key for key, annotation in types.items() if typing.get_origin(annotation) is dict]
    leaves: dict[str, Any] = {}
    for key, value in draft.leaves.items():
        table = next((d for d in dicts if key.startswith(d + ".")), None)
        if table is not None and not any(
            draft.is_blocked(k) for k in draft.leaves if k.startswith(table + ".")
        ):
            if table not in leaves:
                leaves[table] = conform(_document_value(draft, table), types[table])
            continue
        leaves[key] = conform(value, types[key]) if key in types else value
    draft.leaves.clear()
    draft.leaves.update(leaves)


def _document_value(draft: PlanDraft, key: str) -> Any:
    """The value of the dotted ``key`` in the checked document, as the file wrote it."""
    node: Any = draft.document
    for part in key.split("."):
        node = node[part]
    return node


def _new_model_field(key: str) -> bool:
    """Whether ``key`` is a field the custom module adds to ``[model]`` (not a legacy key)."""
    from titan.schemas.legacy_spec import LEGACY_SPEC

    return key.startswith("model.") and schema_default(LEGACY_SPEC, key) is MISSING


def custom_module(draft: PlanDraft) -> None:
    """A built-in custom module chooses the trainer class, or (experiments titan does not
    train) is reported with its keys."""
    key = "job.custom_config_module"
    if key not in draft.leaves or key in draft.plan.outcomes or draft.is_blocked(key):
        return
    if draft.extension in EXTENSION_TRAINERS:
        trainer = EXTENSION_TRAINERS[draft.extension].rpartition(":")[2]
        draft.outcome(key, "structural", (), f"its sections live on {trainer}")
    elif any(
        d.code == "extension-error" and d.path == key for d in draft.check.diagnostics
    ):  # not found or unreadable: the finding says where it was looked for
        draft.outcome(key, "rejected", note="the module could not be read: see the finding")
        draft.plan.todo("", f"the custom config module {draft.extension!r} could not be read")
    else:
        drop(draft, key=key, value=draft.leaves[key], why=f"titan has no {draft.extension} trainer")
