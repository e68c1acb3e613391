"""The plan steps only a Forge app config needs: where its engine kept checkpoints, and what a
human must still decide (Hugging Face Hub paths, a trainer block with no JobConfig, a recipe's
own validation loop).

Forge's engine (torchtitan's ``experiments/forge/engine.py`` in every era Forge pinned, 2025-07
to 0.2.0) builds its ``CheckpointManager`` without a ``base_folder``, so ``checkpoint.folder`` is
read from the working folder, while torchtitan's trainer and titan put it under
``job.dump_folder``::

    Forge:  <working folder>/<checkpoint.folder>            ./checkpoint
    titan:  <dump_folder>/<checkpoint.folder>               ./outputs/checkpoint

A migrated run resumes only if it looks where Forge saved, so the plan writes
``checkpoint.folder`` as that folder seen from ``dump_folder`` (``../checkpoint``); an absolute
folder is the same place in both. That is also the value the plan measures the built config
against (``Plan.effective``): in v0.2.2's terms, it is the folder the legacy run used.
"""

from __future__ import annotations

import os
from typing import Any

from titan.migrate.plan import homes as homes_table
from titan.migrate.plan.draft import PlanDraft
from titan.migrate.plan.legacy_values import schema_default
from titan.schemas.diagnostics import Severity

FOLDER, DUMP, ENABLE = "checkpoint.folder", "job.dump_folder", "checkpoint.enable"


def checkpoint_folder(draft: PlanDraft) -> None:
    """Write the folder a Forge app's engine kept its checkpoints in as titan's
    ``checkpoint.folder``, relative to ``dump_folder``; a TODO where no relative folder says it
    (an absolute dump folder, or one outside the working folder). Runs after the plan's
    effective values are set, which it corrects for ``checkpoint.folder``."""
    if draft.check.form != "yaml" or _value(draft, ENABLE) is not True:
        return
    unresolved = {d.path for d in draft.plan.diagnostics if d.code == "interpolation"}
    if unresolved & {FOLDER, DUMP} or draft.is_blocked(FOLDER) or draft.is_blocked(DUMP):
        return  # the value is reported already; a folder computed from a default would mislead
    folder, dump = _value(draft, FOLDER), _value(draft, DUMP)
    if not isinstance(folder, str) or not isinstance(dump, str) or os.path.isabs(folder):
        return
    # The engine joins no base folder, so an empty folder is the working folder itself.
    forge = os.path.normpath(folder or ".")
    below = os.path.normpath(dump)
    if os.path.isabs(below) or below.split(os.sep)[0] == os.pardir:
        draft.plan.todo(
            FOLDER,
            f"Forge kept the checkpoints in {forge!r} under the working folder, which "
            f"checkpoint.folder cannot name relative to dump_folder {dump!r}: set it to that "
            "folder's absolute path for a resumed run to find them",
        )
        return
    # Both relative to the same working folder, so the answer does not depend on which one.
    titan = os.path.relpath(forge, below).replace(os.sep, "/")
    if os.path.normpath(titan) == os.path.normpath(folder):
        return  # dump_folder is the working folder itself: the same place as written
    draft.set(FOLDER, titan)
    draft.plan.effective[FOLDER] = titan
    note = (
        f"Forge's engine kept the checkpoints in {forge!r} under the working folder, not under "
        f"job.dump_folder; written as {titan!r}, the same folder seen from dump_folder {dump!r}"
    )
    draft.outcome(FOLDER, "carried", (FOLDER,), note)
    draft.plan.comments.setdefault(
        FOLDER, ((f"where Forge kept them: {forge!r} under the working folder",), None)
    )
    draft.report(
        "forge-app",
        FOLDER,
        f"{note}, so a resumed run finds them",
        f"nothing to do; to keep new checkpoints under the dump folder instead, set "
        f"checkpoint.folder = {forge!r} in the registry function (a resume then starts afresh)",
        severity=Severity.INFO,
    )


def todos(draft: PlanDraft) -> None:
    """What a human must decide before a Forge app's migration is complete: a folder Forge
    downloads from the Hugging Face Hub, a ``trainer:`` block that held only Forge's own
    trainer actor, a validation loop the SFT recipe ran itself."""
    plan = draft.plan
    for finding in plan.diagnostics:
        if finding.code == "hub-path":
            home = homes_table.home(finding.path, extension=draft.extension)
            path = home.path if home is not None and home.path else ""
            plan.todo(path, f"{finding.path}: Forge downloaded it; write the local folder")
        elif finding.code == "forge-app" and finding.path == "validation":
            plan.todo("", "the SFT recipe ran its own validation loop; set the validator by hand")
    if draft.check.form == "yaml" and not draft.check.written:
        actor = [d.path for d in plan.diagnostics if d.code == "forge-app"]
        if actor:
            plan.todo(
                "",
                "the trainer: block holds no JobConfig, only Forge's own trainer actor's "
                f"settings ({', '.join(f'`{a}`' for a in actor)}): this config is titan's defaults",
            )


def _value(draft: PlanDraft, key: str) -> Any:
    """The value the file gives ``key`` (after the era upgrade), else its default."""
    return draft.leaves.get(key, schema_default(draft.schema, key))
