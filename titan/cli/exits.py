"""Exit codes and how every command ends: one table, one guard, one console entry point.

Every titan command exits with one of these codes, whatever went wrong:

====  ==========================================================================================
0     done, nothing found (titan-diff: no difference)
1     findings (titan-diff: differences; titan-train: the config or the run failed)
2     usage: a malformed command line, an output that would overwrite an input, an internal error
74    the output could not be written (a full disk, a closed standard output); ``EX_IOERR``
130   interrupted (Ctrl-C, SIGINT)
143   terminated (SIGTERM)
====  ==========================================================================================

Each ends in one line on stderr, never a traceback; a reader that goes away (``| head -1``) is
not an error and says nothing. This module imports nothing heavy and nothing of titan's:
titan-validate starts through it in pre-commit hooks (``titan.cli.console`` wraps a command
in it with the process's real streams).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TextIO

OK = 0
FINDINGS = 1
USAGE = 2
WRITE_FAILED = 74
INTERRUPTED = 130
TERMINATED = 143

EXIT_STATUS_HELP = "74 the output could not be written, 130 interrupted, 143 terminated (SIGTERM)"
"""The codes every command shares, for the end of each ``--help`` epilog."""


class UsageError(Exception):
    """A mistake on the command line (exit 2): the message says what to change."""


class OutputError(OSError):
    """The output could not be written (exit 74): a full disk, a closed stream, a lost device.

    An ``OSError``, so code that reports the machine's failures (titan-train's) reports it too.
    """


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process was, so that it unwinds (and cleans up) as Ctrl-C does."""


def interrupt_code(stop: KeyboardInterrupt) -> int:
    """130 for Ctrl-C, 143 for SIGTERM."""
    return TERMINATED if isinstance(stop, Terminated) else INTERRUPTED


def stopped(stop: KeyboardInterrupt, *, prog: str, stderr: TextIO) -> int:
    say(f"{prog}: {'terminated' if isinstance(stop, Terminated) else 'interrupted'}", stream=stderr)
    return interrupt_code(stop)


def findings_code(diagnostics: Sequence, *, strict: bool) -> int:
    """1 when there are errors (or, with ``strict``, warnings), else 0."""
    from titan.schemas.diagnostics import Severity

    failing = {Severity.ERROR, Severity.WARNING} if strict else {Severity.ERROR}
    return FINDINGS if any(d.severity in failing for d in diagnostics) else OK


def say(line: str, *, stream: TextIO | None) -> None:
    """Write one line to ``stream`` (stderr), staying quiet if that stream is gone too."""
    try:
        stream.write(line + "\n")
        stream.flush()
    except (AttributeError, OSError, ValueError):
        pass


def guarded(body: Callable[[], int], *, prog: str, stdout: TextIO, stderr: TextIO) -> int:
    """Run a command's body; every way it can end becomes a line on stderr and an exit code."""
    try:
        return body()
    except UsageError as error:
        say(f"{prog}: error: {error}", stream=stderr)
        return USAGE
    except OutputError as error:
        say(f"{prog}: error: {error}", stream=stderr)
        return WRITE_FAILED
    except BrokenPipeError:  # help or an error printed into a pipe whose reader left
        silence(stdout)
        return OK
    except KeyboardInterrupt as stop:
        return stopped(stop, prog=prog, stderr=stderr)
    except Exception as error:  # a bug: say so in one line, the traceback on request
        if os.environ.get("TITAN_DEBUG"):
            raise
        say(
            f"{prog}: internal error: {type(error).__name__}: {error}\n"
            "This is a bug in titan; rerun with TITAN_DEBUG=1 for the traceback and report it.",
            stream=stderr,
        )
        return USAGE


def silence(out: TextIO) -> None:
    """Send what is still buffered for ``out`` (and anything later) to ``/dev/null``.

    Without this the interpreter would flush the stream again at exit and print its own
    "Exception ignored" message.
    """
    try:
        fd = out.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
    except (AttributeError, OSError, ValueError):
        return  # not a file (StringIO): nothing will flush it at exit
    os.dup2(null, fd)
    os.close(null)
