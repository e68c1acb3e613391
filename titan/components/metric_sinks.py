"""Where metrics go: a JSON-lines file, TensorBoard, Weights & Biases and the console.

Imported by ``MetricsProcessor`` when it is built, so reading configs never imports rich or torch.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import resource
import sys
from pathlib import Path
from typing import Any, TextIO

from titan.components.optional_packages import require_package
from titan.components.run_files import open_run_file

GIB = 1024**3


class JsonlSink:
    """Appends one JSON object per line; ``json`` writes floats with ``repr``, so they round-trip.

    NaN and infinities are not JSON (``json.dumps`` would write the bare word ``NaN``, which
    strict readers reject): they are written as ``null``.
    """

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        # lstat: a link is not followed even to read its size (opening it is refused).
        self.had_records = path.exists() and path.lstat().st_size > 0
        """Whether the file already held records (of an earlier run) when this sink opened it."""
        # Opened at the first record: a run that fails before its first step leaves no file.
        self._file: TextIO | None = None
        self._closed = False

    def write(self, record: dict[str, Any]) -> None:
        if self._closed:
            return
        if self._file is None:
            # Never through a link or into a FIFO (titan.components.run_files).
            fd = open_run_file(str(self.path), os.O_RDWR | os.O_APPEND | os.O_CREAT)
            self._file = os.fdopen(fd, "a", encoding="utf-8")
            if self.had_records and not _ends_with_newline(fd):
                # An earlier run killed in the middle of a line: end that line, keep ours whole.
                self._file.write("\n")
        try:
            self._file.write(json.dumps(_finite(record), allow_nan=False) + "\n")
            # Flush every record: a crashed run keeps every step it logged.
            self._file.flush()
        except OSError as error:  # a full disk: the message names the file
            self._abandon()
            raise OSError(error.errno, error.strerror, str(self.path)) from None

    def close(self) -> None:
        self._closed = True
        if self._file is not None:
            self._file.close()
            self._file = None

    def _abandon(self) -> None:
        """Stop writing after a failed write; what it could not write stays unwritten (closing
        would only try, and fail, again)."""
        self._closed = True
        file, self._file = self._file, None
        try:
            file.close()
        except OSError:
            pass


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by ``None``."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def _ends_with_newline(fd: int) -> bool:
    """Whether the file open as ``fd`` is empty or ends a line (read without moving ``fd``)."""
    size = os.fstat(fd).st_size
    return size == 0 or os.pread(fd, 1, size - 1) == b"\n"


class TensorBoardSink:
    """Scalars through ``torch.utils.tensorboard``."""

    def __init__(self, log_dir: Path) -> None:
        check_tensorboard()
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = log_dir
        self._writer = SummaryWriter(str(log_dir), max_queue=1000)

    def log(self, scalars: dict[str, float], step: int) -> None:
        for tag, value in scalars.items():
            self._writer.add_scalar(tag, value, step)

    def close(self) -> None:
        self._writer.close()


class WandbSink:
    """Scalars through Weights & Biases; the project comes from ``WANDB_PROJECT``."""

    def __init__(self, log_dir: Path) -> None:
        check_wandb()
        import wandb

        log_dir.mkdir(parents=True, exist_ok=True)
        self._wandb = wandb
        wandb.init(project=os.environ.get("WANDB_PROJECT", "titan"), dir=str(log_dir))

    def log(self, scalars: dict[str, float], step: int) -> None:
        self._wandb.log(scalars, step=step)

    def close(self) -> None:
        if self._wandb.run is not None:
            self._wandb.finish()


def check_tensorboard() -> None:
    require_package(
        "tensorboard", needed_for="metrics.enable_tensorboard", install="pip install tensorboard"
    )


def check_wandb() -> None:
    require_package("wandb", needed_for="metrics.enable_wandb", install="pip install wandb")


class ConsoleSink:
    """One rich line per logged step, and a step/total progress bar when stdout is a terminal."""

    def __init__(self, *, color: bool, total_steps: int | None, stream: TextIO | None = None):
        from rich.console import Console

        stream = stream if stream is not None else sys.stdout
        self.console = Console(file=stream, no_color=not color, highlight=False)
        self._progress: Any = None
        self._task: Any = None
        if stream.isatty():
            self._start_progress(total_steps)

    def _start_progress(self, total_steps: int | None) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        self._progress = Progress(
            TextColumn("step"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=self.console,
        )
        self._task = self._progress.add_task("train", total=total_steps)
        self._progress.start()

    def advance_to(self, step: int) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=step)

    def print(self, markup: str) -> None:
        # soft_wrap: a pipe gets rich's default width of 80, which would break the line.
        self.console.print(markup, soft_wrap=True)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class MemoryPeak:
    """Peak memory since the last reset: the accelerator's caching allocator, or the process RSS."""

    reserved_gib: float
    allocated_gib: float | None


def peak_memory(device_type: str) -> MemoryPeak:
    """The peak memory of this process on ``device_type`` since ``reset_peak_memory``."""
    if device_type == "cuda":
        import torch

        return MemoryPeak(
            reserved_gib=torch.cuda.max_memory_reserved() / GIB,
            allocated_gib=torch.cuda.max_memory_allocated() / GIB,
        )
    # No allocator statistics off the GPU: the process's peak resident set size (since the
    # process started; it cannot be reset). Linux reports KiB, macOS bytes.
    max_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rss_bytes = max_rss if sys.platform == "darwin" else max_rss * 1024
    return MemoryPeak(reserved_gib=rss_bytes / GIB, allocated_gib=None)


def reset_peak_memory(device_type: str) -> None:
    if device_type == "cuda":
        import torch

        torch.cuda.reset_peak_memory_stats()


def accelerator_name(device_type: str) -> str | None:
    """The device name ``peak_flops`` understands, or None off the GPU."""
    if device_type != "cuda":
        return None
    import torch

    return torch.cuda.get_device_name()
