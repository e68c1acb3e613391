"""Legacy command-line overrides (``--training.steps 5``), read as v0.2.2's tyro CLI read them.

torchtitan up to v0.2.2 applied command-line flags on top of the TOML (CLI > TOML > defaults).
``titan-migrate x.toml -- FLAGS`` and ``titan-train --job.config_file x.toml FLAGS`` apply the same
flags to the legacy document before migrating it. This module reads them against the (merged)
legacy schema without tyro, and reports every problem of a command line at once as diagnostics on
the pseudo file ``<command line>`` (column = 1-based position in ``" ".join(argv)``).

The legacy rules (tyro 1.0 plus torchtitan's one ``list[str]`` rule; ``reference/
manager_behaviour.md`` sections 2 and 5, confirmed against tyro 1.0.16):

- A flag names one leaf key: ``--section.key VALUE`` or ``--section.key=VALUE``; nested sections
  spell the whole path (``--quantize.linear.float8.filter_fqns``). ``-`` and ``_`` are the same in
  flag names (``--training.local-batch-size``). A section is not a flag.
- ``bool`` keys are switches: ``--checkpoint.enable`` is True, ``--checkpoint.no-enable`` (or
  ``no_enable``) is False; a value (``--checkpoint.enable True``) is an error.
- ``int`` and ``float`` are read with Python's ``int()`` / ``float()`` (``1_000``, ``1e-3``,
  ``inf``); a ``float`` key given ``1`` holds ``1.0``.
- A union is tried ``None`` first, then left to right; the first member that reads the tokens
  wins: ``X | None`` takes the literal ``None``, and ``float | int`` turns ``2`` into ``2.0``
  (unlike TOML, where ``max_norm = 2`` stays an int).
- ``Literal[...]`` takes one of its values, spelt ``str(value)``.
- ``list[str]`` (also in ``list[str] | str``) takes ONE token split on ``","`` without stripping:
  ``"a, b"`` is ``["a", " b"]`` and ``""`` is ``[""]``. Any other ``list[X]`` takes every token up
  to the next flag, each read as ``X``: ``list[list[str]]`` gets one comma-split list per token,
  and no token at all gives ``[]``.
- A value that looks like a flag (``-x``; negative numbers and ``-inf`` are values) is not taken:
  attach it with ``=`` (``--job.description=-x``). ``--`` ends the flags; anything after it is an
  error. The last flag for a key wins, and a list replaces the TOML's list.
- Other annotations (``Any``, classes a static read could not resolve) keep the token as a string.

Findings (all errors, as tyro exited on each): ``unknown-key`` / ``moved-key`` for a flag the
schema lacks (did-you-mean written as flags), ``wrong-type``, ``invalid-choice``, and
``cli-syntax`` for a flag without its value, a token no flag takes, or a value given to a switch.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Sequence
from typing import Any, Literal, Union

from titan.schemas.diagnostics import Diagnostic, Severity, Span
from titan.schemas.spec import FieldSpec, SectionSpec

COMMAND_LINE = "<command line>"
"""The pseudo file name of findings about a command-line flag (``Span.file``)."""

_CUSTOM_MODULE_FLAGS = ("--job.custom_config_module", "--job.custom-config-module")


class Overrides:
    """The typed result of reading a command line of legacy overrides."""

    __slots__ = ("values", "diagnostics", "spans", "source")

    values: dict[str, Any]
    """Dotted legacy key -> typed value, ordered by each key's last flag (the last flag wins; a
    flag with a bad value leaves the key as an earlier flag set it)."""
    diagnostics: list[Diagnostic]
    """Every problem found, in command-line order; empty when the whole command line is valid."""
    spans: dict[str, Span]
    """Dotted key -> where its (last) flag stands, to point later findings at the command line."""
    source: str
    """The command line as the spans count it (``" ".join(argv)``), for renderers' excerpts."""

    def __init__(self, *, source: str) -> None:
        self.values = {}
        self.diagnostics = []
        self.spans = {}
        self.source = source

    def __repr__(self) -> str:
        return f"Overrides(values={self.values!r}, diagnostics={self.diagnostics!r})"


