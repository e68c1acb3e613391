"""Carrying keys: each input key put at its home in the config tree, or dropped with a finding.

Also the keys whose home is not a plain copy of the value: ``optimizer.early_step_in_backward``
(a class swap) and the legacy validation shape; and the last step, which gives every key that no
step placed an outcome, so nothing is lost silently.
"""

from __future__ import annotations

from typing import Any

from titan.migrate.plan import homes as homes_table
from titan.migrate.plan.draft import PlanDraft
from titan.migrate.plan.legacy_values import schema_default, show
from titan.migrate.plan.trainers import IN_BACKWARD, TRAINER
from titan.migrate.targets.config_objects import default_object, same
from titan.schemas.diagnostics import Severity

VALIDATION_SHAPE = {
    "validation.local_batch_size": "training.local_batch_size",
    "validation.seq_len": "training.seq_len",
}
"""Legacy validation shape keys and the training keys titan's validator follows when unset."""


def carry(draft: PlanDraft, *, key: str, value: Any) -> None:
    """Put one input key at its home, or record why it cannot go anywhere."""
    if isinstance(value, dict) and not value and not draft.is_blocked(key):
        # an empty table sets nothing: every key of the section keeps its default
        draft.outcome(key, "default", note="an empty table")
        return
    if draft.is_blocked(key):
        draft.outcome(key, "rejected", note="invalid: see the finding at this key")
        draft.plan.todo("", f"`{key} = {show(value)}` was not carried: it is invalid")
        return
    parts = key.split(".")
    owner = next(
        (
            ".".join(parts[:end])
            for end in range(len(parts), 0, -1)
            if ".".join(parts[:end]) in draft.redeclared
        ),
        None,
    )
    noted = draft.uncarried.get(owner) if owner is not None else None
    if noted is not None:  # redeclared as another kind: titan's home would misread it
        draft.outcome(key, "dropped", note=noted)
        draft.report(
            "dropped-key",
            key,
            f"`{key} = {show(value)}` is not carried: {noted}",
            "give the value a field of its own in the custom module (a new name), or set it "
            "in the registry function by hand",
            severity=Severity.ERROR,  # the legacy run used it; the migrated one cannot
        )
        draft.plan.todo("", f"`{key} = {show(value)}` is not carried")
        return
    found = homes_table.home(key, extension=draft.extension)
    if found is None:
        carry_custom(draft, key=key, value=value)
        return
    if found.kind == "structural" or found.kind == "converter":
        return  # model(), converters(), optimizer() and custom_classes() handle these
    if key in VALIDATION_SHAPE:
        return  # validation_shape()
    if found.kind == "dropped":
        drop(draft, key=key, value=value, why=found.note)
        return
    paths = (found.path, *found.also)
    if found.trainer not in (TRAINER, draft.base_trainer):
        if same(value, schema_default(draft.schema, key)):
            draft.outcome(key, "default", note="the default; needs no trainer subclass")
        else:
            drop(draft, key=key, value=value, why=f"needs {found.trainer.rpartition(':')[2]}")
        return
    try:
        if same(value, draft.root.get(found.path)) and all(
            same(value, draft.root.get(p)) for p in found.also
        ):
            draft.outcome(key, "default", paths)
            return
        for path in paths:
            draft.set(path, value)
    except (KeyError, AttributeError):  # a custom module replaced the object it lives in
        draft.outcome(key, "dropped", note="its home is not a config object in this config")
        draft.report(
            "dropped-key",
            key,
            f"`{key} = {show(value)}` is not carried: its home `{found.path}` is not part "
            "of the generated config (a custom config module redeclares a section on its way)",
            "move the value into the custom module's own field, or drop the redeclaration",
            severity=Severity.ERROR,
        )
        draft.plan.todo("", f"`{key} = {show(value)}` is not carried")
        return
    draft.outcome(key, "carried", paths, found.note if found.kind == "moved" else "")


