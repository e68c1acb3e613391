"""Which exceptions of a run are the user's to fix, and how a failed run is shown.

A config the trainer cannot honour, a missing tokenizer or dataset, a checkpoint that does not
fit, a folder that cannot be written: these are raised as ``ValueError`` / ``OSError`` /
``NotBuildableError`` (and their subclasses) with a message that names the setting, and
``titan-train`` prints the message alone. Anything else is a bug (in titan, or torch) or the
machine failing: it is shown in one line, its traceback saved to a file rather than printed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import TextIO

from titan.config.configurable import NotBuildableError

PROG = "titan-train"

# OSError covers the machine's side of a run (a missing or unwritable path, a full disk): its
# message and file name say what to fix, a traceback would not.
USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, OSError, NotBuildableError)

# Control characters other than newline and tab are escaped: a description, a path or a dataset
# name from the config must not be able to drive the reader's terminal (ANSI escapes).
_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)] if c not in (9, 10)}


def terminal_safe(text: str) -> str:
    """``text`` with its terminal control characters escaped (newlines and tabs kept)."""
    return text.translate(_CONTROL)


def describe(error: BaseException) -> str:
    """The message of ``error``; a file error names its path."""
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
        """``titan-train: error: MESSAGE`` for the user and for torchrun."""
        self._say(f"{self.prog}: error: {terminal_safe(message)}")

    def interrupted(self) -> None:
        self._say(f"{self.prog}: interrupted")

    def crash(self, error: BaseException, *, dump_folder: str) -> None:
        """An exception titan did not expect: one line, and where its traceback was saved."""
        saved = self._save_traceback(error, dump_folder=dump_folder)
        self.report(
            f"the run stopped on an unexpected {type(error).__name__}: {error}\n"
            f"  {saved}; if the message does not point at your config or machine, it is a bug "
            "in titan: please report it with that traceback (TITAN_DEBUG=1 prints it instead)"
        )

    def config_rejected(self) -> None:
        """The config's findings are printed by rank 0 alone; torchrun's summary says so."""
        self.tell_launcher(f"{self.prog}: error: the config has errors; rank 0 printed them")

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
            path.write_text(text, encoding="utf-8")
        except (OSError, ValueError):  # the dump folder itself may be what failed
            try:
                handle, spare = tempfile.mkstemp(prefix=f"{PROG}-", suffix=f"-{name}")
                with os.fdopen(handle, "w", encoding="utf-8") as out:
                    out.write(text)
                path = Path(spare)
            except OSError as failed:
                return f"the traceback could not be saved ({failed.strerror or failed})"
        return f"the traceback is in {path}"