class _Target:
    """What a flag name resolves to."""

    __slots__ = ("path", "field", "negated")

    def __init__(self, path: str, field: FieldSpec | None, negated: bool) -> None:
        self.path = path  # dotted key with underscores, as in the schema and the TOML
        self.field = field  # None when the path is a section
        self.negated = negated  # the ``no-`` form of a bool switch


class _Unreadable(Exception):
    """Tokens that an annotation cannot read."""


def custom_module_flag(argv: Sequence[str]) -> str | None:
    """The module named by ``--job.custom_config_module`` on the command line, if any.

    As v0.2.2's ``_maybe_add_custom_config``: only the two exact spellings, ``=`` or space form,
    the first one wins (tyro keeps the last as the key's value, but the first is imported), and
    ``None`` when it is missing or empty so that the TOML's ``[job] custom_config_module`` applies.
    """
    for index, token in enumerate(argv):
        name, eq, attached = token.partition("=")
        if name in _CUSTOM_MODULE_FLAGS:
            value = attached if eq else (argv[index + 1] if index + 1 < len(argv) else "")
            return value or None
    return None


def apply_overrides(document: dict, values: dict[str, Any]) -> dict:
    """A copy of the legacy ``document`` with each dotted key of ``values`` set.

    Missing tables are created, and a non-table standing where a table is needed is replaced (the
    flag wins). Neither argument is mutated and the result shares no dict or list with them."""
    result = _copy(document)
    for dotted, value in values.items():
        *sections, key = dotted.split(".")
        table = result
        for name in sections:
            if not isinstance(table.get(name), dict):
                table[name] = {}
            table = table[name]
        table[key] = _copy(value)
    return result


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item) for item in value]
    return value


def parse_overrides(argv: Sequence[str], schema: SectionSpec) -> Overrides:
    """Read ``--section.key VALUE`` flags against ``schema`` (``LEGACY_SPEC`` or a merged one)."""
    return _Reader(list(argv), schema).read()


