"""How a worker process that ended on a registry module becomes a finding.

``titan.cli.registry_child`` says how the process ended (:class:`~titan.cli.registry_child.Ended`);
the finding is placed at the line of the module where it ended when that is known (the worker's
report of where the code was, or of the call that ended it), else at the registry function it
was running, else at the module's first line.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from titan.cli.registry_errors import column, memory_text
from titan.schemas.diagnostics import Diagnostic, Severity, Span

_OWN_PROCESS = (
    "titan runs registry code in a process of its own, which ended here: a registry function "
    "only builds and returns its config; raise an exception to report a problem"
)

ENDINGS = {
    "timeout": (
        "no answer after {timeout} s while {doing}",
        "a registry function only builds a config: look for a loop or a wait at this line",
    ),
    "said": ("the registry code ended its process ({said}) while {doing}", _OWN_PROCESS),
    "exit": (
        "the process running the registry code exited with status {status} while {doing}",
        _OWN_PROCESS,
    ),
    "signal": (
        "the process running the registry code was killed by {signal} while {doing}",
        "a crash in compiled code the module calls, or a signal sent to the process: "
        + _OWN_PROCESS,
    ),
    "signal-memory": (
        "the process running the registry code was killed by {signal} while {doing}, under "
        "--memory-limit {limit}",
        "it most likely ran out of memory: look for what grows at this line, or raise "
        "--memory-limit if the module really needs more",
    ),
    "failed-memory": (
        "the process running the registry code ran out of memory while {doing} (--memory-limit "
        "{limit})",
        "look for what grows at this line, or raise --memory-limit if the module really needs more",
    ),
    "failed": (
        "the process running the registry code could not go on while {doing}: the module "
        "closed or broke titan's private pipe to it",
        "do not close file descriptors the module did not open (os.closerange): " + _OWN_PROCESS,
    ),
    "garbage": (
        "the registry code wrote to titan's private pipe while {doing}; its process was stopped",
        "print() instead (what a registry module prints goes to standard error), and do not "
        "write to file descriptors the module did not open",
    ),
    "closed": (
        "the registry code closed titan's private pipe while {doing}; its process was stopped",
        "do not close file descriptors the module did not open (os.closerange)",
    ),
}
"""How each way of ending reads: the message and the hint."""


def ending_finding(
    ended: Any,
    *,
    full: str,
    shown: str,
    text: str | None,
    default: Any,
    timeout: float,
    memory_limit: int | None,
    suffix: str = "",
) -> Diagnostic:
    """The finding for a worker that ended (``default``: the function it was on, if any;
    ``suffix``: what the message adds, such as the functions left unchecked)."""
    key = "said" if ended.said and ended.how in ("exit", "signal") else ended.how
    message, hint = ENDINGS[key]
    facts = {
        "doing": ended.doing,
        "timeout": f"{timeout:g}",
        "said": ended.said,
        "status": ended.status,
        "signal": _signal_name(ended.status),
        "limit": memory_text(memory_limit) if memory_limit else "",
    }
    span = _where(ended.frames, full=full, shown=shown, text=text)
    if span is None:
        line, col = (default.line, default.col) if default is not None else (1, 1)
        span = Span(file=shown, line=line, col=col)
    return Diagnostic(
        code="registry-error",
        severity=Severity.ERROR,
        path=ended.name or "",
        message=message.format(**facts) + suffix,
        hint=hint,
        span=span,
    )


def _where(frames: list, *, full: str, shown: str, text: str | None) -> Span | None:
    """The innermost line of the module among ``frames`` (``[[file, line], ...]``)."""
    for frame in frames:
        try:
            file, line = frame
        except (TypeError, ValueError):
            continue
        if isinstance(file, str) and isinstance(line, int) and os.path.abspath(file) == full:
            return Span(file=shown, line=line, col=column(text, line))
    return None


def _signal_name(number: Any) -> str:
    try:
        return signal.Signals(number).name
    except (TypeError, ValueError):
        return f"signal {number}"
