"""Writing DCP checkpoints, in the foreground or in the background, and publishing them.

Every save goes through the same three steps: rank 0 empties ``step-N.tmp`` and all ranks wait
for it; every rank writes its shards there; rank 0 renames the folder to ``step-N`` and purges old
ones. DCP's save ends with a gather of every rank's write results on rank 0 before rank 0 writes
``.metadata``, so when rank 0's save has returned (or its future is done) all ranks' files are on
disk: rank 0 can publish without another collective. That is what lets a background save publish
from its completion callback, while the training thread keeps running.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any, Literal

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType

from titan.components.checkpoint.errors import CheckpointError
from titan.components.checkpoint.folders import CheckpointFolders
from titan.components.checkpoint.state import failure_reasons, translated_errors
from titan.components.run_files import space_problem

log = logging.getLogger("titan")

AsyncMode = Literal["disabled", "async", "async_with_pinned_mem"]


class CheckpointWriter:
    """Saves state dicts as step folders of ``folders``, keeping the newest ``keep_latest_k``."""

    def __init__(
        self, *, folders: CheckpointFolders, async_mode: AsyncMode, keep_latest_k: int
    ) -> None:
        self.folders = folders
        self.keep_latest_k = keep_latest_k
        self.distributed = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if self.distributed else 0
        if async_mode == "async_with_pinned_mem" and not torch.cuda.is_available():
            # Pinned host memory and the non-blocking device copies that fill it need CUDA.
            log.warning("checkpoint.async_mode = 'async_with_pinned_mem' needs CUDA; using 'async'")
            async_mode = "async"
        self.async_mode: AsyncMode = async_mode
        # A background save runs its collectives in another thread while training runs its own
        # on the default group; they must not share a communicator. DCP requires a CPU backend.
        self.process_group = None
        if self.distributed and async_mode != "disabled":
            self.process_group = dist.new_group(backend="gloo")
        self.stager = None
        if async_mode == "async_with_pinned_mem":
            from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

            self.stager = DefaultStager(
                StagingOptions(
                    use_pinned_memory=True,
                    use_shared_memory=True,
                    use_async_staging=True,
                    use_non_blocking_copy=True,
                )
            )
        self.pending: BackgroundSave | None = None

    def save(self, state_dict: dict[str, Any], *, step: int, purge: bool) -> None:
        """Write ``state_dict`` as ``step-N`` now; returns once it is published."""
        self.wait()
        path = self._prepare(step)
        with translated_errors(f"saving step {step}"), self._room_checked(step):
            dcp.save(state_dict, checkpoint_id=path)
        self._publish(step, purge=purge)

    def save_files(self, write: Callable[[str], None], *, step: int) -> None:
        """Publish ``step-N`` after ``write(path)`` filled it (called on every rank)."""
        self.wait()
        path = self._prepare(step)
        with self._room_checked(step):
            write(path)
        self._publish(step, purge=False)

    def save_in_background(self, state_dict: dict[str, Any], *, step: int) -> None:
        """Start writing ``state_dict`` as ``step-N``; it is published when the write ends."""
        self.wait()
        path = self._prepare(step)
        begin = time.monotonic()
        with translated_errors(f"starting the save of step {step}"):
            if self.stager is not None:
                response = dcp.async_save(
                    state_dict,
                    checkpoint_id=path,
                    process_group=self.process_group,
                    async_checkpointer_type=AsyncCheckpointerType.PROCESS,
                    async_stager=self.stager,
                )
                upload, staging = response.upload_completion, response.staging_completion
            else:
                # Without a stager DCP copies every tensor to fresh CPU memory before it
                # returns, so training may change the weights as soon as this call is done.
                upload = dcp.async_save(
                    state_dict, checkpoint_id=path, process_group=self.process_group
                )
                staging = None
        self.pending = BackgroundSave(
            step=step,
            upload=upload,
            staging=staging,
            begin=begin,
            on_success=self._on_written,
            no_room=lambda error: self.no_room(
                error, step=step, action=f"the background save of step {step}"
            ),
        )

    def wait_for_staging(self) -> None:
        """Block until the pending save no longer reads the live tensors; report a failed save.

        Local to this rank (no collective): ranks see their saves finish at different times.
        """
        pending = self.pending
        if pending is None:
            return
        if pending.staging is not None:
            pending.staging.result()
        if pending.finished.is_set() and pending.error is not None:
            self.pending = None
            raise pending.failure()

    def wait(self) -> None:
        """Block until the pending save is written and published everywhere; raise if it failed.

        A collective: a rank's own write can end before rank 0 has published the folder, and
        whatever follows (a load, the next save's cleanup) must see it published.
        """
        pending, self.pending = self.pending, None
        if pending is None:
            return
        pending.finished.wait()
        self._barrier()
        if pending.error is not None:
            raise pending.failure()

    def close(self, *, wait_for_peers: bool = True) -> None:
        """Finish the pending save and release the stager.

        After a failed run other ranks may never arrive at a barrier: then only this rank's
        write is awaited (rank 0's completion callback still publishes a finished save).
        """
        try:
            if wait_for_peers:
                self.wait()
            elif self.pending is not None:
                self.pending.finished.wait()
                self.pending = None
        finally:
            if self.stager is not None:
                self.stager.close()
                self.stager = None

    @contextlib.contextmanager
    def _room_checked(self, step: int) -> Iterator[None]:
        """A save that failed for want of disk space ends in a ``CheckpointError`` saying so."""
        try:
            yield
        except (dcp.CheckpointException, Exception) as error:
            full = self.no_room(error, step=step, action=f"saving step {step}")
            if full is None:
                raise
            raise full from None

    def no_room(self, error: BaseException, *, step: int, action: str) -> CheckpointError | None:
        """The error to raise when ``error`` (a rank's, or DCP's gathered one) says the disk
        had no room for ``step``'s save; None when it was something else."""
        causes = [error]
        if isinstance(error, dcp.CheckpointException):
            causes = [failure for failure, _ in error.failures.values()]
        if not all(isinstance(cause, Exception) for cause in causes):
            return None  # a KeyboardInterrupt inside the save is the user's stop request
        folder = self.folders.in_progress_path(step)
        reasons = [reason for cause in causes if (reason := space_problem(cause, folder=folder))]
        if not reasons:
            return None
        resumable = self.folders.resumable_steps()
        if resumable:
            kept = (
                f"The last good checkpoint, {self.folders.step_path(resumable[-1])}, is intact, "
                "and a new run with this dump folder resumes from it."
            )
        else:
            kept = "There is no earlier checkpoint to resume from."
        return CheckpointError(
            f"{action} failed: {reasons[0]}, writing {folder}. {kept} Free space on that disk "
            f"(the incomplete {os.path.basename(folder)} is removed when the next run starts), "
            "keep fewer checkpoints (checkpoint.keep_latest_k) or put them on another disk "
            "(checkpoint.folder)"
        )

    def _prepare(self, step: int) -> str:
        if self.rank == 0:
            self.folders.prepare(step)
        self._barrier()
        return self.folders.in_progress_path(step)

    def _publish(self, step: int, *, purge: bool) -> None:
        if self.rank == 0:
            self._on_written(step, purge=purge)
        self._barrier()

    def _on_written(self, step: int, *, purge: bool = True) -> None:
        """Rank 0: make the written step visible, then drop the oldest checkpoints."""
        if self.rank != 0:
            return
        self.folders.publish(step)
        if purge:
            purged = self.folders.purge(self.keep_latest_k)
            if purged:
                log.info("removed old checkpoints of steps %s", purged)

    def _barrier(self) -> None:
        if self.distributed:
            dist.barrier()


class BackgroundSave:
    """One save running in DCP's background executor, published by its completion callback."""

    def __init__(
        self,
        *,
        step: int,
        upload: Future,
        staging: Future | None,
        begin: float,
        on_success: Callable[[int], None],
        no_room: Callable[[BaseException], CheckpointError | None],
    ) -> None:
        self.step = step
        self.no_room = no_room
        self.full_disk: CheckpointError | None = None
        """The error to raise when the save failed for want of disk space."""
        self.staging = staging
        self.begin = begin
        self.on_success = on_success
        self.error: str | None = None
        # Future.result() can return before the done-callbacks have run; this event is set at the
        # end of the callback, so waiting on it means "written and published".
        self.finished = threading.Event()
        upload.add_done_callback(self._done)

    def failure(self) -> CheckpointError:
        if self.full_disk is not None:
            return self.full_disk
        return CheckpointError(
            f"the background save of step {self.step} failed: {self.error}; the previous "
            "checkpoints are intact"
        )

    def _done(self, upload: Future) -> None:
        try:
            try:
                upload.result()
            except dcp.CheckpointException as exc:
                self.error = failure_reasons(exc)
                self.full_disk = self.no_room(exc)
            except BaseException as exc:
                self.error = f"{type(exc).__name__}: {exc}"
                self.full_disk = self.no_room(exc)
            if self.error is None:
                self.on_success(self.step)
                log.info(
                    "background save of step %d written in %.2f s",
                    self.step,
                    time.monotonic() - self.begin,
                )
            else:
                log.error("background save of step %d failed: %s", self.step, self.error)
        except BaseException as exc:
            self.error = f"publishing failed: {type(exc).__name__}: {exc}"
            log.error("background save of step %d: %s", self.step, self.error)
        finally:
            self.finished.set()
