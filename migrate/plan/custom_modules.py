"""Custom config modules: a user's module becomes generated classes (and the trainer subclass that
holds them); a built-in one chooses titan's trainer for it, or is reported when titan has none.
"""

from __future__ import annotations

from migrate.plan.carry import drop
from migrate.plan.draft import PlanDraft
from migrate.plan.extension_classes import generate_classes
from migrate.plan.trainers import EXTENSION_TRAINERS
from schemas.diagnostics import Severity
from schemas.spec import ExtensionSpec


def combined(extensions: list[ExtensionSpec]) -> ExtensionSpec | None:
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


def custom_classes(draft: PlanDraft, *, trainer: str) -> str:
    """Generate the classes of a user's custom config module; returns the trainer class."""
    extension = draft.user_extension
    if extension is None:
        return trainer
    generated = generate_classes(extension, trainer, draft.schema)
    draft.plan.classes = generated.classes
    draft.uncarried.update(generated.notes)
    draft.redeclared = generated.redeclared
    for key, note in generated.notes:
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