class _Reader:
    """One pass over a command line; every finding goes to ``result.diagnostics``."""

    def __init__(self, argv: list[str], schema: SectionSpec) -> None:
        self.argv = argv
        self.flags = _flag_index(schema)
        self.schema = schema
        self.starts: list[int] = []
        position = 0
        for token in argv:
            self.starts.append(position)
            position += len(token) + 1
        self.result = Overrides(source=" ".join(argv))

    def read(self) -> Overrides:
        index, previous = 0, None
        while index < len(self.argv):
            token = self.argv[index]
            if token == "--":
                if index + 1 < len(self.argv):
                    self._after_double_dash(index)
                break
            if _is_flag(token):
                index, previous = self._flag(index)
                continue
            end = index
            while end < len(self.argv) and not _is_flag(self.argv[end]) and self.argv[end] != "--":
                end += 1
            self._stray(index, end, previous)
            index, previous = end, None
        return self.result

    # -- one flag ---------------------------------------------------------------------------

    def _flag(self, index: int) -> tuple[int, _Target | None]:
        """Read the flag at ``index``; returns the next index and the target for stray hints."""
        name, eq, attached = self.argv[index].partition("=")
        bare = name.lstrip("-")
        target = self.flags.get(_normal(bare))
        if target is None or name != "--" + bare:
            self._unknown(index, name, bare, target)
            return self._skip_values(index + 1), None
        if target.field is None:
            self._section(index, name, target)
            return self._skip_values(index + 1), None
        annotation = target.field.annotation
        if annotation is bool:
            return self._switch(index, name, target, attached if eq else None), None
        choices = _choices(annotation)
        tokens = [attached] if eq else []
        end = index + 1
        if _nargs(annotation) == 1:
            if not eq:
                if end == len(self.argv) or _blocks(self.argv[end], choices):
                    return self._missing(index, name, target), None
                tokens.append(self.argv[end])
                end += 1
        else:
            while end < len(self.argv) and not _blocks(self.argv[end], choices):
                tokens.append(self.argv[end])
                end += 1
        try:
            value = _read(annotation, tokens)
        except _Unreadable:
            self._bad_value(index, end, name, target, tokens)
        else:
            self._set(target.path, value, index, end)
        return end, target

    def _switch(self, index: int, name: str, target: _Target, attached: str | None):
        """A bool switch: no value allowed, neither attached nor as the next token."""
        end = index + 1
        given = attached
        if given is None and end < len(self.argv) and not _blocks(self.argv[end], None):
            given = self.argv[end]
            end += 1
        if given is None:
            self._set(target.path, not target.negated, index, end)
            return end
        on, off = f"--{target.path}", _negative_flag(target.path)
        if given.strip().lower() in ("false", "0", "no", "off"):
            hint = f"to turn it off write `{off}`"
        elif given.strip().lower() in ("true", "1", "yes", "on"):
            hint = f"to turn it on write `{on}` alone"
        else:
            hint = f"write `{on}` to turn it on or `{off}` to turn it off"
        self._add(
            "cli-syntax",
            target.path,
            f"`{name}` is a switch and takes no value, got {_quote(given)}",
            hint,
            self._span(index, end),
        )
        return end

    def _set(self, path: str, value: Any, index: int, end: int) -> None:
        self.result.values.pop(path, None)  # re-insert: keys are ordered by their last flag
        self.result.values[path] = value
        self.result.spans[path] = self._span(index, end)

    def _skip_values(self, index: int) -> int:
        """After an unknown flag its values are unknown too: skip them without more findings."""
        while index < len(self.argv) and not _blocks(self.argv[index], None):
            index += 1
        return index

    # -- findings ---------------------------------------------------------------------------

    def _unknown(self, index: int, name: str, bare: str, target: _Target | None) -> None:
        """A flag the schema does not have, or a known one with the wrong number of dashes."""
        span = self._span(index, index + 1, name_only=True)
        if target is not None:  # `-training.steps`, `---training.steps`
            hint = f"did you mean `--{bare}`?"
            self._add("unknown-key", target.path, f"`{name}` is not a flag", hint, span)
            return
        path = bare.replace("-", "_")
        parts = tuple(path.split("."))
        code, hint = "unknown-key", None
        if all(parts):
            from titan.schemas.spec import schema_paths  # only for a bad flag
            from titan.schemas.suggest import suggest

            paths = schema_paths(self.schema)
            found = suggest(parts, paths, is_table=False)
            code = found.code
            hint = (code == "unknown-key" and _extension_hint(path)) or _as_flags(found.hint, paths)
        kind = "not a v0.2.2 flag" if code == "moved-key" else "an unknown flag"
        hint = hint or "write each override as `--section.key VALUE`"
        self._add(code, path, f"`{name}` is {kind}", hint, span)

    def _section(self, index: int, name: str, target: _Target) -> None:
        section = target.path
        keys = [f"`--{path}`" for path in _leaves_below(self.flags, section)]
        shown = ", ".join(keys[:3]) + (", ..." if len(keys) > 3 else "")
        self._add(
            "unknown-key",
            section,
            f"`{name}` is a section, not a flag",
            f"set one key at a time: {shown}" if keys else f"`{name}` has no keys to set",
            self._span(index, index + 1, name_only=True),
        )

    def _missing(self, index: int, name: str, target: _Target) -> int:
        """A value-taking flag at the end, or followed by another flag; returns the next index."""
        end = index + 1
        hint = f"write `{name} VALUE` or `{name}=VALUE`"
        following = self.argv[end] if end < len(self.argv) else None
        if following is not None and not following.startswith("--") and following != "-":
            # `--job.description -x`: a dash value must be attached; it is this flag's value.
            hint = f"a value that starts with `-` must be attached with `=`: `{name}={following}`"
            end += 1
        self._add(
            "cli-syntax",
            target.path,
            f"`{name}` needs a value ({_describe(target.field.annotation)})",
            hint,
            self._span(index, end, name_only=end == index + 1),
        )
        return end

    def _bad_value(
        self, index: int, end: int, name: str, target: _Target, tokens: list[str]
    ) -> None:
        annotation = target.field.annotation
        choices = _choices(annotation)
        bad = _first_unreadable(annotation, tokens)
        span = self._span(index, end)
        if choices is not None:
            import difflib  # only for a bad choice

            close = difflib.get_close_matches(bad, choices, n=1, cutoff=0.6)
            self._add(
                "invalid-choice",
                target.path,
                f"`{name}` got {_quote(bad)}; expected one of "
                + ", ".join(f'"{choice}"' for choice in choices),
                f'did you mean "{close[0]}"?'
                if close
                else f"write one of the choices, e.g. `{name} {choices[0]}`",
                span,
            )
            return
        self._add(
            "wrong-type",
            target.path,
            f"`{name}` must be {_describe(annotation)}, got {_quote(bad)}",
            _type_hint(annotation, bad) or f"write {_describe(annotation)}: `{name} VALUE`",
            span,
        )

    def _stray(self, index: int, end: int, previous: _Target | None) -> None:
        """Tokens ``argv[index:end]`` that no flag takes."""
        words = " ".join(self.argv[index:end])
        if previous is None:
            self._add(
                "cli-syntax",
                "",
                f"`{words}` is not a flag",
                "write each override as `--section.key VALUE`",
                self._span(index, end),
            )
            return
        flag, before = f"--{previous.path}", self.argv[index - 1]
        value = before.partition("=")[2] if before.startswith("--") else before
        hint = f"`{flag}` takes one value"
        if _is_str_list(previous.field.annotation):
            joined = ",".join([value, *self.argv[index:end]])
            hint = f"`{flag}` takes one comma-separated value: `{flag} {joined}`"
        self._add(
            "cli-syntax",
            previous.path,
            f"unexpected `{words}` after the value of `{flag}`",
            hint,
            self._span(index, end),
        )

    def _after_double_dash(self, index: int) -> None:
        words = " ".join(self.argv[index + 1 :])
        self._add(
            "cli-syntax",
            "",
            f"`--` ends the flags, so `{words}` after it is not read",
            "remove the `--`",
            self._span(index, len(self.argv)),
        )

    def _add(self, code: str, path: str, message: str, hint: str | None, span: Span) -> None:
        self.result.diagnostics.append(
            Diagnostic(
                code=code, severity=Severity.ERROR, path=path, message=message, hint=hint, span=span
            )
        )

    def _span(self, index: int, end: int, *, name_only: bool = False) -> Span:
        """From the token at ``index`` to the end of token ``end - 1`` (or of the flag's name)."""
        col = self.starts[index] + 1
        if name_only:
            stop = col + len(self.argv[index].partition("=")[0])
        else:
            stop = self.starts[end - 1] + len(self.argv[end - 1]) + 1
        return Span(file=COMMAND_LINE, line=1, col=col, end_col=stop)


