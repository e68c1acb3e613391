"""Reading a TOML file, the one way every command does it (validate, migrate, diff, train).

Three things make a file that is fine to ``cat`` dangerous to ``tomllib.load``, and each becomes
a finding at ``file:line:col`` instead of a hang, an exhausted memory or a traceback:

- not a regular file: opening a FIFO for reading waits for a writer forever, and ``/dev/zero``
  never ends. The file is opened without blocking and only a regular file is read;
- size: a job config is a few kilobytes, so anything over :data:`MAX_BYTES` is refused before it
  is read (and a file that grows while it is read is cut off there);
- nesting: ``tomllib`` parses inline tables and arrays recursively and raises ``RecursionError``
  a few hundred levels down, and every walk over the document after it (spans, schema check,
  migration) recurses too. Documents deeper than :data:`MAX_DEPTH` levels are refused, found by
  a bracket scan before parsing and by an iterative walk after it (dotted keys nest without
  brackets).
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from typing import Any

from titan.schemas.diagnostics import Diagnostic, Severity, Span

MAX_BYTES = 16 * 1024 * 1024
"""The largest file read: 16 MiB, a thousand times the biggest job config."""
MAX_DEPTH = 100
"""The deepest nesting of tables and arrays accepted (real configs use three or four)."""

_CAP = f"{MAX_BYTES // 2**20} MiB"
_REGULAR_ONLY = f"titan reads regular files only (up to {_CAP}): name the TOML file itself"

# What a file is when it is not a regular one, in the user's words.
_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)

_TOML_POSITION = r"\(at line (\d+), column (\d+)\)"  # compiled when a file fails to parse

# Tokens that can hold a bracket which does not nest: strings and comments (skipped as a whole),
# and the brackets themselves.
# Compiled on first use: most files never need it.
_BRACKETS = (
    r'"""(?:[^\\]|\\.)*?"{3,5}'
    r"|'''[\s\S]*?'{3,5}"
    r'|"(?:[^"\\\n]|\\.)*"'
    r"|'[^'\n]*'"
    r"|#[^\n]*"
    r"|[\[{]|[\]}]"
)


class TomlSource:
    """A TOML file as read: its text and document, or the findings that stopped the read."""

    __slots__ = ("text", "document", "problem", "problems")

    text: str | None
    """The decoded text, when the file could be read and decoded."""
    document: dict[str, Any] | None
    """The parsed document, when the text is valid TOML within the limits."""
    problem: Diagnostic | None
    """Why there is no document (unreadable, too large, not UTF-8, not TOML, too deep)."""
    problems: tuple[Diagnostic, ...]
    """Every finding that stops the read, ``problem`` first: a file that does not parse may
    also define several keys twice, and each is reported at its own line."""

    def __init__(
        self,
        *,
        text: str | None = None,
        document: dict[str, Any] | None = None,
        problem: Diagnostic | None = None,
        problems: tuple[Diagnostic, ...] = (),
    ) -> None:
        self.text = text
        self.document = document
        self.problems = problems or ((problem,) if problem is not None else ())
        self.problem = self.problems[0] if self.problems else None


def read_toml(path: str | os.PathLike[str], *, shown: str) -> TomlSource:
    """Read, decode and parse one file; ``shown`` is its name in findings."""
    text, problem = read_text(path, shown=shown)
    return TomlSource(problem=problem) if text is None else parse(text, file=shown)


def read_text(
    path: str | os.PathLike[str], *, shown: str, form: str = "toml"
) -> tuple[str | None, Diagnostic | None]:
    """The file's text, or None and why it could not be read or decoded; ``form`` (``toml`` or
    ``yaml``, a Forge app config) says which kind of file the findings speak of."""
    raw, problem = read_bytes(path, shown=shown)
    return (None, problem) if raw is None else decode(raw, shown=shown, form=form)