def drop(draft: PlanDraft, *, key: str, value: Any, why: str) -> None:
    """Record ``key`` as dropped (titan has no place for it): an info finding when the file wrote
    its default, else a warning and a TODO."""
    default = schema_default(draft.schema, key)
    if same(value, default):
        draft.outcome(key, "dropped", note=f"{why} (the value was the default)")
        draft.report(
            "dropped-key",
            key,
            f"`{key}` is not carried: {why}; the file wrote its default",
            "delete the key: it sets the default, so the run is the same without it",
            severity=Severity.INFO,
        )
        return
    draft.outcome(key, "dropped", note=why)
    draft.report(
        "dropped-key",
        key,
        f"`{key} = {show(value)}` is not carried: {why}",
        "check that the run does without it (a TODO in the generated module lists it), "
        "then delete it from the TOML",
    )
    draft.plan.todo("", f"`{key} = {show(value)}` is not carried: {why}")


def carry_custom(draft: PlanDraft, *, key: str, value: Any) -> None:
    """A key of a custom module: a field of a generated class, or of a dropped experiment."""
    if key in draft.plan.outcomes:
        return  # placed by its own step (a new [model] field: titan.migrate.plan.model_keys)
    path = _custom_path(key)
    try:
        current = draft.root.get(path)
    except (KeyError, AttributeError):
        draft.outcome(key, "dropped", note="no field for it in the generated classes")
        draft.report(
            "dropped-key",
            key,
            f"`{key}` has no home in the generated classes",
            "declare it in the custom config module's dataclass for its section, or set it "
            "by hand in the registry function",
        )
        draft.plan.todo("", f"`{key} = {show(value)}` is not carried")
        return
    if same(value, current):
        draft.outcome(key, "default", (path,))
        return
    draft.set(path, value)
    draft.outcome(key, "carried", (path,))


def _custom_path(key: str) -> str:
    """Where a custom module's key lives: its section's home, then the same field names."""
    parts = key.split(".")
    for end in range(len(parts) - 1, 0, -1):
        section = ".".join(parts[:end])
        if section in homes_table.SECTION_HOMES:
            return ".".join([homes_table.SECTION_HOMES[section], *parts[end:]])
    return key


def optimizer(draft: PlanDraft) -> None:
    """``optimizer.early_step_in_backward = true`` swaps in the in-backward optimizer container."""
    key = "optimizer.early_step_in_backward"
    value = draft.leaves.get(key)
    if key not in draft.leaves or draft.is_blocked(key):
        return
    if value is True:
        old = draft.root.fields["optimizer"]
        swapped = default_object(IN_BACKWARD)
        swapped.fields.update(old.fields)
        draft.root.fields["optimizer"] = swapped
        draft.outcome(key, "structural", ("optimizer",), "OptimizersInBackwardContainer.Config")
    else:
        draft.outcome(key, "default", ("optimizer",))


def validation_shape(draft: PlanDraft) -> None:
    """The legacy validation batch shape (8 x 2048) was independent of training; titan's
    validator follows training unless told, so write the legacy shape where they differ,
    whether or not the file has a [validation] table (validation can be switched on later
    with a flag)."""
    for key, training_key in VALIDATION_SHAPE.items():
        if draft.is_blocked(key) or draft.is_blocked(training_key):
            continue
        found = homes_table.home(key, extension=draft.extension)
        legacy = draft.leaves.get(key, schema_default(draft.schema, key))
        training = draft.leaves.get(training_key, schema_default(draft.schema, training_key))
        if same(legacy, training):
            draft.outcome(key, "default", (found.path,), "equal to the training value")
            continue
        draft.set(found.path, legacy)
        draft.outcome(key, "carried", (found.path,), found.note)
        if key not in draft.leaves:
            draft.plan.comments.setdefault(
                found.path,
                (
                    (f"legacy {key} defaulted to {legacy!r}, not to {training_key}",),
                    None,
                ),
            )


def unaccounted(draft: PlanDraft) -> None:
    """Every input key gets an outcome: one that no step placed is reported, never lost."""
    for key, value in draft.leaves.items():
        if key in draft.plan.outcomes:
            continue
        draft.outcome(key, "dropped", note="titan-migrate has no rule for this key")
        draft.report(
            "dropped-key",
            key,
            f"`{key} = {show(value)}` is not carried: titan-migrate has no rule for it",
            "set its registry field by hand (titan-validate --config checks the result) and "
            "report the key to titan",
            severity=Severity.ERROR,
        )
        draft.plan.todo("", f"`{key} = {show(value)}` is not carried")
