"""The statements a TOML syntax hint offers in place of a line that does not parse.

A rewrite is offered only when it parses (tomllib) to what the line meant: a pair written the
YAML way (``steps: 10`` is ``steps = 10``, ``{top_k: 2}`` is ``{top_k = 2}``), Python's
literals (``True``, ``(1, 2)``), a bare word that is text (``name = llama3``), a float with no
digit on one side (``.5``). Where the meaning is not plain there is no rewrite, only what TOML
expects: a malformed number (``1_000_``, ``1e``) in quotes would be a string where a number was
meant, ``yes`` is YAML's true or a word, ``[a b]`` one string or two, ``my key = 1`` a key with
a space or two words run together.
"""

from __future__ import annotations

import json
import re
import tomllib
import unicodedata

NULLS = frozenset({"None", "none", "null", "Null", "NULL", "nil", "~"})
BOOLEANS = {"True": "true", "False": "false", "TRUE": "true", "FALSE": "false"}
YAML_BOOLEANS = frozenset({"yes", "no", "on", "off", "y", "n"})
"""Words YAML 1.1 reads as booleans: in a TOML value they may be meant as true or as text."""

# `1_000_`, `1e`, `1e-4.`, `01`, `0x`: a number with a slip. In quotes it would parse, to a string.
_NUMBER_LIKE = re.compile(r"[+-]?\.?\d[\d_.]*(?:[eE][+-]?[\d_.]*)?|[+-]?0[xXoObB][\dA-Fa-f_]*")
_VERSION = re.compile(r"v?\d+(?:\.\d+){2,}")  # `0.2.2`: text, not a number
DATE_LIKE = re.compile(r"\d{4}-\d{1,2}-\d{1,2}(?:[T ].*)?")
_ARITHMETIC = re.compile(r"[\d.eE_]+(?:\s*[-+*/]\s*[\d.eE_]+)+")
# A bare word starts like a name, a path or a variable; `> 10`, `= 10`, `(1` are not text.
_TEXT_START = re.compile(r"[\w./~$%@\\]")

NOT_A_NUMBER = (
    "`{raw}` is not a TOML number (they look like 10, 1_000, 0.5, 1e-4 or 0x1F): correct the "
    "number, or put text in quotes"
)
NO_ARITHMETIC = "TOML has no arithmetic: write the number `{raw}` comes to"


def offer(statement: str, *, following: tuple[str, ...] = ()) -> str | None:
    """``statement`` if it parses, alone or (for one that opens a multi-line array or table)
    with the lines ``following`` it that close it; else ``None``."""
    for count in range(min(len(following), 200) + 1):
        try:
            tomllib.loads("\n".join((statement, *following[:count])))
        except tomllib.TOMLDecodeError:
            if not following:
                return None
            continue
        return statement
    return None


def statement(key: str, raw: str) -> str | None:
    """``key = value`` with the value respelt as TOML, when what it means is plain and the
    statement parses."""
    if raw in NULLS:
        return None
    if raw[:1] + raw[-1:] in ("[]", "()"):  # an array, or a Python tuple meant as one
        items = [item.strip() for item in raw[1:-1].split(",") if item.strip()]
        # `[a b]` is one string or two: no item with a space is respelt
        spelt = [value(item) if " " not in item else None for item in items]
        if any(item is None for item in spelt):
            return None
        respelt = "[" + ", ".join(spelt) + "]"  # type: ignore[arg-type]
    elif raw.startswith("{"):
        respelt = inline_table(raw)
    else:
        respelt = value(raw)
    if respelt is None:
        return None
    return offer(f"{key} = {respelt}")


def value(raw: str) -> str | None:
    """One value as TOML spells it: booleans lowercased, ``.5`` as ``0.5``, a bare word of text
    quoted; ``None`` when what it means is not plain."""
    if raw in BOOLEANS:
        return BOOLEANS[raw]
    if raw in NULLS:
        return None
    if re.fullmatch(r"[+-]?\.\d+", raw):
        return raw.replace(".", "0.", 1)
    if re.fullmatch(r"[+-]?\d+\.", raw):
        return raw + "0"
    plain = None if raw.isascii() else ascii_number(raw)
    if plain is not None:
        return plain
    try:
        tomllib.loads(f"v = {raw}")
    except tomllib.TOMLDecodeError:
        pass
    else:
        return raw  # already a TOML value
    if not is_text(raw):
        return None
    return json.dumps(raw, ensure_ascii=False)


