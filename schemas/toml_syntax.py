"""What to write instead, when a TOML file does not parse.

``tomllib`` names the first problem and where it stopped ("Invalid value (at line 3, column
8)"). The mistakes people make most in a job config are the ones other formats allow: a key
written the YAML way (``steps: 10``), Python's ``True``, ``False`` and ``None``, an unquoted
string (``name = llama3``), a Windows path in double quotes, a header or string left open, and
a key or table written twice. Each gets a hint with the statement to write instead
(``use `steps = 10` ``) when what the line meant is plain, built and checked to parse to that
by :mod:`titan.schemas.toml_rewrites`; anything else (``1_000_``, ``enable = yes``, a key with a
space) gets a sentence on what TOML expects there, never a rewrite that parses to something
else.

``tomllib`` also stops at the first key or table defined twice, so a file with three would take
three runs to fix. :func:`titan.schemas.spans.duplicate_keys` finds them all in one scan, and each is
reported at its own line with the place of the first definition.

Only a file that failed to parse comes here: a file that parses never pays for any of it.
"""

from __future__ import annotations

import re

from titan.schemas import toml_rewrites as rewrites
from titan.schemas.diagnostics import Diagnostic, Severity, Span
from titan.schemas.spans import Duplicate, duplicate_keys

# tomllib's messages for a key or table defined twice (its first one only).
_TWICE = (
    "Cannot overwrite a value",
    "Cannot declare",
    "Cannot redefine namespace",
    "Cannot mutate immutable namespace",
    "Duplicate inline table key",
)
_ANY_VALUE = (
    'a value is a "string", a number, true or false, a date, an [array] or an {inline table}'
)
_GENERIC = (
    "each line is `key = value`, a `[table]` header, an `[[array.of.tables]]` header or a "
    "`# comment`"
)


def duplicates(text: str, *, file: str) -> list[Diagnostic]:
    """A finding for every key and table ``text`` defines a second time."""
    return [_duplicate(found, file=file) for found in duplicate_keys(text)]


def is_duplicate_error(message: str) -> bool:
    """Whether tomllib's message is about a key or table defined twice."""
    return message.startswith(_TWICE)


def hint(message: str, *, text: str, line: int, col: int) -> str:
    """What to do about tomllib's ``message`` at ``line``:``col`` of ``text``."""
    lines = text.split("\n")
    here = lines[line - 1] if 0 < line <= len(lines) else ""
    if line == 1 and text.startswith("\ufeff"):
        return "remove the byte order mark at the start of the file"
    for start, found in _HINTS:
        if message.startswith(start):
            return found(here, col=col, text=text, line=line) or _GENERIC
    return _GENERIC


# --------------------------------------------------------------------------- one statement


def _missing_equals(here: str, *, col: int, text: str, line: int, **_: object) -> str | None:
    """``steps: 10`` or ``steps 10``: the same pair with ``=``; ``{top_k: 2}``: the inline table
    with ``=``."""
    code = here.split(" #", 1)[0]
    if "=" in code[: col - 1]:  # the line has its `=`: the pair without one is inside the value
        key, _, raw = code.partition("=")
        fixed = rewrites.statement(key.strip(), raw.strip()) if raw.strip()[:1] == "{" else None
        if fixed is not None:
            return f"use `{fixed}`: {rewrites.why('{')}"
        return "inside an inline table each pair is written `key = value`, not `key: value`"
    if code.lstrip().startswith("- "):
        return 'TOML has no `- item` lines: a list is the array of one key, `key = ["a", "b"]`'
    pair = rewrites.split_pair(code)
    if pair is None:
        return "write `key = value`: TOML separates a key from its value with `=`"
    key, raw = pair[0], pair[1].rstrip(",")
    if raw[:1] in (":", "="):  # `steps := 10`
        raw = raw.lstrip(":=").strip()
    if re.match(r"[^\"'{\[]*=", raw):  # `my key = 1`: an `=` that is not inside the value
        return (
            'a bare key has no spaces: write the key in quotes (`"my key" = 1`) or join its '
            "words with `_`"
        )
    if raw in ("[", "{"):  # an array or inline table that goes on below
        following = tuple(text.split("\n")[line:])
        fixed = rewrites.offer(f"{key} = {raw}", following=following)
    else:
        fixed = rewrites.statement(key, raw) if raw else None
    if fixed is None:
        return f"write `{key} = ...`: TOML separates a key from its value with `=`"
    return f"use `{fixed}`: TOML separates a key from its value with `=`, not `:`"


