"""A pipeline schedule read from ``parallelism.pipeline_parallel_schedule_csv``, checked before
torch runs it.

The file is the one torch's ``_PipelineScheduleRuntime`` reads: one row per pipeline rank, one
action per cell (or, as torch writes DualPipeV's, ``(0F3;3B1)OVERLAP_F_B``: computations run
one after the other), an empty cell an idle step::

    0F0,0F1,2F0,2F1,2B0,2B1,0B0,0B1          <- pipeline rank 0 (stages 0 and 2)
    1F0,1F1,3F0,3F1,3B0,3B1,1B0,1B1          <- pipeline rank 1 (stages 1 and 3)

An action is ``<stage><type>[<microbatch>]``. A file of compute actions only (``F``, ``B``,
``I``, ``W``) is the *compute-only* format: torch adds the communication itself. A file with
any communication action (``SEND_F``, ``RECV_F``, ``SEND_B``, ``RECV_B``, ``UNSHARD``,
``RESHARD``, ``REDUCE_GRAD``) is the *compute+comms* format and runs exactly as written; the
format is read from the file, so both run without another setting.

A schedule torch would refuse with a traceback, or that would leave ranks waiting on each other
for ever, is refused with the file, line and column of the first action at fault: here what is
no action or no CSV, in :mod:`titan.schemas.pipeline_csv_checks` what cannot run on the layout
or run to the end. Nothing here imports torch.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from typing import Literal

from titan.schemas.pipeline_csv_checks import (
    ACTION_TYPES,
    Action,
    ScheduleCsvError,
    check_action,
    check_complete,
    check_pairs,
    check_progress,
    check_transfers,
)

CsvFormat = Literal["compute_only", "compute_comms"]
"""The two formats of torch's ``_PipelineScheduleRuntime._load_csv``."""

MAX_BYTES = 16 * 1024 * 1024
"""A larger file is not a schedule (thousands of actions per rank fit in a few hundred KiB)."""

_SETTING = "parallelism.pipeline_parallel_schedule_csv"


_ACTION = re.compile(
    r"(\d{1,9})(" + "|".join(sorted(ACTION_TYPES, key=len, reverse=True)) + r")(\d{0,9})"
)

_EXAMPLE = "0F0 (stage 0, forward, microbatch 0), 0B0, 1SEND_F0 or 0UNSHARD"


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleCsv:
    """A checked schedule: its format and each pipeline rank's actions (idle steps left out)."""

    format: CsvFormat
    rows: list[list[Action]]


def read_schedule_csv(
    path: str, *, rank_stages: list[tuple[int, ...]], microbatches: int
) -> ScheduleCsv:
    """Read and check the schedule at ``path`` for a pipeline whose rank ``r`` holds the stages
    ``rank_stages[r]``, fed ``microbatches`` microbatches; raise :class:`ScheduleCsvError`."""
    rows = _parse(path, _read_text(path))
    stages = sum(len(held) for held in rank_stages)
    if len(rows) != len(rank_stages):
        raise ScheduleCsvError(
            f"{path}:{len(rows) + (len(rows) < len(rank_stages))}:1: the schedule has "
            f"{len(rows)} rows, but there are {len(rank_stages)} pipeline ranks "
            "(pipeline_parallel_degree)",
            hint=f"write one row of actions per pipeline rank, {len(rank_stages)} rows",
        )
    owner = {stage: rank for rank, held in enumerate(rank_stages) for stage in held}
    for rank, row in enumerate(rows):
        for action in row:
            check_action(action, rank=rank, owner=owner, stages=stages, microbatches=microbatches)
    comms = any(ACTION_TYPES[a.kind].comms for row in rows for a in row)
    check_complete(path, rows, stages=stages, microbatches=microbatches)
    if comms:
        check_transfers(rows, owner=owner, stages=stages)
        check_pairs(path, rows, owner=owner, stages=stages)
    check_progress(rows, owner=owner, stages=stages, comms=comms)
    return ScheduleCsv(format="compute_comms" if comms else "compute_only", rows=rows)


