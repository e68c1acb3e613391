"""The examples in README.md and docs/ are run, and their output compared with what the page says.

The markdown format, kept simple on purpose:

- A fenced block whose info string starts with ``console`` is an example that runs. Each line
  beginning with ``$ `` is a command (a line ending in ``\\`` continues on the next one); the
  lines after it, up to the next command, are its output (stdout and stderr, as a terminal shows
  them). A line that is only ``...`` stands for any number of lines. ``console slow`` marks an
  example that trains or launches processes (pytest ``-m slow``).
- A fenced block of any language whose first line is ``# file: NAME`` (``// file: NAME`` where
  ``#`` is no comment) is written, exactly as shown and that line included, to NAME in the page's
  folder before the examples after it run.
- Every page runs in a fresh folder of its own that holds a copy of ``legacy_configs/``, so its
  commands read as if run from the repository root and whatever they write stays there. The
  blocks of a page run in order in one shell: files and ``cd`` carry over, ``echo $?`` reports
  the previous command.

Before the comparison, the page folder is written ``$PWD`` and the checkout ``<titan checkout>``
in the output, and both sides lose what varies from run to run (clock times, throughput,
memory; see ``VOLATILE``). Losses stay: seeded CPU runs of titan-train are deterministic (the
examples run with ``OMP_NUM_THREADS=1``). Log lines of ranks other than 0 may come in any order.

    .venv/bin/python -m tests.doc_examples              # check every page
    .venv/bin/python -m tests.doc_examples --update     # rewrite the outputs that changed
    .venv/bin/python -m tests.doc_examples docs/migrate.md --update
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+)(?P<info>.*)$")
FILE_MARKER = re.compile(r"^(?:#|//) file: (?P<name>\S+)\s*$")
WILDCARD = "..."
# A log line of a rank other than 0.
OTHER_RANK = re.compile(r"\[titan rank[1-9]\d*\] ")
# Printed once after each command, so one shell can run a whole page and its output be split.
END_MARK = "<<titan-doc-example-end>>"
# Ends the text of a file a page writes (a bash here-document).
FILE_END = "TITAN_DOC_FILE_END"
# Seconds one page may run for; an example that hangs fails instead of blocking the suite.
PAGE_TIMEOUT = 900

# What differs between two runs of the same command: replaced on both sides before comparing.
VOLATILE = (
    (re.compile(r"(\[titan rank\d+\] )\d\d:\d\d:\d\d"), r"\1HH:MM:SS"),
    (re.compile(r"(tps: +)[\d,]+"), r"\1N"),
    (re.compile(r"(tflops: +)[\d.]+"), r"\1N"),
    (re.compile(r"(mfu: +)[\d.]+%?"), r"\1N"),
    (re.compile(r"(memory: +)[\d.]+GiB"), r"\1N"),
    (re.compile(r"(\bin )\d+(?:\.\d+)? s\b"), r"\1T s"),
    (re.compile(r'("(?:tps|tflops|mfu|memory_gib|elapsed_s|time)": )[^,}]+'), r"\1N"),
)


@dataclass
class Command:
    """One ``$ command`` of a console block and the output the page shows for it."""

    text: str
    expected: list[str]
    line: int  # 1-based line of the ``$`` in the page


@dataclass
class Block:
    """A fenced block of a page: an example to run, a file to write, or neither."""

    start: int  # index of the opening fence line
    end: int  # index of the closing fence line
    indent: str
    info: str
    body: list[str]
    commands: list[Command] = field(default_factory=list)

    @property
    def is_console(self) -> bool:
        """Whether this block is an example that runs."""
        return self.info.split()[:1] == ["console"]

    @property
    def slow(self) -> bool:
        """Whether the block is marked ``slow`` (it trains or launches processes)."""
        return self.is_console and "slow" in self.info.split()[1:]

    @property
    def file_name(self) -> str | None:
        """The file the block writes, if its first line names one."""
        match = FILE_MARKER.match(self.body[0]) if self.body else None
        return match["name"] if match else None


@dataclass
class Mismatch:
    """A command whose output is not what the page shows."""

    page: Path
    command: Command
    actual: list[str]

    def __str__(self) -> str:
        diff = difflib.unified_diff(
            self.command.expected, self.actual, "page", "actual", lineterm="", n=2
        )
        return f"{self.page}:{self.command.line}: $ {self.command.text}\n" + "\n".join(diff)


def parse(text: str) -> list[Block]:
    """The fenced blocks of a markdown page, with the commands of its console blocks."""
    lines = text.split("\n")
    blocks, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        j = i + 1
        while j < len(lines) and lines[j].strip() != fence:
            j += 1
        body = [
            line[len(indent) :] if line.startswith(indent) else line for line in lines[i + 1 : j]
        ]
        block = Block(i, j, indent, opening["info"].strip(), body)
        if block.is_console:
            block.commands = _commands(block, first_line=i + 2)
        blocks.append(block)
        i = j + 1
    return blocks


def _commands(block: Block, *, first_line: int) -> list[Command]:
    """Split a console block into commands and their expected output."""
    commands: list[Command] = []
    continued = False
    for offset, line in enumerate(block.body):
        if continued:
            commands[-1].text += "\n" + line
            continued = line.endswith("\\")
        elif line.startswith("$ "):
            commands.append(Command(line[2:], [], first_line + offset))
            continued = line.endswith("\\")
        elif commands:
            commands[-1].expected.append(line.rstrip())
        elif line.strip():
            raise ValueError(f"line {first_line + offset}: output before the first `$ ` command")
    for command in commands:
        while command.expected and not command.expected[-1]:
            command.expected.pop()
    return commands


def normalise(lines: list[str]) -> list[str]:
    """The lines with what varies between runs replaced by fixed words."""
    out = []
    for line in lines:
        for pattern, replacement in VOLATILE:
            line = pattern.sub(replacement, line)
        out.append(line.rstrip())
    return out


def matches(expected: list[str], actual: list[str]) -> bool:
    """Whether the actual output is what the page shows (``...`` lines match any lines).

    The log lines of ranks other than 0 are compared as a set of lines: processes write them in
    an order no run promises."""
    expected, actual = normalise(expected), normalise(actual)
    theirs = sorted(line for line in expected if OTHER_RANK.match(line))
    ours = sorted(line for line in actual if OTHER_RANK.match(line))
    if any(line.strip() == WILDCARD for line in expected):
        if any(theirs.count(line) > ours.count(line) for line in theirs):
            return False
    elif theirs != ours:
        return False
    parts = []
    for line in expected:
        if OTHER_RANK.match(line):
            continue
        parts.append(r"(?:[^\n]*\n)*?" if line.strip() == WILDCARD else re.escape(line) + r"\n")
    text = "".join(line + "\n" for line in actual if not OTHER_RANK.match(line))
    return re.fullmatch("".join(parts), text) is not None


def updated(expected: list[str], actual: list[str]) -> list[str]:
    """The output to write in place of ``expected``, keeping its ``...`` elisions.

    The part before the first ``...`` takes as many of the first actual lines, the part after the
    last as many of the last; a part between two is placed where its first line fits best.
    """
    cuts = [i for i, line in enumerate(expected) if line.strip() == WILDCARD]
    if not cuts:
        return actual
    parts = [expected[a + 1 : b] for a, b in zip([-1, *cuts], [*cuts, len(expected)], strict=True)]
    head, middle, tail = parts[0], parts[1:-1], parts[-1]
    if len(head) + len(tail) > len(actual):
        return actual
    out, position, stop = list(actual[: len(head)]), len(head), len(actual) - len(tail)
    # The ``...`` before each middle part; the last one is written after the loop.
    for cut, part in zip(cuts, middle, strict=False):
        out.append(expected[cut])
        window = actual[position:stop]
        if not part or len(window) < len(part):
            continue
        scores = [
            difflib.SequenceMatcher(None, part[0], line).ratio()
            for line in window[: len(window) - len(part) + 1]
        ]
        best = position + scores.index(max(scores))
        out += actual[best : best + len(part)]
        position = best + len(part)
    out.append(expected[cuts[-1]])
    return out + (actual[stop:] if tail else [])


def _environment(workdir: Path) -> dict[str, str]:
    """The environment of a page's shell: titan's commands first on PATH, no colour, no
    buffering (stdout and stderr then interleave as on a terminal), a private cache."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(
        NO_COLOR="1",
        # One thread per process: torchrun then launches without its banner, and a run's
        # arithmetic is the same on every machine.
        OMP_NUM_THREADS="1",
        # torch's own deprecation notices differ between torch releases; titan logs its warnings.
        PYTHONWARNINGS="ignore",
        TERM="dumb",
        COLUMNS="200",
        PYTHONUNBUFFERED="1",
        PYTHONDONTWRITEBYTECODE="1",
        TITAN_CACHE_DIR=str(workdir / ".titan-cache"),
    )
    for name in ("FORCE_COLOR", "TITAN_DEBUG"):
        env.pop(name, None)
    return env


