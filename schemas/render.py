"""Renderers: diagnostics in, text / JSON / GitHub annotations / SARIF out.

Checking and reporting are separate: renderers never decide what is wrong, and every format
carries the same findings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TextIO

from titan.schemas.diagnostics import CODES, Diagnostic, Severity, count

# json and urllib.parse are imported by the formats that use them: plain text, the pre-commit
# default, should not pay for them.

TOOL_NAME = "titan-validate"
TOOL_URI = "https://github.com/titan-tools/titan"


def render(
    diagnostics: Sequence[Diagnostic],
    *,
    format: str,
    files: int,
    out: TextIO,
    sources: Mapping[str, str] | None = None,
    color: bool = False,
    tool: str = TOOL_NAME,
    version: str = "0",
) -> None:
    """The one entry point: ``diagnostics`` in ``format`` (one of :data:`FORMATS`) to ``out``.

    ``files`` is how many files were checked (the summaries count them), ``sources`` maps file
    names to their text (the text format quotes the line), ``color`` styles the text format,
    ``tool`` and ``version`` name the command in JSON, GitHub annotations and SARIF.
    """
    extra = {"text": {"sources": sources or {}, "color": color}, "sarif": {"version": version}}
    FORMATS[format](diagnostics, files=files, out=out, tool=tool, **extra.get(format, {}))


def _summary(diagnostics: Sequence[Diagnostic], files: int) -> dict[str, int]:
    return {
        "files": files,
        "errors": count(list(diagnostics), Severity.ERROR),
        "warnings": count(list(diagnostics), Severity.WARNING),
        "infos": count(list(diagnostics), Severity.INFO),
    }


def as_dict(d: Diagnostic) -> dict:
    """One finding as the JSON formats carry it (file, line and column flattened)."""
    span = d.span
    return {
        "code": d.code,
        "severity": d.severity.value,
        "path": d.path,
        "message": d.message,
        "hint": d.hint,
        "file": span.file if span else None,
        "line": span.line if span else None,
        "col": span.col if span else None,
        "end_line": (span.end_line or span.line) if span else None,
        "end_col": span.end_col if span else None,
    }


def render_json(
    diagnostics: Sequence[Diagnostic], *, files: int, out: TextIO, tool: str = TOOL_NAME
) -> None:
    """One JSON object: the findings and a summary."""
    import json

    payload = {
        "tool": tool,
        "diagnostics": [as_dict(d) for d in diagnostics],
        "summary": _summary(diagnostics, files),
    }
    json.dump(payload, out, indent=2, ensure_ascii=False)
    out.write("\n")


def _gh_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_property(text: str) -> str:
    return _gh_data(text).replace(":", "%3A").replace(",", "%2C")


def render_github(
    diagnostics: Sequence[Diagnostic], *, files: int, out: TextIO, tool: str = TOOL_NAME
) -> None:
    """GitHub Actions workflow commands (``::error file=...::message``), one per finding."""
    level = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}
    for d in diagnostics:
        props = [f"title={_gh_property(f'{tool} ({d.code})')}"]
        if d.span is not None:
            props = [
                f"file={_gh_property(d.span.file)}",
                f"line={d.span.line}",
                f"col={d.span.col}",
                *([f"endColumn={d.span.end_col}"] if d.span.end_col else []),
                *props,
            ]
        message = d.message + (f" ({d.hint})" if d.hint else "")
        out.write(f"::{level[d.severity]} {','.join(props)}::{_gh_data(message)}\n")
    summary = _summary(diagnostics, files)
    out.write(
        f"{tool}: {summary['errors']} errors, {summary['warnings']} warnings in {files} files\n"
    )


def render_sarif(
    diagnostics: Sequence[Diagnostic],
    *,
    files: int,
    out: TextIO,
    tool: str = TOOL_NAME,
    version: str = "0",
) -> None:
    """A SARIF 2.1.0 log with one run; rule ids are the diagnostic codes."""
    import json
    import urllib.parse

    codes = sorted({d.code for d in diagnostics} | set(CODES))
    index = {code: i for i, code in enumerate(codes)}
    rules = [{"id": c, "shortDescription": {"text": CODES.get(c, c)}} for c in codes]
    level = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
    results = []
    for d in diagnostics:
        text = d.message + (f" ({d.hint})" if d.hint else "")
        result: dict = {
            "ruleId": d.code,
            "ruleIndex": index[d.code],
            "level": level[d.severity],
            "message": {"text": text},
        }
        if d.path:
            result["properties"] = {"keyPath": d.path}
        if d.span is not None:
            region = {"startLine": d.span.line, "startColumn": d.span.col}
            if d.span.end_col:
                region["endLine"] = d.span.end_line or d.span.line
                region["endColumn"] = d.span.end_col
            uri = urllib.parse.quote(d.span.file.replace("\\", "/"))
            result["locations"] = [
                {"physicalLocation": {"artifactLocation": {"uri": uri}, "region": region}}
            ]
        results.append(result)
    log = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": tool,
                        "informationUri": TOOL_URI,
                        "version": version,
                        "rules": rules,
                    }
                },
                "results": results,
            }
        ],
    }
    json.dump(log, out, indent=2, ensure_ascii=False)
    out.write("\n")


Segment = tuple[str, str]  # (text, rich style); a line is a list of segments


_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)] if c != 0x09}
_CONTROL.update({0x0A: "\\n", 0x0D: "\\r"})


def _printable(text: str) -> str:
    """Escape control characters: a config must not be able to drive the reader's terminal."""
    return text.translate(_CONTROL)


