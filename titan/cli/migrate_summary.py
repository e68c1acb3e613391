"""What a multi-file ``titan-migrate`` run shows besides its report: a progress bar while the
files are read, and one table line per file at the end.

The rows are data (``titan.migrate.plan.report.tree_summary``); this module only draws them with rich. The
progress bar is for a person watching a long run: it appears only when more than
:data:`PROGRESS_AFTER` files are migrated and standard error is a terminal, never in CI (``CI``
set) or into a pipe or a log, and it disappears when the plans are done.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TextIO

PROGRESS_AFTER = 20
"""Runs with more files than this get a progress bar (on a terminal)."""

_STYLES = {
    "lossless": "green",
    "upgraded": "cyan",
    "undated": "magenta",
    "reported": "yellow",
    "failed": "bold red",
}


def wants_progress(files: int, *, stream: TextIO) -> bool:
    """Whether a run of ``files`` files shows a progress bar on ``stream``."""
    if files <= PROGRESS_AFTER or os.environ.get("CI") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, OSError, ValueError):
        return False


@contextlib.contextmanager
def progress(files: int, *, stream: TextIO, enabled: bool) -> Iterator[Callable[[str], None]]:
    """A function to call after each file (with its name); draws a transient bar when
    ``enabled``, else does nothing."""
    if not enabled:
        yield lambda shown: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    bar = Progress(
        TextColumn("migrating"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[file]}", style="dim"),
        console=Console(file=stream, stderr=True),
        transient=True,
    )
    with bar:
        task = bar.add_task("migrate", total=files, file="")
        yield lambda shown: bar.update(task, advance=1, file=shown)


def totals(rows: Sequence[dict[str, Any]], modules: Sequence[Any]) -> str:
    """``N files: a lossless, b upgraded, c reported, d failed; m modules written (r refused)``."""
    from titan.migrate.plan.report import FILE_OUTCOMES

    outcomes = [row["outcome"] for row in rows]
    parts = [f"{outcomes.count(o)} {o}" for o in FILE_OUTCOMES if outcomes.count(o)]
    written = sum(1 for m in modules if m.written)
    refused = sum(1 for m in modules if m.refused)
    line = f"{len(rows)} file{'' if len(rows) == 1 else 's'}: {', '.join(parts)}"
    line += f"; {written} module{'' if written == 1 else 's'} written"
    if refused:
        line += f", {refused} refused"
    return line


def table(
    rows: Sequence[dict[str, Any]], modules: Sequence[Any], *, out: TextIO, color: bool
) -> str:
    """The rows as a table (with the totals under it), sized to ``out`` when it is a terminal
    and to its contents otherwise (a log or a file never wraps a path)."""
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    grid = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, highlight=False)
    show_upgraded = any(row["upgraded"] for row in rows)
    for name in ("file", "function", "outcome", *(("upgraded",) if show_upgraded else ())):
        grid.add_column(name, overflow="fold")
    grid.add_column("not carried")
    grid.add_column("module", overflow="fold")
    refused = {plan.source: m.path for m in modules if m.refused for plan in m.plans}
    for row in rows:
        counts = [f"{n} {status}" for status, n in row["not_carried"].items()]
        if row["errors"]:
            counts.append(f"{row['errors']} error{'' if row['errors'] == 1 else 's'}")
        module = row["module"]
        if module is None and row["function"] and row["file"] in refused:
            module = f"{refused[row['file']]} (refused)"
        cells = [  # Text, not markup: a file name may hold brackets
            Text(row["file"]),
            Text(row["function"] or "-"),
            Text(row["outcome"], style=_STYLES[row["outcome"]]),
            *((Text(str(row["upgraded"] or "-")),) if show_upgraded else ()),
            Text(", ".join(counts) or "-"),
            Text(module or "-"),
        ]
        grid.add_row(*cells)
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=_width(out),
        force_terminal=color,
        color_system="standard" if color else None,
        highlight=False,
        emoji=False,
    )
    console.print(grid)
    console.print(totals(rows, modules), markup=False)
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines()) + "\n"


def _width(out: TextIO) -> int:
    try:
        if out.isatty():
            return os.get_terminal_size(out.fileno()).columns
    except (AttributeError, OSError, ValueError):
        pass
    return 10_000  # not a terminal: as wide as the longest line, which rich then uses
