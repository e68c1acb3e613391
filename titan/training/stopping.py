"""Ending a run early without losing it: on a signal, or on a loss that is no longer a number.

A scheduler ends a job with SIGTERM (and SIGKILL a little later); a person with Ctrl-C (SIGINT).
While the training loop runs, either signal only records a stop request: the loop finishes the
step it is in (and any checkpoint save in flight), saves that step, and ends with exit 130
(SIGINT) or 143 (SIGTERM). A second signal (two seconds or more after the first; sooner, it is
the first one forwarded by torchrun) stops at once: a save it cuts short stays an incomplete
``step-N.tmp`` that the next run removes, and the previous checkpoints are untouched.

Under torchrun every rank must stop after the same step, or the ones that go on wait forever in
their next collective; so after each step the ranks agree (one small all-reduce) on whether any
of them received a signal, and on whether any of them saw a non-finite loss or gradient norm.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import threading
import time
from types import FrameType
from typing import Any

from titan.cli.exits import Terminated

log = logging.getLogger("titan")


# What a signal raises outside the loop (titan.cli.exits installs the SIGTERM handler for every
# command); inside it, what a second signal raises.
SIGNAL_ERRORS: dict[int, type[KeyboardInterrupt]] = {
    signal.SIGINT: KeyboardInterrupt,
    signal.SIGTERM: Terminated,
}
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}
"""The shell's convention: 128 + the signal number."""
VERBS = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated"}


class NonFiniteLoss(ValueError):
    """The loss or gradient norm became NaN or infinite; the message names the step."""


class RunStopped(BaseException):
    """The run ended early on a signal; ``str()`` says after which step and what was kept.

    A ``BaseException``, like the ``KeyboardInterrupt`` it often replaces, so that no
    ``except Exception`` on the way out mistakes it for a failure.
    """

    def __init__(self, message: str, *, signum: int, abandoned: bool = False) -> None:
        super().__init__(message)
        self.signum = signum
        self.abandoned = abandoned
        """A second signal cut the run short mid-step (a save may still be writing)."""

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.signum, 128 + self.signum)


class StopRequests:
    """A context around the training loop in which SIGINT and SIGTERM request a stop.

    ``signum`` is the first signal received (0 for none); ``abandoned`` the second one, which
    stops at once (0 for none). Outside the main thread (the trainer used as a library) signals
    cannot be caught and nothing changes.
    """

    REPEAT_WINDOW_S = 2.0
    """A signal this soon after the first is the same request delivered twice: torchrun forwards
    the SIGINT / SIGTERM that a terminal or a scheduler (``scancel``) already sent every worker."""

    def __init__(self) -> None:
        self.signum = 0
        self.abandoned = 0
        self._first_at = 0.0
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopRequests:
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNAL_ERRORS:
                self._previous[signum] = signal.signal(signum, self._request)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def _request(self, signum: int, frame: FrameType | None) -> None:
        if self.signum:
            if time.monotonic() - self._first_at < self.REPEAT_WINDOW_S:
                return
            self.abandoned = signum
            raise SIGNAL_ERRORS[signum]()
        self.signum, self._first_at = signum, time.monotonic()
        log.warning(
            "%s received: stopping after this step, once it is saved; send it again to stop at "
            "once (the step's save is then abandoned and the previous checkpoint kept)",
            signal.Signals(signum).name,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class StepVerdict:
    """What every rank agreed on after one step."""

    nonfinite: bool
    """Some rank's loss or gradient norm is NaN or infinite."""
    signum: int
    """A signal some rank received (0: none); SIGTERM wins over SIGINT."""


def agree(*, loss: Any, grad_norm: Any, signum: int) -> StepVerdict:
    """The verdict of all ranks on this step (a MAX all-reduce of two numbers when distributed;
    one host sync either way)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    # Under tensor parallel the loss (loss parallel) and the norm may be DTensors, on which a
    # plain collective has no sharding rule: check their values as plain tensors.
    loss, grad_norm = (x.full_tensor() if isinstance(x, DTensor) else x for x in (loss, grad_norm))
    bad = ~(torch.isfinite(loss) & torch.isfinite(grad_norm))
    flags = torch.stack([bad.float(), torch.full_like(bad, signum, dtype=torch.float32)])
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
    nonfinite, agreed = flags.tolist()
    return StepVerdict(nonfinite=bool(nonfinite), signum=int(agreed))


def stopped_message(*, signum: int, step: int, checkpoint: str | None, saving: bool) -> str:
    """The one line a run stopped by ``signum`` after ``step`` ends with."""
    name = signal.Signals(signum).name
    if checkpoint is not None:
        kept = (
            f"its newest checkpoint is {checkpoint}; a new run with this dump folder resumes there"
        )
    elif saving:
        kept = "no checkpoint was written"
    else:
        kept = "checkpointing is off, so nothing was saved (checkpoint.enable keeps a run's state)"
    return f"{VERBS.get(signum, 'stopped')} by {name} after step {step}; {kept}"


def abandoned_message(*, signum: int, step: int, checkpoint: str | None) -> str:
    """The line for a second signal, which stops in the middle of step ``step``."""
    name = signal.Signals(signum).name
    kept = f"the newest checkpoint is {checkpoint}" if checkpoint else "there is no checkpoint"
    return (
        f"{VERBS.get(signum, 'stopped')} at once by a second {name} during step {step}; {kept} "
        "(a save that was cut short is removed by the next run)"
    )