def _script(blocks: list[Block], workdir: Path) -> tuple[str, list[Command]]:
    """One bash script for the page: its files written, its commands run, an end mark after
    each command that keeps the command's exit status for ``echo $?``."""
    lines, commands = ["cd " + _quote(workdir)], []
    for block in blocks:
        if block.file_name:
            # Written where the block stands, so a later block may replace the file.
            name = _quote(Path(block.file_name))
            lines.append(f"mkdir -p \"$(dirname {name})\" && cat > {name} <<'{FILE_END}'")
            lines += [*block.body, FILE_END]
        for command in block.commands:
            commands.append(command)
            lines.append(command.text)
            lines.append(f"__rc=$?; printf '\\n%s\\n' '{END_MARK}'; (exit $__rc)")
    return "\n".join(lines) + "\n", commands


def _quote(path: Path) -> str:
    """``path`` quoted for bash."""
    return "'" + str(path).replace("'", "'\\''") + "'"


def run_page(page: Path, blocks: list[Block], workdir: Path) -> list[list[str]]:
    """Run the page's commands in ``workdir``; the output lines of each, paths made generic."""
    shutil.copytree(REPO / "legacy_configs", workdir / "legacy_configs", dirs_exist_ok=True)
    script, commands = _script(blocks, workdir)
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", script],
        cwd=workdir,
        env=_environment(workdir),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=PAGE_TIMEOUT,
    )
    text = done.stdout
    for path, name in ((workdir.resolve(), "$PWD"), (workdir, "$PWD"), (REPO, "<titan checkout>")):
        text = text.replace(str(path), name)
    chunks = text.split(f"\n{END_MARK}\n")
    if len(chunks) != len(commands) + 1:
        raise RuntimeError(f"{page}: the page's shell stopped early:\n{text[-2000:]}")
    outputs = []
    for chunk in chunks[:-1]:
        lines = [line.rstrip() for line in chunk.split("\n")]
        while lines and not lines[-1]:
            lines.pop()
        while lines and not lines[0]:
            lines.pop(0)
        outputs.append(lines)
    return outputs


