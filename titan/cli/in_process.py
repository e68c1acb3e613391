"""Registry code that runs in titan's own process (``titan-validate --config NAME``) gets what the
worker process gives it elsewhere (``titan.cli.registry_worker``): nothing to read on standard
input, and no process it starts outliving the check.

:func:`contained` makes titan the child subreaper of what the code starts
(``titan.cli.processes``); :meth:`Contained.left` names the processes still running once the
config is built and kills them, and whatever happens, leaving the block kills what is left.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator
from typing import Any

from titan.cli import processes
from titan.schemas.diagnostics import Diagnostic, Severity


class Contained:
    """The processes started from here on (see the module docstring)."""

    def __init__(self) -> None:
        self.started = processes.Started()

    def left(self, *, doing: str, span: Any) -> Diagnostic | None:
        """The finding for processes still running after ``doing`` (placed at ``span``),
        which are killed; ``None`` when none run."""
        running = self.started.running()
        if not running:
            return None
        named = processes.described(running)
        self.end()
        return Diagnostic(
            code="registry-error",
            severity=Severity.ERROR,
            path="",
            message=f"the registry code left {len(running)} process(es) running after {doing}: "
            f"{named}; titan killed them",
            hint="a registry function only builds and returns its config: wait for the "
            "processes it starts (Popen.wait(), os.waitpid) before it returns, or do not start any",
            span=span,
        )

    def end(self) -> None:
        """Kill every process started since, wait until they are gone, and stop adopting
        orphans (titan may be a library in a longer-lived process)."""
        processes.end(self.started.find)
        self.started.release()


@contextlib.contextmanager
def contained() -> Iterator[Contained]:
    """A :class:`Contained` whose processes are all ended when the block is left."""
    owned = Contained()
    try:
        yield owned
    finally:
        owned.end()


@contextlib.contextmanager
def no_stdin() -> Iterator[None]:
    """Standard input empty for the block: ``sys.stdin`` and descriptor 0 (what ``input()``,
    ``os.read(0, ...)`` and the programs the code runs read) at end of file at once."""
    stream = sys.stdin
    try:
        saved: int | None = os.dup(0)
    except OSError:  # no standard input at all
        saved = None
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
        sys.stdin = io.StringIO()
        yield
    finally:
        sys.stdin = stream
        os.close(null)
        if saved is not None:
            os.dup2(saved, 0)
            os.close(saved)
