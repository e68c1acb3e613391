"""Pipeline schedule CSVs (``parallelism.pipeline_parallel_schedule_csv``): both of torch's
formats are read (compute-only, and compute with communication actions), and a schedule the
pipeline cannot run is refused with the file, line and column of the action at fault -- by the
reader, by ``titan-validate`` in both config forms and by ``titan-train --preflight``.

That a communication-format CSV trains bit for bit like the named schedule it was written from
is ``test_pipeline_train``'s torchrun check (scenario ``comms_csv``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from titan.schemas.pipeline_csv import ScheduleCsvError, read_schedule_csv

from tests.helpers import validate
from tests.training_runs import REPO, child_env

LOOPED = [(0, 2), (1, 3)]
"""PP 2 with 4 stages, every other stage on a rank (PipelineScheduleMulti's placement)."""

ROW0 = "0F0,0F1,0F2,0F3,2F0,2F1,2F2,2F3,2B0,2B1,2B2,2B3,0B0,0B1,0B2,0B3"
ROW1 = "1F0,1F1,1F2,1F3,3F0,3F1,3F2,3F3,3B0,3B1,3B2,3B3,1B0,1B1,1B2,1B3"

# ROW0/ROW1 with the communication torch adds to them (its lowering, written out)
COMMS0 = (
    "0UNSHARD,2UNSHARD,0F0,0SEND_F0,2RECV_F0,0F1,0SEND_F1,2RECV_F1,0F2,0SEND_F2,2RECV_F2,0F3,"
    "0SEND_F3,2RECV_F3,2F0,2SEND_F0,2F1,2SEND_F1,2F2,2SEND_F2,2F3,2SEND_F3,2RECV_B0,2B0,"
    "2SEND_B0,2RECV_B1,2B1,2SEND_B1,2RECV_B2,2B2,2SEND_B2,2RECV_B3,2B3,2SEND_B3,2REDUCE_GRAD,"
    "2RESHARD,0RECV_B0,0B0,0RECV_B1,0B1,0RECV_B2,0B2,0RECV_B3,0B3,0REDUCE_GRAD,0RESHARD"
)
COMMS1 = (
    "1UNSHARD,3UNSHARD,1RECV_F0,1F0,1SEND_F0,1RECV_F1,1F1,1SEND_F1,1RECV_F2,1F2,1SEND_F2,"
    "1RECV_F3,1F3,1SEND_F3,3RECV_F0,3F0,3RECV_F1,3F1,3RECV_F2,3F2,3RECV_F3,3F3,3B0,3SEND_B0,"
    "1RECV_B0,3B1,3SEND_B1,1RECV_B1,3B2,3SEND_B2,1RECV_B2,3B3,3SEND_B3,1RECV_B3,3REDUCE_GRAD,"
    "3RESHARD,1B0,1SEND_B0,1B1,1SEND_B1,1B2,1SEND_B2,1B3,1SEND_B3,1REDUCE_GRAD,1RESHARD"
)


def _write(tmp_path: Path, text: str | bytes, name: str = "schedule.csv") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _read(path: Path, *, microbatches: int = 4):
    return read_schedule_csv(str(path), rank_stages=LOOPED, microbatches=microbatches)


def _overlapped() -> str:
    """Both rows, stage 2's forward of microbatch 3 and backward of microbatch 0 in one cell."""
    cells = ROW0.split(",")
    cells[cells.index("2F3")] = "(2F3;2B0)OVERLAP_F_B"
    cells.remove("2B0")
    return ",".join(cells) + "\n" + ROW1 + "\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"{ROW0}\n{ROW1}\n", "compute_only"),
        (f"{ROW0}\r\n{ROW1}", "compute_only"),  # Windows line ends, no final newline
        (f"{ROW0},,\n,{ROW1}\n", "compute_only"),  # empty cells are idle steps
        (f"{COMMS0}\n{COMMS1}\n", "compute_comms"),
        # stage 2's backward of microbatch 0 run right after its forward of microbatch 3
        (_overlapped(), "compute_only"),
    ],
    ids=["compute-only", "crlf", "idle-cells", "compute-comms", "overlapped"],
)
def test_runnable_schedules_are_read_in_their_format(tmp_path, text, expected):
    checked = _read(_write(tmp_path, text))
    assert checked.format == expected
    assert [len(row) for row in checked.rows] == [
        len(re.findall(r"\d+[A-Z_]+\d*", line)) for line in text.splitlines()
    ]


def _swap(row: str, old: str, new: str) -> str:
    assert old in row.split(","), old
    return ",".join(new if cell == old else cell for cell in row.split(","))


def _drop(row: str, cell: str) -> str:
    return ",".join(c for c in row.split(",") if c != cell)