# -- flag names ---------------------------------------------------------------------------------


def _normal(name: str) -> str:
    """A flag name as tyro compares them: ``_`` and ``-`` are the same."""
    return name.replace("_", "-")


def _flag_index(schema: SectionSpec) -> dict[str, _Target]:
    """Every flag the schema accepts (normalized name -> target), sections included."""
    index: dict[str, _Target] = {}
    negatives: dict[str, _Target] = {}

    def walk(section: SectionSpec, prefix: str) -> None:
        for field in section.fields:
            path = prefix + field.name
            if isinstance(field.annotation, SectionSpec):
                index[_normal(path)] = _Target(path, None, False)
                walk(field.annotation, path + ".")
                continue
            index[_normal(path)] = _Target(path, field, False)
            if field.annotation is bool:
                negatives[_normal(prefix + "no_" + field.name)] = _Target(path, field, True)

    walk(schema, "")
    return {**negatives, **index}  # a real field named `no_x` wins over the switch's negation


def _leaves_below(flags: dict[str, _Target], section: str) -> list[str]:
    """The dotted leaf keys inside ``section`` (nested sections too), in schema order."""
    return [
        target.path
        for target in flags.values()
        if target.field is not None and not target.negated and target.path.startswith(section + ".")
    ]


def _negative_flag(path: str) -> str:
    section, _, name = path.rpartition(".")
    return f"--{section}.no_{name}" if section else f"--no_{name}"


