"""The pipeline's sends and receives, bounded by the job's collective timeout.

torch's pipeline schedules wait on each send and receive between stages with ``Work.wait()``,
which has no time limit of its own: on gloo a receive from a stage whose process stopped (a
debugger, ``SIGSTOP``, a hung filesystem in its data loader) waits for ever, although every
collective of the same job fails after ``comm.train_timeout_seconds``. Once a pipeline is built,
titan makes the schedules wait with the timeout the process groups have at the time (the
initialisation timeout during the first step, the training timeout after it), so a stalled
stage fails its peers' waits as a stalled collective does, and the run names the stalled rank.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

_timeout: timedelta | None = None
"""The limit of each wait; ``None`` until a process group has a timeout (torch's own wait)."""

_installed = False


def set_timeout(timeout: timedelta) -> None:
    """The limit each pipeline send and receive waits from now on (the process groups' own)."""
    global _timeout
    _timeout = timeout


def install() -> None:
    """Make torch's pipeline schedules wait with the current limit (once per process)."""
    global _installed
    if _installed:
        return
    from torch.distributed.pipelining import schedules

    if not callable(getattr(schedules, "_wait_batch_p2p", None)):
        return  # a torch whose schedules wait elsewhere: its own waits stand
    schedules._wait_batch_p2p = wait_all
    _installed = True


def wait_all(work: list[Any]) -> None:
    """Wait for each of the schedule's sends and receives, each within the limit."""
    for each in work:
        if _timeout is None:
            each.wait()
        else:
            each.wait(_timeout)