_QUOTED = 120
"""The most characters of a source line quoted under a finding (a window around the caret)."""


def _window(line: str, *, col: int, width: int) -> tuple[str, int, int]:
    """The part of ``line`` to quote, the caret's column in it and the caret's width.

    A generated or hostile file can have a line of megabytes; the quote keeps the columns
    around the caret, marked with "..." where it was cut."""
    line = _printable(line.replace("\t", " "))
    if len(line) <= _QUOTED:
        return line, col, width
    start = max(0, min(col - 1 - _QUOTED // 3, len(line) - _QUOTED))
    shown = line[start : start + _QUOTED]
    before = "..." if start else ""
    after = "..." if start + _QUOTED < len(line) else ""
    col = col - start + len(before)
    return before + shown + after, col, max(1, min(width, _QUOTED + 1 - (col - len(before))))


def _text_lines(diagnostics: Sequence[Diagnostic], *, files: int, sources: Mapping[str, str]):
    """The text report as styled lines: location, message, source line, caret and hint."""
    style = {
        Severity.ERROR: "bold red",
        Severity.WARNING: "bold yellow",
        Severity.INFO: "bold blue",
    }
    lines_of = {name: text.splitlines() for name, text in sources.items()}
    for d in diagnostics:
        where = _printable(str(d.span)) if d.span else "<config>"
        tag = f"{d.severity.value}[{d.code}]"
        yield [
            (where, "bold"),
            (": ", ""),
            (tag, style[d.severity]),
            (" " + _printable(d.message), ""),
        ]
        lines = lines_of.get(d.span.file, []) if d.span else []
        if d.span and 0 < d.span.line <= len(lines):
            width = max(1, (d.span.end_col or d.span.col + 1) - d.span.col)
            source, col, width = _window(lines[d.span.line - 1], col=d.span.col, width=width)
            gutter = str(d.span.line)
            pad = " " * len(gutter)
            yield [(f" {pad} |", "blue")]
            yield [(f" {gutter} |", "blue"), (" " + source, "")]
            caret = [
                (f" {pad} |", "blue"),
                (" " * col, ""),
                ("^" * width, style[d.severity]),
            ]
            yield caret + ([(" " + _printable(d.hint), "cyan")] if d.hint else [])
        elif d.hint:
            yield [("  = hint: ", "cyan"), (_printable(d.hint), "")]
        yield []
    s = _summary(diagnostics, files)
    failing = len({d.span.file for d in diagnostics if d.span and d.severity is Severity.ERROR})
    plural = lambda n, word: f"{n} {word}{'s' if n != 1 else ''}"  # noqa: E731
    # A finding may sit in a file that was read but not checked (the project's pyproject.toml):
    # then the files with errors outnumber the files checked, and the count says both.
    share = (
        f"{failing} of {plural(files, 'file')} failing"
        if failing <= files
        else f"errors in {failing} files, {plural(files, 'file')} checked"
    )
    yield [
        (
            f"Found {plural(s['errors'], 'error')} and {plural(s['warnings'], 'warning')} "
            f"({share}).",
            "bold",
        )
    ]


def render_text(
    diagnostics: Sequence[Diagnostic],
    *,
    files: int,
    out: TextIO,
    sources: Mapping[str, str],
    color: bool = False,
    tool: str = TOOL_NAME,
) -> None:
    """Human output: location, message, the source line with a caret under the key, the hint.

    Whether to colour is the caller's decision (``titan.cli.streams.wants_color``).
    """
    if not diagnostics:
        out.write(f"All checks passed: {files} file{'s' if files != 1 else ''}, no problems.\n")
        return
    lines = _text_lines(diagnostics, files=files, sources=sources)
    if not color:
        # Plain output (pipes, CI logs, files) needs no styling engine.
        out.writelines("".join(text for text, _ in line) + "\n" for line in lines)
        return
    from rich.console import Console
    from rich.text import Text

    console = Console(file=out, highlight=False, soft_wrap=True, force_terminal=True)
    for line in lines:
        console.print(Text.assemble(*line))


FORMATS = {"text": render_text, "json": render_json, "github": render_github, "sarif": render_sarif}
"""Every output format, by the name ``--format`` takes."""