def _read_text(path: str) -> str:
    """The file's text; a missing, unreadable, huge or binary file is refused."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as error:
        raise ScheduleCsvError(
            f"{_SETTING} {path!r} cannot be read: {error.strerror or error}",
            hint="give the path of a readable schedule CSV file",
        ) from None
    if len(data) > MAX_BYTES:
        raise ScheduleCsvError(
            f"{path}: larger than {MAX_BYTES // (1024 * 1024)} MiB, which no schedule is",
            hint="give the path of the schedule's CSV file",
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ScheduleCsvError(
            f"{path}: not UTF-8 text (byte {error.start})",
            hint="a schedule CSV is text: one row of actions per pipeline rank",
        ) from None
    if "\0" in text:
        raise ScheduleCsvError(
            f"{path}: a binary file, not a schedule CSV",
            hint="give the path of the schedule's CSV file",
        )
    return text


def _parse(path: str, text: str) -> list[list[Action]]:
    """Each row's actions, read as torch's ``csv.reader`` reads them."""
    rows: list[list[Action]] = []
    lines = text.splitlines(keepends=True)
    try:
        parsed = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as error:
        raise ScheduleCsvError(
            f"{path}: not a CSV file: {error}",
            hint="write one row per pipeline rank of comma-separated actions",
        ) from None
    if len(parsed) != len(lines):
        # a quoted cell spanning lines: cells are then not where the lines say
        raise ScheduleCsvError(
            f"{path}: a quoted cell runs over several lines",
            hint="write each rank's actions on one line, without quotes",
        )
    for number, (line, cells) in enumerate(zip(lines, parsed, strict=True), start=1):
        row, offset = [], 0
        for cell in cells:
            column = line.find(cell, offset) + 1 if cell else offset + 1
            offset = max(offset, column - 1 + len(cell)) + 1
            where = f"{path}:{number}:{column}"
            text_cell = cell.strip()
            if not text_cell:
                continue  # an idle step
            row.extend(_actions_of(text_cell, where=where))
        rows.append(row)
    return rows


_OVERLAPPED = re.compile(r"\(([^()]*)\)OVERLAP_F_B")
"""A cell of computations torch runs one after the other (DualPipeV's overlapped forward and
backward), as ``_PipelineScheduleRuntime`` writes it: ``(0F3;3B1)OVERLAP_F_B``."""


def _actions_of(cell: str, *, where: str) -> list[Action]:
    """The action of one cell, or the computations of an overlapped cell in order."""
    overlapped = _OVERLAPPED.fullmatch(cell)
    parts = overlapped.group(1).split(";") if overlapped else [cell]
    found = []
    for part in parts:
        match = _ACTION.fullmatch(part.strip())
        computes = match is not None and not ACTION_TYPES[match.group(2)].comms
        if match is None or (overlapped and not computes):
            what = "an overlapped computation" if overlapped else "a pipeline action"
            raise ScheduleCsvError(
                f"{where}: {_brief(part.strip() if overlapped else cell)} is not {what}",
                hint=f"write actions as <stage><type>[<microbatch>], such as {_EXAMPLE}; "
                f"the types are {', '.join(ACTION_TYPES)}; an overlapped cell "
                "(a;b)OVERLAP_F_B holds computations (F, B, I, W) only",
            )
        stage, kind, microbatch = match.groups()
        found.append(Action(int(stage), kind, int(microbatch) if microbatch else None, where))
    return found


def _brief(text: str) -> str:
    """``repr(text)``, cut to a length a message can show."""
    return repr(text if len(text) <= 40 else text[:37] + "...")


__all__ = [
    "ACTION_TYPES",
    "Action",
    "CsvFormat",
    "ScheduleCsv",
    "ScheduleCsvError",
    "read_schedule_csv",
]