def _invalid_value(here: str, *, col: int, **_: object) -> str | None:
    """A value TOML has no spelling for: Python's literals, an unquoted string, ``.5``."""
    key, eq, rest = here.partition("=")
    if not eq or col <= len(key) + 1:
        raw = here[col - 1 :].split("#", 1)[0].strip().rstrip(",]}").strip()
        # an item of an array or table going on below: `model loss` is one string or two
        fixed = rewrites.value(raw) if " " not in raw else None
        if fixed is None:
            return _token_hint(raw) or _ANY_VALUE
        return f"write `{fixed}` instead of `{raw}`: {rewrites.why(raw)}"
    key, raw = key.strip(), rest.split("#", 1)[0].strip()
    if raw in rewrites.NULLS:
        return (
            f"TOML has no None or null: delete the `{key}` line to keep its default "
            "(the key may be left out)"
        )
    if not raw:
        return f"write a value after `{key} =`, or delete the line to keep the default"
    if raw.startswith("="):  # `steps == 10`
        fixed = rewrites.statement(key, raw.lstrip("=").strip())
        if fixed is not None:
            return f"use `{fixed}`: one `=` separates a key from its value"
    fixed = rewrites.statement(key, raw)
    if fixed is not None:
        return f"use `{fixed}`: {rewrites.why(raw)}"
    at = col - 1 - here.find(raw, len(here) - len(rest))  # tomllib's column, inside the value
    return _token_hint(raw, key=key, at=at) or _ANY_VALUE


def _token_hint(raw: str, *, key: str | None = None, at: int = 0) -> str | None:
    """What TOML expects instead of ``raw`` (or of the word at ``at`` in it, where tomllib
    stopped), when that can be said without a rewrite."""
    if raw.lower() in rewrites.YAML_BOOLEANS:
        name = key or "key"
        return (
            f"TOML's booleans are true and false, and text goes in quotes: `{name} = true`, or "
            f'`{name} = "{raw}"` for the word'
        )
    if rewrites.number_like(raw):
        return rewrites.NOT_A_NUMBER.format(raw=raw)
    if rewrites.arithmetic(raw):
        return rewrites.NO_ARITHMETIC.format(raw=raw)
    word = re.match(r"[\w.~+-]*", raw[max(at, 0) :])
    found = word.group(0) if word else ""
    if found in rewrites.NULLS:
        return "TOML has no None or null: leave the item or key out"
    if found in rewrites.BOOLEANS:
        return f"TOML's booleans are lowercase: write `{rewrites.BOOLEANS[found]}`"
    return None


def _header(here: str, **_: object) -> str | None:
    """``[training`` or ``[[training]``: the header with its brackets closed."""
    stripped = here.split("#", 1)[0].strip()
    array = stripped.startswith("[[")
    name = stripped.lstrip("[").rstrip("]").strip()
    if not name or "=" in name:
        return "a header is `[table]` alone on its line; write `key = value` under it"
    bare = re.sub(r"\"[^\"]*\"|'[^']*'", "q", name)  # a space inside quotes is allowed
    if re.search(r"\w\s+\w", bare):  # `[a b]`: not a missing bracket
        return (
            "a table's name is bare words joined by `.` (`[a.b]`); a name with a space in it "
            'goes in quotes (`["a b"]`)'
        )
    fixed = rewrites.offer(f"[[{name}]]" if array else f"[{name}]")
    if fixed is None:
        return f"close the header with `{']]' if array else ']'}`"
    return f"use `{fixed}`: the header's closing bracket is missing"


def _unclosed_array(here: str, *, text: str, line: int, **_: object) -> str | None:
    """An array with no ``]``: name the key whose array it is, and where it opened."""
    lines = text.split("\n")
    for number in range(min(line, len(lines)), 0, -1):
        key, eq, value = lines[number - 1].partition("=")
        if eq and value.strip().startswith("["):
            if number == line and value.split("#", 1)[0].rstrip().endswith("]"):
                # closed on its line: tomllib stopped at an item with no `,` after it
                return "separate the items of an array with `,`, each item a value: `[1, 2]`"
            return (
                f"close the array of `{key.strip()}` (opened at line {number}) with `]` after "
                "its last element"
            )
    return "close the array with `]` after its last element"