def _as_flags(hint: str | None, paths: dict[str, bool]) -> str | None:
    """A did-you-mean written for TOML keys, with each schema key written as a flag."""
    if hint is None:
        return None
    import re  # only for a bad flag

    return re.sub(
        r"`([\w.]+)`",
        lambda m: f"`--{m.group(1)}`" if paths.get(m.group(1)) is False else m.group(0),
        hint,
    )


def _extension_hint(path: str) -> str | None:
    """For a key that a built-in custom config module adds: the flag that loads the module."""
    from titan.schemas.builtin_extensions import KNOWN_EXTENSIONS, known_extension
    from titan.schemas.spec import schema_paths

    for module, short in KNOWN_EXTENSIONS.items():
        spec = known_extension(short)
        if spec is not None and path in schema_paths(spec.root):
            return (
                f"`--{path}` is added by the {short} extension: pass "
                f"`--job.custom_config_module {module}` or set `[job] custom_config_module`"
            )
    return None


def _is_negative_number(token: str) -> bool:
    """``-5``, ``-.5``, ``-1e-3``, ``-inf``: values even though they start with ``-``."""
    if not (token.startswith("-") and len(token) > 1 and token[1] != "-"):
        return False
    rest = token[1:]
    return rest[0].isdigit() or rest[0] == "." or rest.lower() in ("inf", "infinity", "nan")


def _is_flag(token: str) -> bool:
    """Whether a token where a flag may stand is read as one (else it is a stray value)."""
    return (
        token.startswith("-") and token != "-" and token != "--" and not _is_negative_number(token)
    )


def _blocks(token: str, choices: tuple[str, ...] | None) -> bool:
    """Whether ``token`` ends a flag's values (tyro's rule: ``--`` or ``-`` then a letter)."""
    if choices is not None and token in choices:
        return False
    if token == "--":
        return True
    key = token.partition("=")[0]
    if _is_negative_number(key):
        return False
    return key.startswith("-") and key.lstrip("-")[:1].isalpha()


# -- reading values -----------------------------------------------------------------------------


def _union_args(annotation: Any) -> tuple | None:
    """The members of a union annotation, else ``None``."""
    origin = typing.get_origin(annotation)
    if origin is Union or origin is types.UnionType:
        return typing.get_args(annotation)
    return None


def _is_str_list(annotation: Any) -> bool:
    """``list[str]``, torchtitan's one-token comma-separated list (also inside a union)."""
    members = _union_args(annotation)
    if members is not None:
        return any(_is_str_list(member) for member in members)
    return typing.get_origin(annotation) is list and typing.get_args(annotation) == (str,)


def _nargs(annotation: Any) -> int | str:
    """1 for a one-token value, ``"*"`` for a list that takes every token up to the next flag."""
    members = _union_args(annotation)
    if members is not None:
        counts = {_nargs(member) for member in members if member is not type(None)}
        return counts.pop() if len(counts) == 1 else "*"
    if typing.get_origin(annotation) is list and typing.get_args(annotation) != (str,):
        return "*"
    return 1


