"""``titan-train``: run a training job from a registry config or from a legacy TOML.

    titan-train --config llama3_debugmodel --training.steps 3
    titan-train --job.config_file legacy_configs/llama3/debug_model.toml --training.steps 3
    torchrun --nproc-per-node 8 -m titan.train --config llama3_8b
    titan-train --preflight --ngpu 64 --job.config_file llama3_70b.toml
    titan-train --module-path ../fork --job.config_file fork/llama3_1b.toml

Exit status: 0 the run finished (--preflight: every check passed), 1 the config or the run
failed (the message says why), 2 the command line is malformed, 130 interrupted (SIGINT), 143
terminated (SIGTERM). Once training runs, either signal stops the run after the current step,
saved; a second one at once.

--preflight makes every check a run makes before it trains, as if launched on --ngpu processes
(default: WORLD_SIZE, else 1): the config's findings, the model family's refusals, the parallel
layout and the model built on the meta device. It starts no process group and writes nothing.
"""

from __future__ import annotations

import io
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing import TextIO

    from titan.training.errors import RunFailure

_DOC = __doc__.split("\n\n")
USAGE = "usage:\n" + "\n\n".join(part.rstrip() for part in _DOC[1:4]) + "\n"
HELP_FLAGS = ("-h", "--help")


def main(argv: Sequence[str] | None = None) -> int:
    """The ``titan-train`` command; returns the exit code."""
    from titan.cli.console import console

    code = console(_main, argv=argv, prog="titan-train")
    ranks = _one_of_several_ranks()
    if ranks is not None and _agreed_end:
        # Every rank ended at the same point and has now said so: torchrun ends the other ranks
        # as soon as one exits with an error, so none leaves before all have spoken.
        ranks.leave(timeout_s=EXIT_WAIT_SECONDS, key="exited")
    if _abandoned or ranks is not None:
        # A second signal abandoned a save: torch's checkpoint writer threads may still be
        # writing, and tearing the interpreter down under them aborts the process (SIGABRT)
        # instead of exiting with the signal's code. A rank of a multi-process job has closed
        # everything it wrote, but gloo's and the store's C++ threads can still abort the
        # interpreter's teardown, turning a finished run's exit 0 into a crash. The messages
        # are out; leave now.
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # closed or full: console() has said so already
                pass
        os._exit(code)
    return code


def _one_of_several_ranks() -> Any:
    """This process's roll call when it joined a multi-process job (torchrun's ranks), else None;
    a single process never loads torch.distributed here."""
    module = sys.modules.get("titan.distributed.roll_call")
    return None if module is None else module.joined()


EXIT_WAIT_SECONDS = 30.0
"""How long a rank of a run that ended on every rank at once waits for the others to have said
how it ended (seconds after it, each of them will have)."""


_abandoned = False
"""Set when a run ended on a second signal (see ``main``)."""
_agreed_end = False
"""Set when every rank ended the run at the same point (finished, stopped on a signal, on a
non-finite loss, or refused by rank 0's folder check): then each waits for the others to report
before its process ends."""


def _main(args: list[str], *, stdout: TextIO, stderr: TextIO) -> int:
    # The streams come from titan.cli.console.console: a closed or full standard output ends in a
    # message and exit 74, as in every titan command.
    from titan.cli.exits import UsageError
    from titan.cli.streams import write

    if not args:
        write(f"{USAGE}\ntitan-train: error: name a config to run\n", out=stderr)
        return 2
    # The registry form hands --help to tyro, which lists that config's flags; the legacy form's
    # flags are the v0.2.2 keys, which have no help of their own here.
    legacy = any(arg.partition("=")[0] == "--job.config_file" for arg in args)
    if args[0] in HELP_FLAGS or (legacy and set(args) & set(HELP_FLAGS)):
        write(USAGE, out=stdout)
        return 0
    if args == ["--version"]:
        from titan import __version__

        write(f"titan-train {__version__}\n", out=stdout)
        return 0
    from titan import torch_support
    from titan.cli.train_preflight import preflight, split_preflight
    from titan.training.errors import RunFailure

    failure = RunFailure.from_env()
    try:
        torch_support.check()  # before the config (a registry module may import torch)
    except torch_support.UnsupportedTorch as error:
        failure.report(str(error))
        return 1
    try:
        request = split_preflight(args)
    except UsageError as error:
        failure.report(str(error))
        return 2
    if request.enabled:
        _configure_logging(0)
        return preflight(request.rest, ngpu=request.ngpu, stdout=stdout, stderr=stderr)
    _configure_logging(failure.rank)
    try:
        return _load_and_run(args, failure=failure)
    except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM while the config loads or torch imports
        return _stopped(failure, stop)