def _unclosed_table(here: str, *, col: int, **_: object) -> str:
    """An inline table tomllib found no ``}`` for: a comma missing between two pairs when the
    line closes it, else a table left open or spread over lines."""
    if "}" in here[col - 1 :].split("#", 1)[0]:  # closed on its line: a `,` is missing
        return "separate the pairs of an inline table with `,`: `{a = 1, b = 2}`"
    return (
        "close the inline table with `}` on the line it starts: an inline table is written on "
        "one line, with no comma after its last pair"
    )


def _unclosed_string(
    here: str, *, col: int = 0, text: str = "", line: int = 0, **_: object
) -> str | None:
    """A string whose closing quote is missing (tomllib stops at the end of its line, or for a
    'literal' string at the end of the file: then the line is the last one with an open quote)."""
    if "'" not in here and '"' not in here:
        lines = text.split("\n")[: max(line - 1, 0)]
        here = next((ln for ln in reversed(lines) if _open_quote(ln)), here)
    key, eq, value = here.partition("=")
    value = value.strip()
    # With a `#` in it, the quote may belong before the comment or after it: no rewrite.
    if eq and value[:1] in ("'", '"') and value.count(value[0]) % 2 == 1 and "#" not in value:
        other = "'" if value[0] == '"' else '"'
        # `"abc'`: closed with the other quote, which belongs to neither string
        closed = value[:-1] + value[0] if value.endswith(other) else value + value[0]
        fixed = rewrites.offer(f"{key.strip()} = {closed}")
        if fixed is not None:
            return f"use `{fixed}`: the string's closing quote is missing"
    if eq and value[:1] == '"':
        return 'close the string with `"` on the same line (or escape a quote inside it as \\")'
    return "close the string with the quote it starts with, on the same line"


def _open_quote(line: str) -> bool:
    value = line.partition("=")[2].strip()
    return value[:1] in ("'", '"') and value.count(value[0]) % 2 == 1


def _illegal_character(here: str, *, col: int, **kwargs: object) -> str | None:
    if col > len(here):  # the end of the line: a string still open there
        return _unclosed_string(here, col=col, **kwargs)  # type: ignore[arg-type]
    return "control characters are not allowed in a string: write them escaped (\\t, \\u0001)"


def _backslash(here: str, **_: object) -> str | None:
    """``"C:\\out"``: a Windows path in a basic string, where ``\\`` starts an escape."""
    key, eq, value = here.partition("=")
    value = value.split(" #", 1)[0].strip()
    if eq and value.startswith('"') and value.endswith('"') and "'" not in value:
        fixed = rewrites.offer(f"{key.strip()} = '{value[1:-1]}'")
        if fixed is not None:
            return f"use `{fixed}`: in single quotes a backslash is just a backslash"
    return "write the backslash doubled (`\\\\`), or use a 'single-quoted' string"


def _after_value(here: str, **_: object) -> str | None:
    """Something after a complete value: ``1,000``, ``5.``, a quote inside a string."""
    key, eq, value = here.partition("=")
    key, raw = key.strip(), value.split(" #", 1)[0].strip()
    if not eq:
        return _GENERIC_AFTER
    if key.startswith("["):  # `[training] steps = 10`
        return "a `[table]` header is alone on its line: write its `key = value` pairs below it"
    if re.fullmatch(r"[+-]?\d{1,3}(,\d{3})+", raw):
        fixed = rewrites.offer(f"{key} = {raw.replace(',', '_')}")
        if fixed is not None:
            return f"use `{fixed}`: TOML groups digits with `_`"
    if re.fullmatch(r"[+-]?\d+\.", raw):
        fixed = rewrites.offer(f"{key} = {raw}0")
        if fixed is not None:
            return f"use `{fixed}`: a float needs a digit after the point"
    plain = None if raw.isascii() else rewrites.ascii_number(raw)
    if plain is not None and rewrites.offer(f"{key} = {plain}") is not None:  # `1０`
        return f"use `{key} = {plain}`: {rewrites.why(raw)}"
    if raw.startswith('"') and raw.count('"') > 2:
        return "escape a quote inside a string as \\\", or use a 'single-quoted' string"
    if rewrites.DATE_LIKE.fullmatch(raw):
        return _date(here)
    if rewrites.number_like(raw) or rewrites.arithmetic(raw):
        return _token_hint(raw, key=key)
    if re.fullmatch(r"[\w.+/-]+", raw):  # `flavor = 405B`: a number, then letters
        fixed = rewrites.statement(key, raw)
        if fixed is not None:
            return f"use `{fixed}`: a string needs quotes"
    return _GENERIC_AFTER