def read_bytes(path: str | os.PathLike[str], *, shown: str) -> tuple[bytes | None, Diagnostic]:
    """The file's bytes, or None and why it was not read (never blocks, never reads too much).

    The kind of file is checked before it is opened (opening a device can have effects of its
    own) and again on the open descriptor, in case the name was switched in between.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        refused = _refusal(os.stat(path), shown=shown)
        if refused is not None:
            return None, refused
        fd = os.open(path, flags)
    except OSError as error:
        return None, _cannot_read(error, shown=shown)
    except ValueError as error:  # a NUL character in the name
        return None, _unreadable(
            f"cannot read the file: {error}", shown=shown, hint="name the file without a NUL byte"
        )
    try:
        info = os.fstat(fd)
        refused = _refusal(info, shown=shown)
        if refused is not None:
            return None, refused
        raw = _read_at_most(fd, limit=MAX_BYTES + 1, size=info.st_size)
    except OSError as error:
        return None, _cannot_read(error, shown=shown)
    finally:
        os.close(fd)
    if len(raw) > MAX_BYTES:
        return None, _too_large(shown=shown)
    return raw, None


def _refusal(info: os.stat_result, *, shown: str) -> Diagnostic | None:
    """Why a file with this ``stat`` is not read: not a regular file, or too large."""
    kind = next((name for test, name in _KINDS if test(info.st_mode)), None)
    if kind is not None:
        return _unreadable(
            f"cannot read the file: it is {kind}, not a regular file",
            shown=shown,
            hint=_REGULAR_ONLY,
        )
    if info.st_size > MAX_BYTES:
        return _too_large(shown=shown)
    return None


def _cannot_read(error: OSError, *, shown: str) -> Diagnostic:
    """An ``OSError`` from opening or reading, with what to check."""
    import errno

    hint = {
        errno.ENOENT: "check the path: it is relative to the folder the command runs in",
        errno.EACCES: "give this user read access to the file",
        errno.EPERM: "give this user read access to the file",
        errno.ENOTDIR: "check the path: one of its folders is a file",
        errno.ELOOP: "the path is a loop of symbolic links: name the file itself",
    }.get(error.errno or 0, "check that the file exists and this user can read it")
    return _unreadable(f"cannot read the file: {error.strerror or error}", shown=shown, hint=hint)


def _too_large(*, shown: str) -> Diagnostic:
    return _unreadable(
        f"the file is larger than {_CAP}, the most titan reads",
        shown=shown,
        hint="a job config is a few kilobytes: name the TOML file itself",
    )


def _read_at_most(fd: int, *, limit: int, size: int) -> bytes:
    """Up to ``limit`` bytes; ``size`` (what fstat said) makes a small file a single read."""
    parts, total = [], 0
    chunk = size + 1 if size else 65536
    while total < limit:
        part = os.read(fd, min(chunk, limit - total))
        if not part:
            break
        parts.append(part)
        total += len(part)
        chunk = 1 << 20
    return b"".join(parts)


def decode(raw: bytes, *, shown: str, form: str = "toml") -> tuple[str | None, Diagnostic | None]:
    """The text of a UTF-8 file, or None and a finding at the first byte that is not UTF-8
    (in a Forge app config's words when ``form`` is ``yaml``)."""
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        col = error.start - (raw.rfind(b"\n", 0, error.start) + 1) + 1
        if form == "yaml":
            from titan.schemas import yaml_messages

            return None, _error(
                "yaml-syntax",
                span=Span(file=shown, line=line, col=col),
                message=yaml_messages.not_utf8(raw[error.start]),
                hint=yaml_messages.NOT_UTF8_HINT,
            )
        return None, _error(
            "toml-syntax",
            span=Span(file=shown, line=line, col=col),
            message=f"the file is not valid UTF-8 (byte 0x{raw[error.start]:02x})",
            hint="TOML files must be UTF-8 encoded",
        )


def parse(text: str, *, file: str) -> TomlSource:
    """Parse TOML text; a syntax error or a document nested too deeply becomes the problem."""
    too_deep = _deep_bracket(text, file=file)
    if too_deep is not None:
        return TomlSource(text=text, problem=too_deep)
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        return TomlSource(text=text, problems=syntax_problems(error, text=text, file=file))
    except RecursionError:  # the bracket scan missed a nesting (it is not a full lexer)
        return TomlSource(text=text, problem=_too_deep(Span(file=file, line=1, col=1)))
    except ValueError as error:  # Python's limit on decimal digits, which TOML's ints never need
        return TomlSource(text=text, problem=_too_many_digits(text, file=file, error=error))
    if _depth_exceeds(document, limit=MAX_DEPTH):
        return TomlSource(text=text, problem=_too_deep(_deepest_key_line(text, file=file)))
    return TomlSource(text=text, document=document)


def syntax_problems(
    error: tomllib.TOMLDecodeError, *, text: str, file: str
) -> tuple[Diagnostic, ...]:
    """Every finding of a file tomllib refused, in file order: its error, and each key or table
    the file defines twice (tomllib reports only the first of those)."""
    from titan.schemas import toml_syntax

    first = syntax_diagnostic(error, text=text, file=file)
    twice = toml_syntax.duplicates(text, file=file)
    if twice and toml_syntax.is_duplicate_error(str(error)):
        # The scan names the key itself where tomllib names the column it stopped at.
        on_its_line = any(d.span.line == first.span.line for d in twice)  # type: ignore[union-attr]
        found = twice if on_its_line else [first, *twice]
    else:
        found = [first, *twice]
    return tuple(sorted(found, key=Diagnostic.sort_key))


def syntax_diagnostic(error: tomllib.TOMLDecodeError, *, text: str, file: str) -> Diagnostic:
    """A ``toml-syntax`` finding at the line and column tomllib names, with what to write."""
    from titan.schemas import toml_syntax

    message = str(error)
    match = re.search(_TOML_POSITION, message)
    if match:
        line, col = int(match.group(1)), int(match.group(2))
        message = message[: match.start()].strip()
    else:  # "(at end of document)"
        line = text.count("\n") + 1
        col = len(text) - text.rfind("\n")
        message = re.sub(r"\s*\(at end of document\)", "", message) + " at the end of the file"
    hint = toml_syntax.hint(message, text=text, line=line, col=col)
    message = message[0].lower() + message[1:] if message else "invalid TOML"
    return _error(
        "toml-syntax",
        span=Span(file=file, line=line, col=col),
        message=f"invalid TOML: {message}",
        hint=hint,
    )


def _deep_bracket(text: str, *, file: str) -> Diagnostic | None:
    """A finding at the bracket that opens level ``MAX_DEPTH + 1``, if any does."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return None  # too few brackets to nest that deep: the usual case costs two counts
    depth = 0
    for token in re.finditer(_BRACKETS, text, re.DOTALL):
        kind = token.group()
        if kind in ("[", "{"):
            depth += 1
            if depth > MAX_DEPTH:
                start = token.start()
                line = text.count("\n", 0, start) + 1
                col = start - (text.rfind("\n", 0, start) + 1) + 1
                return _too_deep(Span(file=file, line=line, col=col))
        elif kind in ("]", "}"):
            depth = max(0, depth - 1)
    return None


def _depth_exceeds(document: dict[str, Any], *, limit: int) -> bool:
    """Whether tables and arrays nest more than ``limit`` levels (iteratively: no recursion)."""
    stack: list[tuple[Any, int]] = [(document, 0)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value
        for child in children:
            if isinstance(child, dict | list):
                if depth + 1 > limit:
                    return True
                stack.append((child, depth + 1))
    return False


def _deepest_key_line(text: str, *, file: str) -> Span:
    """Where a document nested by dotted keys or headers gets deepest: the key with most dots."""
    lines = text.splitlines() or [""]
    dots = [line.partition("=")[0].count(".") for line in lines]
    index = max(range(len(lines)), key=dots.__getitem__)
    col = len(lines[index]) - len(lines[index].lstrip()) + 1
    return Span(file=file, line=index + 1, col=col)


def _too_many_digits(text: str, *, file: str, error: ValueError) -> Diagnostic:
    """A decimal integer too long to convert: at the first run of digits over the limit."""
    import sys

    limit = sys.get_int_max_str_digits()
    run = re.search(f"[0-9_]{{{limit + 1},}}", text)
    start = run.start() if run else 0
    line = text.count("\n", 0, start) + 1
    col = start - (text.rfind("\n", 0, start) + 1) + 1
    return _error(
        "toml-syntax",
        span=Span(file=file, line=line, col=col),
        message=f"invalid TOML: an integer with more than {limit} digits (TOML integers are "
        "64-bit)",
        hint="TOML integers are 64-bit: write a float (1e30) or a quoted string",
    )


def _too_deep(span: Span) -> Diagnostic:
    return _error(
        "too-deep",
        span=span,
        message=f"tables and arrays are nested more than {MAX_DEPTH} levels deep",
        hint=f"titan reads TOML nested up to {MAX_DEPTH} levels; flatten the value",
    )


def _unreadable(message: str, *, shown: str, hint: str) -> Diagnostic:
    return _error(
        "unreadable-file", span=Span(file=shown, line=1, col=1), message=message, hint=hint
    )


def _error(code: str, *, span: Span, message: str, hint: str) -> Diagnostic:
    return Diagnostic(
        code=code, severity=Severity.ERROR, path="", message=message, hint=hint, span=span
    )
