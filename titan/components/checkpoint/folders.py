"""The checkpoint folder on disk: which step folders are complete, and publishing them atomically.

Layout under ``<dump_folder>/<checkpoint.folder>/``::

    step-10/            complete: a DCP checkpoint (``.metadata`` + ``__<rank>_0.distcp``) or a
                        Hugging Face export (``model.safetensors``, ``config.json``)
    step-20.tmp/        a save in progress, or one that a crash interrupted
    step-5.deleting/    a checkpoint being purged
    step-20.replaced/   an older step-20 that a new save of the same step is replacing

A save writes into ``step-N.tmp`` and, once every rank has written its part, one ``rename`` makes
it ``step-N``. A rename is atomic on POSIX file systems, so a process killed at any moment leaves
either the previous set of complete folders or the new one, never a half-written ``step-N``.
Anything with a suffix is incomplete: never loaded, and cleaned up by rank 0 when a run starts
(``recover``). The one suffix that can hold the newest complete checkpoint is a ``.tmp`` beside a
``.replaced`` of the same step: that pair only exists between the two renames of ``publish``, so
recovery finishes that publish instead of deleting it.

A ``step-N`` folder that is neither a DCP checkpoint nor a Hugging Face export (say, copied with
``cp step-N/* dst/``, which leaves out the hidden ``.metadata``) was not written by titan: it is
reported by ``unloadable_steps``, and never loaded, purged or replaced.

Torch-free: it only moves folders.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil

from titan.components.checkpoint.errors import CheckpointError

DCP_METADATA = ".metadata"
"""The file DCP writes last, on rank 0, naming every tensor and the file that holds it."""

COMPLETE_NAME = re.compile(r"step-(\d+)")
INCOMPLETE_NAME = re.compile(r"step-(\d+)\.(tmp|deleting|replaced)")


@dataclasses.dataclass(frozen=True, slots=True)
class CheckpointFolders:
    """The step folders of one run's checkpoint directory ``root``."""

    root: str

    def step_path(self, step: int) -> str:
        """The folder of the complete checkpoint of ``step``."""
        return os.path.join(self.root, f"step-{step}")

    def in_progress_path(self, step: int) -> str:
        """The folder a save of ``step`` writes into before it is published."""
        return os.path.join(self.root, f"step-{step}.tmp")

    def complete_steps(self) -> list[int]:
        """Steps with a ``step-N`` folder, loadable or not, oldest first."""
        return sorted(step for step, _ in self._matching(COMPLETE_NAME))

    def checkpoint_steps(self) -> list[int]:
        """Steps whose folder is a checkpoint titan wrote (DCP or Hugging Face), oldest first."""
        return [step for step in self.complete_steps() if is_checkpoint(self.step_path(step))]

    def resumable_steps(self) -> list[int]:
        """Complete steps in DCP format (a Hugging Face export cannot resume training)."""
        return [step for step in self.complete_steps() if is_dcp_checkpoint(self.step_path(step))]

    def unloadable_steps(self) -> list[int]:
        """Steps whose ``step-N`` folder is not a checkpoint (titan never publishes one)."""
        return [step for step in self.complete_steps() if not is_checkpoint(self.step_path(step))]

    def not_folders(self) -> list[str]:
        """Entries named like step folders (``step-N``, ``step-N.tmp``, ...) that are not folders
        (a file, a link to nothing): titan never makes one, and every listing above skips them."""
        if not os.path.isdir(self.root):
            return []
        names = (n for n in os.listdir(self.root) if _is_step_name(n))
        return sorted(p for n in names if not os.path.isdir(p := os.path.join(self.root, n)))

    def root_problem(self) -> str | None:
        """Why ``root`` cannot hold checkpoints (it exists and is not a folder), else None."""
        if not os.path.lexists(self.root) or os.path.isdir(self.root):
            return None
        from titan.components.run_files import what_is

        kind = what_is(self.root) or "a file"
        return (
            f"the checkpoint folder {self.root} is {kind}, not a folder, so checkpoints can be "
            "neither loaded from it nor saved to it (the first save would fail); move it away, "
            "or set checkpoint.folder to another name"
        )

    def incomplete_paths(self) -> list[str]:
        """Folders of saves that did not finish (or of purges/replacements that did not)."""
        return sorted(path for _, path in self._matching(INCOMPLETE_NAME))

    def recover(self) -> list[str]:
        """Clean up after a run that died (rank 0 only); one sentence per thing done.

        A publish cut between its two renames is finished (its ``.tmp`` is the newest complete
        copy of that step); every other incomplete folder is deleted.
        """
        done = []
        for step, path in sorted(self._matching(INCOMPLETE_NAME)):
            if not path.endswith(".replaced"):
                continue
            final, in_progress = self.step_path(step), self.in_progress_path(step)
            if not os.path.exists(final):
                # The first rename happened; the second did not (or its source is gone).
                source = in_progress if is_checkpoint(in_progress) else path
                os.rename(source, final)
                kept = "the new" if source == in_progress else "the old"
                done.append(f"finished replacing {final}, cut short by a crash ({kept} copy)")
        for path in self.incomplete_paths():
            shutil.rmtree(path, ignore_errors=True)
            done.append(f"removed {path}, left by a save that did not finish")
        if done:
            _sync_file(self.root)
        return done

    def prepare(self, step: int) -> str:
        """Create the root and an empty in-progress folder for ``step`` (rank 0 only)."""
        path = self.in_progress_path(step)
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
        return path

    def publish(self, step: int) -> None:
        """Make the finished in-progress folder of ``step`` the complete ``step-N`` (rank 0 only).

        An existing ``step-N`` (a seed checkpoint made again, a rerun that saves the same step)
        is first renamed to ``step-N.replaced``: ``rename`` cannot replace a non-empty folder.
        A crash between the two renames leaves both folders complete; ``recover`` then finishes
        the publish. A ``step-N`` that titan did not write is never replaced.
        """
        _sync_file(os.path.join(self.in_progress_path(step), DCP_METADATA))
        final = self.step_path(step)
        if os.path.exists(final):
            if not is_checkpoint(final):
                raise CheckpointError(
                    f"{final} exists and is not a checkpoint titan wrote, so the save of step "
                    f"{step} does not replace it; move it away (the new save is in "
                    f"{self.in_progress_path(step)})"
                )
            replaced = f"{final}.replaced"
            shutil.rmtree(replaced, ignore_errors=True)
            os.rename(final, replaced)
            os.rename(self.in_progress_path(step), final)
            shutil.rmtree(replaced, ignore_errors=True)
        else:
            os.rename(self.in_progress_path(step), final)
        _sync_file(self.root)

    def purge(self, keep_latest_k: int) -> list[int]:
        """Delete all but the newest ``keep_latest_k`` checkpoints (0 keeps all); folders that
        are not checkpoints are neither counted nor deleted."""
        if keep_latest_k <= 0:
            return []
        stale = self.checkpoint_steps()[:-keep_latest_k]
        for step in stale:
            # Renamed first, so that a crash in the middle of rmtree leaves an incomplete
            # folder rather than a complete-looking one with files missing.
            deleting = f"{self.step_path(step)}.deleting"
            os.rename(self.step_path(step), deleting)
            shutil.rmtree(deleting, ignore_errors=True)
        return stale

    def describe(self, step: int) -> str:
        """What ``step-N`` holds, in a few words, for messages."""
        return describe_folder(self.step_path(step))

    def _matching(self, pattern: re.Pattern[str]) -> list[tuple[int, str]]:
        if not os.path.isdir(self.root):
            return []
        found = []
        for name in os.listdir(self.root):
            match = pattern.fullmatch(name)
            path = os.path.join(self.root, name)
            if match and os.path.isdir(path):
                found.append((int(match.group(1)), path))
        return found


def _is_step_name(name: str) -> bool:
    return bool(COMPLETE_NAME.fullmatch(name) or INCOMPLETE_NAME.fullmatch(name))


def is_dcp_checkpoint(path: str) -> bool:
    """Whether ``path`` is a folder holding a DCP checkpoint."""
    return os.path.isfile(os.path.join(path, DCP_METADATA))


def is_hf_export(path: str) -> bool:
    """Whether ``path`` is a folder holding a Hugging Face safetensors export."""
    return os.path.isdir(path) and any(name.endswith(".safetensors") for name in os.listdir(path))


def is_checkpoint(path: str) -> bool:
    """Whether ``path`` is a complete checkpoint folder of either format."""
    return is_dcp_checkpoint(path) or is_hf_export(path)


def describe_folder(path: str) -> str:
    """``no .metadata; it holds [...]``: why a folder is not a DCP checkpoint."""
    try:
        names = sorted(os.listdir(path))
    except OSError as error:
        return f"it cannot be listed: {error.strerror or error}"
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return f"no {DCP_METADATA} file; it holds {shown or 'nothing'}"


def _sync_file(path: str) -> None:
    """Flush ``path`` (a file or a folder's entries) to disk, when it exists."""
    if not os.path.exists(path):
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