def is_text(raw: str) -> bool:
    """Whether a bare ``raw`` is plainly text, which quotes make a string: not a malformed
    number or date, nor a word YAML reads as a boolean, nor punctuation."""
    return bool(
        raw
        and _TEXT_START.match(raw)
        and not number_like(raw)
        and not DATE_LIKE.fullmatch(raw)
        and not _ARITHMETIC.fullmatch(raw)
        and raw.lower() not in YAML_BOOLEANS
    )


def number_like(raw: str) -> bool:
    """Whether ``raw`` is a number with a slip in it (``1_000_``, ``1e``), not text."""
    if not _NUMBER_LIKE.fullmatch(raw) or _VERSION.fullmatch(raw):
        return False
    return offer(f"v = {raw}") is None


def arithmetic(raw: str) -> bool:
    """Whether ``raw`` is a sum or product of numbers (``2*1024``), which TOML cannot compute."""
    return bool(_ARITHMETIC.fullmatch(raw))


def inline_table(raw: str) -> str | None:
    """``{a: 1, "b": 2}`` with each ``:`` between a key and its value made ``=`` (a colon inside
    a string is kept); ``None`` for anything else."""
    if not (raw.startswith("{") and raw.endswith("}")):
        return None
    out, quote = [], ""
    for char in raw:
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char == ":":
            out.append(" =")
            continue
        out.append(char)
    return "".join(out)


def ascii_number(raw: str) -> str | None:
    """``raw``, a number written with full-width or other non-ASCII digits or signs (``１０``,
    ``８e－4``), in ASCII, when that is a TOML number; else ``None``."""
    plain = unicodedata.normalize("NFKC", raw).replace("\u2212", "-")  # NFKC keeps the minus sign
    plain = "".join(str(unicodedata.decimal(c)) if c.isdecimal() else c for c in plain)
    if not plain.isascii() or not re.fullmatch(r"[+-]?[\d_.eE+-]+|[+-]?0[xob][\dA-Fa-f_]+", plain):
        return None
    try:
        parsed = tomllib.loads(f"v = {plain}")["v"]
    except tomllib.TOMLDecodeError:
        return None
    return plain if isinstance(parsed, int | float) else None


def why(raw: str) -> str:
    """What was wrong with a value :func:`statement` respelt."""
    items = [item.strip() for item in raw.strip("[](){}").split(",")]
    if any(not item.isascii() and ascii_number(item) for item in items):
        return "a TOML number is written in ASCII digits"
    if raw.startswith("{"):
        return "inside an inline table too, a key and its value are separated by `=`"
    if any(item.strip() in BOOLEANS for item in raw.strip("[]()").split(",")):
        return "TOML's booleans are lowercase"
    if raw.startswith("("):
        return "a TOML array is written in square brackets"
    if re.fullmatch(r"[+-]?(\.\d+|\d+\.)", raw):
        return "a float needs a digit on both sides of the point"
    return "a string needs quotes"


_PAIR = re.compile(
    r"""^\s*((?:"[^"]*"|'[^']*'|[A-Za-z0-9_\-]+)(?:\s*\.\s*(?:"[^"]*"|'[^']*'|[A-Za-z0-9_\-]+))*)"""
    r"""\s*(?::\s*|\s+)(\S.*?)\s*$"""
)


def split_pair(code: str) -> tuple[str, str] | None:
    """``(key, value)`` of a pair written with ``:`` or a space instead of ``=`` (``steps: 10``,
    ``"my key": 1``, ``a.b 2``), or ``None``."""
    match = _PAIR.match(code)
    return (match.group(1), match.group(2)) if match else None