# (case, file text, (line, the cell the finding points at, or None for column 1), phrase)
HOSTILE = [
    ("unknown-type", f"{_swap(ROW0, '0F2', '0X2')}\n{ROW1}\n", (1, "0X2"), "is not a pipeline"),
    ("junk-after", f"{ROW0}\n{_swap(ROW1, '3B1', '3B1;rm')}\n", (2, "3B1;rm"), "not a pipeline"),
    (
        "overlap-comms",
        f"{_swap(ROW0, '0F1', '(0F1;0SEND_F1)OVERLAP_F_B')}\n{ROW1}\n",
        (1, None),
        "'0SEND_F1' is not an overlapped computation",
    ),
    (
        "overlap-empty",
        f"{_swap(ROW0, '0F1', '()OVERLAP_F_B')}\n{ROW1}\n",
        (1, "()"),
        "'' is not an overlapped",
    ),
    (
        "overlap-nested",
        f"{_swap(ROW0, '0F1', '((0F1)OVERLAP_F_B)OVERLAP_F_B')}\n{ROW1}\n",
        (1, None),
        "is not a pipeline action",
    ),
    (
        "overlap-too-soon",
        f"{_drop(ROW0, '2B0').replace('2F0,', '(2F0;2B0)OVERLAP_F_B,')}\n{ROW1}\n",
        (1, None),
        "cannot go on",
    ),
    ("escape", f"{ROW0},\x1b[31mred\n{ROW1}\n", (1, "\x1b[31mred"), "not a pipeline action"),
    ("huge-stage", f"{_swap(ROW0, '0F0', '99999999999F0')}\n{ROW1}\n", (1, None), "not a"),
    ("stage-out", f"{_swap(ROW0, '2F1', '4F1')}\n{ROW1}\n", (1, "4F1"), "this layout has 4"),
    ("other-rank", f"{_swap(ROW0, '2F1', '1F1')}\n{ROW1}\n", (1, "1F1"), "is pipeline rank 1"),
    ("microbatch-out", f"{ROW0}\n{_swap(ROW1, '1B3', '1B4')}\n", (2, "1B4"), "into 4 micro"),
    ("no-microbatch", f"{_swap(ROW0, '0F3', '0F')}\n{ROW1}\n", (1, "0F"), "names no microbatch"),
    ("unshard-microbatch", f"0UNSHARD1,{ROW0}\n{ROW1}\n", (1, "0UNSHARD1"), "whole stage"),
    ("extra-row", f"{ROW0}\n{ROW1}\n{ROW1}\n", (3, None), "3 rows, but there are 2"),
    ("blank-row", f"{ROW0}\n\n{ROW1}\n", (3, None), "3 rows"),
    ("one-row", f"{ROW0}\n", (2, None), "1 rows, but there are 2"),
    ("empty", "", (1, None), "0 rows"),
    ("no-backward", f"{_drop(ROW0, '0B3')}\n{ROW1}\n", None, "stage 0 microbatch 3 lacks back"),
    ("twice", f"{ROW0}\n{ROW1},3F0\n", (2, None), "3F0 appears 2 times"),
    (
        "waits-for-ever",
        f"{ROW0}\n{_drop(ROW1, '1B0')}\n".replace("1F3,", "1F3,1B0,"),
        (1, "2B0"),  # the first rank that waits; the message lists every rank's
        "cannot go on",
    ),
    (
        "send-without-receive",
        f"{_drop(COMMS0, '2RECV_F1')}\n{COMMS1}\n",
        (1, "2F1"),
        "2F1 has no 2RECV_F1",
    ),
    (
        "compute-before-receive",
        f"{COMMS0}\n{COMMS1}\n".replace("1RECV_F0,1F0", "1F0,1RECV_F0"),
        (1, "2F0"),
        "cannot go on",
    ),
    # one communication action makes the file the compute+comms format, run as written
    ("mixed", f"0UNSHARD,{ROW0}\n{ROW1}\n", (1, "0F0"), "has no 0SEND_F0: the file has comm"),
    ("no-recv", f"{COMMS0}\n{_drop(COMMS1, '3RECV_F2')}\n", (2, "3F2"), "has no 3RECV_F2"),
    ("send-past-the-end", f"{COMMS0}\n{COMMS1},3SEND_F0\n", (2, "3SEND_F0"), "no neighbour"),
    ("sent-twice", f"{COMMS0},0SEND_F0\n{COMMS1}\n", (1, "0SEND_F0"), "appears 2 times"),
    ("multi-line-quote", f'"0F0\n,0F1"\n{ROW1}\n', None, "runs over several lines"),
]


@pytest.mark.parametrize(
    ("text", "where", "phrase"), [pytest.param(*case[1:], id=case[0]) for case in HOSTILE]
)
def test_hostile_schedule_is_refused_at_its_line(tmp_path, text, where, phrase):
    path = _write(tmp_path, text)
    with pytest.raises(ScheduleCsvError) as caught:
        _read(path)
    message = str(caught.value)
    assert phrase in message, message
    assert "; hint: " in message and caught.value.hint
    if where is None:
        assert message.startswith(f"{path}: "), message
        return
    line, cell = where
    found = re.match(rf"{re.escape(str(path))}:(\d+):(\d+): ", message)
    assert found, message
    assert int(found.group(1)) == line, message
    if cell is not None:
        text_line = text.splitlines()[line - 1]
        assert text_line[int(found.group(2)) - 1 :].startswith(cell), message