def check_page(page: Path, *, slow: bool, update: bool = False, workdir: Path | None = None):
    """Run a page's examples (the slow ones too when ``slow``); the mismatches found.

    Examples after a slow one must not need what it wrote: without ``slow`` they run alone.
    With ``update``, the page is rewritten with the actual output of each mismatch."""
    text = page.read_text(encoding="utf-8")
    blocks = [b for b in parse(text) if b.file_name or (b.is_console and (slow or not b.slow))]
    if not any(b.commands for b in blocks):
        return []
    with tempfile.TemporaryDirectory(prefix="titan-docs-") as tmp:
        outputs = run_page(page, blocks, Path(workdir or tmp))
    runs = [c for b in blocks for c in b.commands]
    mismatches = [
        Mismatch(page, c, out)
        for c, out in zip(runs, outputs, strict=True)
        if not matches(c.expected, out)
    ]
    if update and mismatches:
        _rewrite(page, text, {m.command.line: m.actual for m in mismatches})
    return mismatches


def _rewrite(page: Path, text: str, actual: dict[int, list[str]]) -> None:
    """Write the page again with new output for the commands in ``actual`` (by the line of
    their ``$``), keeping every other line as it is."""
    lines = text.split("\n")
    out, i = [], 0
    for block in parse(text):
        out += lines[i : block.start + 1]
        body, new_body, j = block.body, [], 0
        for command in block.commands:
            first = command.line - block.start - 2
            n_text = command.text.count("\n") + 1
            n_out = _output_length(body, first + n_text)
            new_body += body[j : first + n_text]
            output = body[first + n_text : first + n_text + n_out]
            if command.line in actual:
                output = updated(output, actual[command.line])
            new_body += output
            j = first + n_text + n_out
        new_body += body[j:]
        out += [block.indent + line if line else line for line in new_body]
        i = block.end
    out += lines[i:]
    page.write_text("\n".join(out), encoding="utf-8")


def _output_length(body: list[str], start: int) -> int:
    """How many lines from ``start`` are output, up to the next command (trailing blank lines
    excluded)."""
    end = start
    while end < len(body) and not body[end].startswith("$ "):
        end += 1
    while end > start and not body[end - 1].strip():
        end -= 1
    return end - start


def pages() -> list[Path]:
    """README.md and every page under docs/."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def main(argv: list[str] | None = None) -> int:
    """Check (or ``--update``) the examples of the named pages, or of every page."""
    parser = argparse.ArgumentParser(prog="python -m tests.doc_examples", description=__doc__)
    parser.add_argument("pages", nargs="*", type=Path, help="pages to check (default: all)")
    parser.add_argument("--update", action="store_true", help="rewrite outputs that changed")
    parser.add_argument("--fast", action="store_true", help="skip the examples marked slow")
    args = parser.parse_args(argv)
    failed = 0
    for page in [p.resolve() for p in args.pages] or pages():
        mismatches = check_page(page, slow=not args.fast, update=args.update)
        for mismatch in mismatches:
            print(mismatch, end="\n\n")
        verb = "rewrote" if args.update else "differ"
        status = f"{len(mismatches)} {verb}" if mismatches else "ok"
        print(f"{page.relative_to(REPO)}: {status}", flush=True)
        failed += len(mismatches)
    return 1 if failed and not args.update else 0


if __name__ == "__main__":
    sys.exit(main())
