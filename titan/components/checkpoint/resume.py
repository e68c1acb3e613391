"""Which checkpoint of its own folder a run resumes from, decided once (on rank 0) for all ranks,
after tidying up what a run that died left there.

Every way this can go wrong is an error message (raised as a ``CheckpointError`` on every rank) that names what is on disk: a ``step-N``
folder titan did not write, or an entry named like one that is not a folder, or a checkpoint
folder that is a file (it would otherwise be skipped in silence, and the run would go back
to an older step or start over), and a ``checkpoint.load_step`` that names a step the folder does
not hold (it would otherwise start from scratch). Torch-free: it only reads folder listings.
"""

from __future__ import annotations

import dataclasses
import logging
import os

from titan.components.checkpoint.folders import DCP_METADATA, CheckpointFolders

log = logging.getLogger("titan")


@dataclasses.dataclass(frozen=True, slots=True)
class ResumePoint:
    """The verdict every rank acts on: a step to load (``None``: none) or an error to raise."""

    step: int | None = None
    error: str | None = None
    earlier: list[int] = dataclasses.field(default_factory=list)
    """Loadable steps older than ``step``, for the message when ``step`` proves damaged."""


def recover_and_choose(folders: CheckpointFolders, *, load_step: int) -> ResumePoint:
    """Rank 0: clean up after a run that died (``CheckpointFolders.recover``), then ``choose``."""
    try:
        for done in folders.recover():
            log.warning("%s", done)
    except OSError as error:
        reason = f"{error.strerror}: {error.filename}" if error.strerror else str(error)
        return ResumePoint(error=f"cannot tidy the checkpoint folder {folders.root}: {reason}")
    return choose(folders, load_step=load_step)


def choose(folders: CheckpointFolders, *, load_step: int) -> ResumePoint:
    """The step to resume from: ``load_step``, or the newest loadable one (-1)."""
    problem = folders.root_problem()
    if problem is not None:
        return ResumePoint(error=problem)
    strays = folders.not_folders()
    if strays:
        return ResumePoint(error=not_folders(folders, strays))
    unloadable = folders.unloadable_steps()
    if unloadable:
        return ResumePoint(error=not_checkpoints(folders, unloadable))
    resumable = folders.resumable_steps()
    if load_step == -1:
        chosen = resumable[-1] if resumable else None
    elif load_step in resumable:
        chosen = load_step
    else:
        return ResumePoint(error=_missing_step(folders, load_step, resumable=resumable))
    earlier = [step for step in resumable if chosen is not None and step < chosen]
    return ResumePoint(step=chosen, earlier=earlier)


def damaged_hint(folders: CheckpointFolders, point: ResumePoint) -> str:
    """What to do when the chosen checkpoint cannot be read back."""
    path = folders.step_path(point.step or 0)
    if not point.earlier:
        return (
            f"; {path} is damaged and there is no earlier checkpoint: move it out of "
            f"{folders.root} to start this run from scratch"
        )
    step = point.earlier[-1]
    return (
        f"; {path} is damaged. The newest earlier checkpoint is {folders.step_path(step)}: "
        f"resume from it with checkpoint.load_step = {step} (--checkpoint.load_step {step}), or "
        f"move {path} out of {folders.root}"
    )


def unsafe_hint(folders: CheckpointFolders, point: ResumePoint) -> str:
    """What to do when the chosen checkpoint asks to run code: it is left as it is."""
    path = folders.step_path(point.step or 0)
    advice = f". Nothing of it was loaded and titan leaves {path} as it is; move it out of {folders.root}"
    if not point.earlier:
        return f"{advice} to start this run from scratch"
    step = point.earlier[-1]
    return (
        f"{advice}, or resume from the newest earlier checkpoint, {folders.step_path(step)}, "
        f"with checkpoint.load_step = {step} (--checkpoint.load_step {step}) if you made it"
    )


def not_folders(folders: CheckpointFolders, paths: list[str]) -> str:
    """The refusal of entries named like step folders that are not folders."""
    from titan.components.run_files import what_is

    listed = "; ".join(f"{path} ({what_is(path) or 'a file'})" for path in paths)
    return (
        f"{listed}: named like a checkpoint but not a folder. titan writes every checkpoint as a "
        f"folder, so this was put there by hand, and a run would skip it and resume from an "
        f"older step or start over. Move it out of {folders.root}"
    )


def not_checkpoints(folders: CheckpointFolders, steps: list[int]) -> str:
    """The refusal of ``step-N`` folders that are not checkpoints titan wrote."""
    listed = "; ".join(f"{folders.step_path(step)} ({folders.describe(step)})" for step in steps)
    return (
        f"{listed}: not a checkpoint titan can load, so this run would silently resume from an "
        f"older step or start over (and later overwrite it). titan publishes a step folder only "
        f"once it is complete, so it was copied or changed by hand; `cp step-N/* DEST/` leaves "
        f"out the hidden {DCP_METADATA} file, `cp -r step-N DEST/` copies it. Complete it or move "
        f"it out of {folders.root}"
    )


def _missing_step(folders: CheckpointFolders, step: int, *, resumable: list[int]) -> str:
    start = f"checkpoint.load_step = {step}, but"
    if not os.path.isdir(folders.root):
        return f"{start} there are no checkpoints: {folders.root} does not exist"
    exports = [s for s in folders.checkpoint_steps() if s not in resumable]
    if step in exports:
        return (
            f"{start} {folders.step_path(step)} is a Hugging Face export, which cannot resume "
            "training; start a run from it with checkpoint.initial_load_path and "
            "checkpoint.initial_load_in_hf"
        )
    if not resumable:
        return f"{start} {folders.root} holds no checkpoint to resume from"
    return (
        f"{start} {folders.root} has no complete checkpoint of that step; it has steps {resumable}"
    )