class _Findings(io.StringIO):
    """Where the config check writes its findings, to be printed later on stderr: coloured
    when stderr is a terminal, as if written there."""

    def isatty(self) -> bool:
        return sys.stderr.isatty()


def _load_and_run(args: list[str], *, failure: RunFailure) -> int:
    from titan.cli.train_config import UsageError, load

    # Every rank checks its own config; the findings are printed once per job (by rank 0, and
    # by any rank whose findings differ from rank 0's), so they are collected first.
    findings = _Findings()
    try:
        loaded = load(
            args,
            world_size=failure.world_size,
            stdout=sys.stdout,
            stderr=findings,
            notes=sys.stderr,  # now, not in the findings every rank compares with rank 0's
        )
    except UsageError as error:
        failure.report(str(error))
        return 2
    rejected = loaded.config is None and loaded.exit_code != 0
    failure.show_findings(findings.getvalue(), rejected=rejected)
    if loaded.config is None:
        return loaded.exit_code
    logging.getLogger("titan").info("running the %s", loaded.form)
    return run(loaded.config, failure=failure, findings_reported=True)  # load printed them


def run(config: Any, *, failure: RunFailure | None = None, findings_reported: bool = False) -> int:
    """Build the trainer ``config`` describes, train and close it; a failure becomes a message.

    A user error (``USER_ERRORS``) prints its message. Anything else prints one line, with its
    traceback saved to a file (``TITAN_DEBUG=1`` raises it instead): a crashed run never ends in
    a wall of traceback, and the evidence is kept. ``findings_reported``: the config's warnings
    were printed already (by ``titan-train``'s loading); otherwise the run logs them.
    """
    from titan.training.dump_lock import EVERY_RANK_STOPS
    from titan.training.errors import (
        USER_ERRORS,
        RunFailure,
        describe,
        missing_extra,
        terminal_safe,
    )
    from titan.training.stopping import RunStopped

    global _agreed_end
    failure = failure or RunFailure.from_env()
    try:
        # config.build() as a library calls it, unless the warnings were printed already
        trainer = config.build(**({"findings_reported": True} if findings_reported else {}))
        try:
            trainer.train()
        except RunStopped as stopped:
            # Said before closing: a launcher may end the process while it closes.
            _say(failure, f"{failure.prog}: {terminal_safe(str(stopped))}")
            raise
        finally:
            _agreed_end = getattr(trainer, "finished", False)
            trainer.close()  # after an error too: pending checkpoint saves are finished
    except RunStopped as stopped:  # a signal, after the step it stopped at was saved
        global _abandoned
        _abandoned = _abandoned or stopped.abandoned
        return stopped.exit_code
    except KeyboardInterrupt as stop:  # a signal before the loop (SIGTERM: Terminated)
        return _stopped(failure, stop)
    except USER_ERRORS as error:
        failure.report(describe(error))
        if getattr(error, EVERY_RANK_STOPS, False):  # see main(): each rank waits for the rest
            _agreed_end = True
        return 1
    except Exception as error:
        if missing_extra(error) is not None:  # titan installed without its training extra
            failure.report(missing_extra(error))
            return 1
        if os.environ.get("TITAN_DEBUG"):
            raise
        failure.crash(error, dump_folder=str(getattr(config, "dump_folder", ".")))
        return 1
    return 0


def _stopped(failure: RunFailure, stop: KeyboardInterrupt) -> int:
    """Ctrl-C (130) or SIGTERM (143, ``Terminated``) outside the training loop."""
    from titan.cli.exits import Terminated, interrupt_code

    if isinstance(stop, Terminated):
        _say(failure, f"{failure.prog}: terminated")
    else:
        failure.interrupted()
    return interrupt_code(stop)


def _say(failure: RunFailure, line: str) -> None:
    """``line`` on stderr and in torchrun's error file (the way every ending is reported)."""
    (failure.stderr or sys.stderr).write(line + "\n")
    failure.tell_launcher(line)


class TerminalSafeFormatter(logging.Formatter):
    """A log formatter that escapes terminal control characters (a hostile description)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        from titan.training.errors import terminal_safe

        return terminal_safe(super().formatMessage(record))


def _configure_logging(rank: int) -> None:
    """``[titan rank R] time LEVEL message`` on stderr; other ranks only show warnings."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        TerminalSafeFormatter(
            f"[titan rank{rank}] %(asctime)s %(levelname)s %(message)s", "%H:%M:%S"
        )
    )
    logger = logging.getLogger("titan")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO if rank == 0 else logging.WARNING)
    logger.propagate = False


if __name__ == "__main__":
    sys.exit(main())