@pytest.mark.parametrize(
    ("data", "phrase"),
    [
        (b"\xff\xfe0\x00F\x000\x00", "not UTF-8"),
        (b"0F0\x00\n", "binary file"),
        (b"0F0," * (4 * 1024 * 1024 + 1), "larger than 16 MiB"),
    ],
    ids=["utf16", "nul", "huge"],
)
def test_files_that_are_no_schedule_are_refused(tmp_path, data, phrase):
    with pytest.raises(ScheduleCsvError, match=phrase):
        _read(_write(tmp_path, data))


def test_a_folder_or_missing_file_is_refused_without_a_traceback(tmp_path):
    for path in (tmp_path, tmp_path / "missing.csv"):
        with pytest.raises(ScheduleCsvError, match="cannot be read"):
            _read(path)


def _job(tmp_path: Path, csv: Path) -> Path:
    """A llama3 debugmodel job (6 layers) on PP 2 running the CSV: 4 stages, 4 microbatches."""
    path = tmp_path / "job.toml"
    path.write_text(
        textwrap.dedent(
            f"""\
            [model]
            name = "llama3"
            flavor = "debugmodel"

            [training]
            local_batch_size = 4

            [parallelism]
            pipeline_parallel_degree = 2
            pipeline_parallel_schedule = "PipelineScheduleMulti"
            pipeline_parallel_schedule_csv = "{csv.as_posix()}"
            """
        ),
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize("form", ["toml", "as-registry"])
def test_titan_validate_points_at_the_schedule_and_the_csv_line(tmp_path, form):
    good = _write(tmp_path, f"{COMMS0}\n{COMMS1}\n", "good.csv")
    args = ["--format", "json", "--ngpu", "2"] + (["--as-registry"] if form != "toml" else [])
    clean = validate(*args, _job(tmp_path, good))
    assert clean.code == 0, clean.out + clean.err
    bad = _write(tmp_path, f"{ROW0}\n{_swap(ROW1, '3F2', '2F2')}\n", "bad.csv")
    job = _job(tmp_path, bad)
    result = validate(*args, job)
    assert result.code == 1, result.err
    (finding,) = result.json()["diagnostics"]
    assert finding["code"] == "pipeline-layout"
    assert finding["path"] == "parallelism.pipeline_parallel_schedule_csv"
    assert finding["line"] == 11  # the key's line in the job file
    column = ROW1.index("3F2") + 1
    assert finding["message"].startswith(f"{bad}:2:{column}: 2F2 is in the row of pipeline rank 1")


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo.csv"
    os.mkfifo(path)
    return path


def _folder(tmp_path: Path) -> Path:
    path = tmp_path / "folder.csv"
    path.mkdir()
    return path


def _link_to_a_folder(tmp_path: Path) -> Path:
    path = tmp_path / "link.csv"
    path.symlink_to(_folder(tmp_path))
    return path


@pytest.mark.parametrize(
    ("make", "kind"),
    [(_fifo, "a FIFO (named pipe)"), (_folder, "a folder"), (_link_to_a_folder, "a folder")],
)
@pytest.mark.parametrize("form", ["toml", "as-registry"])
def test_a_csv_path_that_is_no_file_is_the_runs_refusal_in_validate(tmp_path, make, kind, form):
    # The run refuses it (``titan.distributed.pipeline_parallel``); a FIFO is stat-ed, never
    # opened (opening one waits for a writer).
    csv = make(tmp_path)
    args = ["--format", "json", "--ngpu", "2"] + (["--as-registry"] if form != "toml" else [])
    result = validate(*args, _job(tmp_path, csv))
    assert result.code == 1, result.out + result.err
    (finding,) = result.json()["diagnostics"]
    assert (finding["code"], finding["path"], finding["line"]) == (
        "pipeline-layout",
        "parallelism.pipeline_parallel_schedule_csv",
        11,
    )
    assert f"is {kind}, not a file" in finding["message"]


@pytest.mark.slow  # a titan-train process
def test_preflight_refuses_a_hostile_csv_at_its_line(tmp_path):
    """The same finding from ``titan-train --preflight`` (a comms CSV passing is
    ``test_titan_validate_points_at_the_schedule_and_the_csv_line``'s, through the same rule)."""
    bad = _write(tmp_path, f"{ROW0}\n{ROW1.replace('1F0', '1Fx')}\n", "bad.csv")
    done = subprocess.run(
        [sys.executable, "-m", "titan.train", "--preflight", "--ngpu", "2"]
        + ["--job.config_file", str(_job(tmp_path, bad))],
        capture_output=True,
        text=True,
        timeout=600,
        env=child_env(PYTHONPATH=str(REPO)),  # this checkout's titan in the child
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert f"{bad}:2:1: '1Fx' is not a pipeline action" in done.stderr, done.stderr
    assert "job.toml:11:1: error[pipeline-layout]" in done.stderr, done.stderr