_GENERIC_AFTER = "one `key = value` per line: anything after the value must be a `# comment`"


def _multiline_string(here: str, *, text: str = "", line: int = 0, **_: object) -> str:
    """A string still open at the end of the file: a multi-line one, or a one-line string
    whose closing quote is missing."""
    lines = text.split("\n")[:line] or [here]
    opened = next((ln for ln in reversed(lines) if '"' in ln or "'" in ln), here)
    if '"""' not in opened and "'''" not in opened:
        found = _unclosed_string(opened, text=text, line=line)
        if found is not None:
            return found
    return "close the multi-line string with the three quotes it starts with (\"\"\" or ''')"


def _date(here: str, **_: object) -> str:
    return (
        "write a date as 2024-05-27 or 2024-05-27T07:32:00Z, or put the value in quotes to "
        "keep it a string"
    )


def _key_part(here: str, **_: object) -> str:
    if "{" in here:
        return (
            "an inline table is one line with no comma after its last pair: `key = {a = 1, b = 2}`"
        )
    return 'a key is a bare word (letters, digits, `_`, `-`) or a "quoted string"'


def _twice(here: str, **_: object) -> str:
    return "a key or table may be defined once: delete or rename the second one"


_HINTS = (
    ("Expected '=' after a key", _missing_equals),
    ("Invalid value", _invalid_value),
    ("Expected ']' at the end of a table", _header),
    ("Expected ']]' at the end of an array", _header),
    ("Unclosed array", _unclosed_array),
    ("Unclosed inline table", _unclosed_table),
    ("Illegal character", _illegal_character),
    ('Expected "\'"', _unclosed_string),
    ("Unterminated string", _multiline_string),
    ("Unescaped '\\' in a string", _backslash),
    ("Invalid hex value", _backslash),
    ("Expected newline or end of document", _after_value),
    ("Invalid date or datetime", _date),
    ("Invalid initial character for a key part", _key_part),
    *((start, _twice) for start in _TWICE),
)


# --------------------------------------------------------------------------- duplicates


def _duplicate(found: Duplicate, *, file: str) -> Diagnostic:
    dotted = ".".join(str(part) for part in found.path)
    first = f"{file}:{found.first.line}:{found.first.col}"
    kinds = {found.kind, found.first_kind}
    if kinds == {"header", "array"}:
        message = f"[{dotted}] is declared both as a table and as an array of tables [[{dotted}]]"
        hint = (
            f"write `[{dotted}]` once, with one pair of brackets, and put the keys of both under "
            f"it (the other declaration is at {first}): `[[...]]` starts an array of tables"
        )
    elif found.kind == "header" and found.first_kind == "header":
        message = f"table [{dotted}] is declared twice"
        hint = f"move its keys under the first [{dotted}] at {first} and delete this header"
    elif found.kind == "value" and found.first_kind == "value":
        message = f"`{dotted}` is set twice"
        hint = f"`{dotted}` is first set at {first}: delete the line you do not mean"
    else:
        message = f"`{dotted}` is defined twice"
        hint = (
            f"`{dotted}` is first defined at {first}: write each table either as a [header] or "
            "with dotted keys, and each key once"
        )
    return Diagnostic(
        code="toml-syntax",
        severity=Severity.ERROR,
        path=dotted,
        message=f"invalid TOML: {message}",
        hint=hint,
        span=Span(file=file, line=found.at.line, col=found.at.col, end_col=found.at.end_col),
    )
