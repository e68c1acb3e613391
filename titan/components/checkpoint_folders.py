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
Anything with a suffix is incomplete: never loaded, and removed by rank 0.

Torch-free: it only moves folders.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil

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
        """Steps with a complete folder, oldest first."""
        return sorted(step for step, _ in self._matching(COMPLETE_NAME))

    def resumable_steps(self) -> list[int]:
        """Complete steps in DCP format (a Hugging Face export cannot resume training)."""
        return [step for step in self.complete_steps() if is_dcp_checkpoint(self.step_path(step))]

    def incomplete_paths(self) -> list[str]:
        """Folders of saves that did not finish (or of purges/replacements that did not)."""
        return [path for _, path in self._matching(INCOMPLETE_NAME)]

    def remove_incomplete(self) -> list[str]:
        """Delete every incomplete folder (rank 0 only) and return their paths."""
        removed = self.incomplete_paths()
        for path in removed:
            shutil.rmtree(path, ignore_errors=True)
        return removed

    def prepare(self, step: int) -> str:
        """Create the root and an empty in-progress folder for ``step`` (rank 0 only)."""
        path = self.in_progress_path(step)
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
        return path

    def publish(self, step: int) -> None:
        """Make the finished in-progress folder of ``step`` the complete ``step-N`` (rank 0 only).

        An existing ``step-N`` (a seed checkpoint made again, a rerun that saves the same step)
        is first renamed away: ``rename`` cannot replace a non-empty folder. A crash between the
        two renames loses only that older copy of the same step.
        """
        _sync_file(os.path.join(self.in_progress_path(step), DCP_METADATA))
        final = self.step_path(step)
        if os.path.exists(final):
            replaced = f"{final}.replaced"
            shutil.rmtree(replaced, ignore_errors=True)
            os.rename(final, replaced)
            os.rename(self.in_progress_path(step), final)
            shutil.rmtree(replaced, ignore_errors=True)
        else:
            os.rename(self.in_progress_path(step), final)
        _sync_file(self.root)

    def purge(self, keep_latest_k: int) -> list[int]:
        """Delete all but the newest ``keep_latest_k`` complete checkpoints (0 keeps all)."""
        if keep_latest_k <= 0:
            return []
        stale = self.complete_steps()[:-keep_latest_k]
        for step in stale:
            # Renamed first, so that a crash in the middle of rmtree leaves an incomplete
            # folder rather than a complete-looking one with files missing.
            deleting = f"{self.step_path(step)}.deleting"
            os.rename(self.step_path(step), deleting)
            shutil.rmtree(deleting, ignore_errors=True)
        return stale

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


def is_dcp_checkpoint(path: str) -> bool:
    """Whether ``path`` is a folder holding a DCP checkpoint."""
    return os.path.isfile(os.path.join(path, DCP_METADATA))


def _sync_file(path: str) -> None:
    """Flush ``path`` (a file or a folder's entries) to disk, when it exists."""
    if not os.path.exists(path):
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
