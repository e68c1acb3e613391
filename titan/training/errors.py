"""Which exceptions of a run are the user's to fix, and how a failed run is shown.

A config the trainer cannot honour, a missing tokenizer or dataset, a checkpoint that does not
fit, a folder that cannot be written: these are raised as ``ValueError`` / ``OSError`` /
``NotBuildableError`` (and their subclasses) with a message that names the setting, and
``titan-train`` prints the message alone. Anything else is a bug (in titan, or torch) or the
machine failing: it is shown in one line, its traceback saved to a file rather than printed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import TextIO

from titan.components.run_files import DUMP_FOLDER_FLAGS, NO_ROOM, open_run_file
from titan.config.configurable import NotBuildableError
from titan.distributed.failures import DistributedFailure, backend_message, collective_symptom

PROG = "titan-train"

# OSError covers the machine's side of a run (a missing or unwritable path, a full disk): its
# message and file name say what to fix, a traceback would not. A DistributedFailure names the
# ranks that cannot run together.
USER_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,
    OSError,
    NotBuildableError,
    DistributedFailure,
)
# How long a rank whose config check found something waits for rank 0's verdict (rank 0 loads
# the same config at the same moment), and for the job's store.
FINDINGS_WAIT_SECONDS = 30.0
STORE_CONNECT_SECONDS = 5.0

# Control characters other than newline and tab are escaped: a description, a path or a dataset
# name from the config must not be able to drive the reader's terminal (ANSI escapes).
_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)] if c not in (9, 10)}


def terminal_safe(text: str) -> str:
    """``text`` with its terminal control characters escaped (newlines and tabs kept)."""
    return text.translate(_CONTROL)


# The packages of the ``train`` extra (pyproject.toml): titan-validate and titan-migrate run
# without them, a run cannot.
TRAIN_EXTRA = ("torch", "numpy", "safetensors", "tokenizers")


def missing_extra(error: BaseException) -> str | None:
    """What to install when ``error`` is a package of the ``train`` extra this Python cannot
    import; None for any other error."""
    name = getattr(error, "name", None) or ""
    if not isinstance(error, ModuleNotFoundError) or name.split(".")[0] not in TRAIN_EXTRA:
        return None
    return (
        f"training needs `{name.split('.')[0]}`, which this Python cannot import ({error}): "
        "install titan's training extra with pip install 'titan[train]' (titan-validate and "
        "titan-migrate run without it)"
    )


def describe(error: BaseException) -> str:
    """The message of ``error``; a file error names its path, a full disk says so."""
    if isinstance(error, OSError) and error.errno in NO_ROOM:
        where = f" writing {error.filename}" if error.filename is not None else ""
        return (
            f"{NO_ROOM[error.errno]}{where} ({error.strerror}); free space on that disk, or "
            f"choose a dump folder on another one ({DUMP_FOLDER_FLAGS})"
        )
    if isinstance(error, OSError) and error.filename is not None and error.strerror:
        return f"{error.strerror}: {error.filename}"
    return str(error) or type(error).__name__


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RunFailure:
    """How this process says that the run failed: on stderr (naming its rank when there are
    several), and in torchrun's error file, so that torchrun's failure summary shows the message
    for each failed rank instead of a link to its documentation."""

    rank: int = 0
    world_size: int = 1
    error_file: str | None = None
    """``TORCHELASTIC_ERROR_FILE``: where torchrun looks for a worker's failure."""
    stderr: TextIO | None = None
    """Where messages go; None means ``sys.stderr`` at the time of writing."""

    @classmethod
    def from_env(cls) -> RunFailure:
        """The rank and world size torchrun (or a one-process run) set for this process."""
        return cls(
            rank=int(os.environ.get("RANK", "0")),
            world_size=int(os.environ.get("WORLD_SIZE", "1")),
            error_file=os.environ.get("TORCHELASTIC_ERROR_FILE") or None,
        )

    @property
    def prog(self) -> str:
        return PROG if self.world_size == 1 else f"{PROG} rank {self.rank}"

    def report(self, message: str) -> None:
        """``titan-train: error: MESSAGE`` for the user, for torchrun and for the other ranks."""
        self._tell_peers(message)
        self._say(f"{self.prog}: error: {terminal_safe(message)}")

    def interrupted(self) -> None:
        self._tell_peers("interrupted")
        self._say(f"{self.prog}: interrupted")

    def crash(self, error: BaseException, *, dump_folder: str) -> None:
        """An exception titan did not expect: one line, and where its traceback was saved.

        A collective that failed (a timeout, a peer gone) is the job's failure, not titan's:
        it names the ranks that stopped first or went silent, and what to look at.
        """
        saved = self._save_traceback(error, dump_folder=dump_folder)
        symptom = collective_symptom(error)
        if symptom is None:
            self.report(
                f"the run stopped on an unexpected {type(error).__name__}: {error}\n"
                f"  {saved}; if the message does not point at your config or machine, it is a "
                "bug in titan: please report it with that traceback (TITAN_DEBUG=1 prints it "
                "instead)"
            )
            return
        ranks = self._peers_after_collective_failure()  # "  rank 1 stopped: ..." lines
        said = f"{symptom.what}: {backend_message(error)}\n" + (f"{ranks}\n" if ranks else "")
        self._say(f"{self.prog}: error: {terminal_safe(said)}  hint: {symptom.hint}\n  {saved}")

    def show_findings(self, text: str, *, rejected: bool) -> None:
        """The config check's rendered findings, printed once per job rather than once per rank
        (:meth:`_show_findings`); then this rank says through the job's store that its check has
        ended. A rank whose config is ``rejected`` waits (up to ``FINDINGS_WAIT_SECONDS``) until
        every rank has said so before it ends: torchrun ends the other ranks as soon as one exits
        with an error, and a rank ended before it had told torchrun why would leave the job's
        summary without its words."""
        self._show_findings(text, rejected=rejected)
        if self.world_size == 1:
            return
        ranks = self._roll_call()
        if ranks is None:
            return
        if rejected:
            ranks.leave(timeout_s=FINDINGS_WAIT_SECONDS, key="checked")
        else:
            ranks.arrived("checked")

    def _show_findings(self, text: str, *, rejected: bool) -> None:
        """The config check's rendered findings, printed once per job rather than once per rank.

        Rank 0 prints its own. Another rank prints its findings only when they are not the ones
        rank 0 printed (a config that depends on the rank), saying so. A ``rejected`` config
        stops the rank: torchrun's summary and the other ranks learn who printed why.
        """
        out = self.stderr or sys.stderr
        if self.world_size == 1 or self.rank == 0:
            out.write(text)
            ranks = self._roll_call() if self.world_size > 1 else None
            if ranks is not None:
                ranks.share_findings(_digest(text), rejected=rejected)
            if rejected:
                self._config_rejected(printed_by=self.rank)
            return
        if not text:
            return
        ranks = self._roll_call()
        rank0 = ranks.rank0_findings(wait_s=FINDINGS_WAIT_SECONDS) if ranks else None
        if rank0 is not None and rank0[1] == _digest(text):
            if rejected:
                self._config_rejected(printed_by=0)
            return
        level, what = ("error", "errors") if rejected else ("warning", "findings")
        if rank0 is None:
            than = ""
        elif rank0[0]:
            than = ", not the ones rank 0 printed"
        else:
            than = ", and rank 0's config has none: the ranks' configs differ"
        out.write(f"{self.prog}: {level}: the config on this rank has {what}{than}:\n{text}")
        if rejected:
            self._config_rejected(printed_by=self.rank)

    def _config_rejected(self, *, printed_by: int) -> None:
        self.tell_launcher(
            f"{self.prog}: error: the config has errors; rank {printed_by} printed them"
        )
        self._tell_peers(f"its config has errors (rank {printed_by} printed them)")

    def tell_launcher(self, message: str) -> None:
        """Leave ``message`` in torchrun's error file (ignored outside torchrun)."""
        if self.error_file is None:
            return
        payload = {
            "message": {
                "message": terminal_safe(message),
                "extraInfo": {"timestamp": str(int(time.time()))},
            }
        }
        try:
            with open(self.error_file, "w", encoding="utf-8") as handle:
                json.dump(payload, handle)
        except OSError:
            pass  # the summary falls back to torchrun's own words; stderr has the message

    def _roll_call(self):
        """The job's roll call (``titan.distributed.roll_call``), or None if it is out of reach:
        this process is failing already, so the others are told what can be told."""
        if self.world_size == 1:
            return None
        from titan.distributed.roll_call import roll_call

        try:
            return roll_call(timeout_s=STORE_CONNECT_SECONDS)
        except DistributedFailure:
            return None

    def _tell_peers(self, message: str) -> None:
        ranks = self._roll_call()
        if ranks is not None:
            ranks.stopped(message)

    def _peers_after_collective_failure(self) -> str:
        ranks = self._roll_call()
        return ranks.after_collective_failure() if ranks is not None else ""

    def _say(self, text: str) -> None:
        (self.stderr or sys.stderr).write(text + "\n")
        self.tell_launcher(text)

    def _save_traceback(self, error: BaseException, *, dump_folder: str) -> str:
        text = "".join(traceback.format_exception(error))
        name = f"traceback_rank{self.rank}_{time.strftime('%Y%m%d-%H%M%S')}.txt"
        try:
            folder = Path(dump_folder)
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / name
            # A new file only, never through a link (titan.components.run_files).
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
            with os.fdopen(open_run_file(str(path), flags), "w", encoding="utf-8") as out:
                out.write(text)
        except (OSError, ValueError):  # the dump folder itself may be what failed
            try:
                handle, spare = tempfile.mkstemp(prefix=f"{PROG}-", suffix=f"-{name}")
                with os.fdopen(handle, "w", encoding="utf-8") as out:
                    out.write(text)
                path = Path(spare)
            except OSError as failed:
                return f"the traceback could not be saved ({failed.strerror or failed})"
        return f"the traceback is in {path}"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:16]