def _choices(annotation: Any) -> tuple[str, ...] | None:
    """The allowed spellings when the annotation is a closed set (``Literal``, ``None``)."""
    if annotation is type(None):
        return ("None",)
    if annotation is bool:  # only inside a union: a bare bool is a switch
        return ("True", "False")
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return tuple(str(choice) for choice in typing.get_args(annotation))
    members = _union_args(annotation)
    if members is not None:
        parts = [_choices(member) for member in members]
        if any(part is None for part in parts):
            return None
        return tuple(dict.fromkeys(choice for part in parts for choice in part))  # type: ignore[union-attr]
    if origin is list and not _is_str_list(annotation):
        return _choices(typing.get_args(annotation)[0]) if typing.get_args(annotation) else None
    return None


def _read(annotation: Any, tokens: list[str]) -> Any:
    """The value of ``tokens`` for ``annotation``, as tyro builds it; raises ``_Unreadable``."""
    members = _union_args(annotation)
    if members is not None:
        ordered = [m for m in members if m is type(None)] + [
            m for m in members if m is not type(None)
        ]
        for member in ordered:
            if _nargs(member) == 1 and len(tokens) != 1:
                continue
            try:
                return _read(member, tokens)
            except _Unreadable:
                continue
        raise _Unreadable
    if typing.get_origin(annotation) is list:
        if _is_str_list(annotation):
            return tokens[0].split(",")
        item = typing.get_args(annotation)[0] if typing.get_args(annotation) else str
        return [_read(item, [token]) for token in tokens]
    (token,) = tokens
    return _read_one(annotation, token)


def _read_one(annotation: Any, token: str) -> Any:
    """One token read as a scalar annotation."""
    if annotation is int or annotation is float:
        try:
            return annotation(token)
        except ValueError:
            raise _Unreadable from None
    if annotation is type(None):
        if token == "None":
            return None
        raise _Unreadable
    if annotation is bool:  # only inside a union: a bare bool is a switch
        if token in ("True", "False"):
            return token == "True"
        raise _Unreadable
    if typing.get_origin(annotation) is Literal:
        for choice in typing.get_args(annotation):
            if str(choice) == token:
                return choice
        raise _Unreadable
    return token  # str, Any, and what a static read could not resolve


def _first_unreadable(annotation: Any, tokens: list[str]) -> str:
    """The token to name in a message (for a list, the first item that does not read)."""
    if _nargs(annotation) == 1 or not tokens:
        return tokens[0] if tokens else ""
    members = _union_args(annotation) or (annotation,)
    lists = [m for m in members if typing.get_origin(m) is list]
    item = typing.get_args(lists[0])[0] if lists and typing.get_args(lists[0]) else str
    for token in tokens:
        try:
            _read(item, [token])
        except _Unreadable:
            return token
    return tokens[0]


def _describe(annotation: Any) -> str:
    """What a flag takes, in words: ``an integer or None``, ``a comma-separated list``."""
    from titan.schemas.typecheck import type_name

    members = _union_args(annotation) or (annotation,)
    words = []
    for member in members:
        if member is type(None):
            words.append("None")
        elif _is_str_list(member):
            words.append("a comma-separated list of strings")
        elif typing.get_origin(member) is list and _is_str_list(typing.get_args(member)[0]):
            words.append("comma-separated lists of strings, one per token")
        else:
            words.append(type_name(member))
    return " or ".join(dict.fromkeys(words))


def _type_hint(annotation: Any, token: str) -> str | None:
    """A hint for a value of the wrong type, when titan can guess the intent."""
    import math  # only for a message

    members = _union_args(annotation) or (annotation,)
    if token.lower() == "none":
        if type(None) in members:
            return "write `None` with a capital N"
        return "this key cannot be None; leave the flag out to keep the TOML's value"
    if int in members and float not in members:
        try:
            number = float(token)
        except ValueError:
            return None
        if math.isfinite(number):
            return "an integer takes no decimal point or exponent"
    return None


def _quote(token: str) -> str:
    import json  # only for a message

    return json.dumps(token, ensure_ascii=False)
