"""``titan-validate --fix``: rewrite a legacy TOML as v0.2.2 wants it, keeping every other byte.

What is fixed is what has one right answer:

- keys of older torchtitan eras, as :func:`schemas.eras.upgrade` says (moved, renamed, inverted,
  values mapped); an *unportable* key is left where it is, for the validator to report;
- stale converter names in ``model.converters`` (``"float8"`` -> ``"quantize.linear.float8"``),
  and a string where the schema wants a ``list[str]`` (``converters = "float8"`` becomes
  ``converters = ["quantize.linear.float8"]``).

How the text changes (``migrate.toml_layout`` cuts the file into statements; only the
statements named below are replaced, tomlkit renders new values and edits one statement's value):

- a key whose new home is the table it is written in is renamed on its own line: same place,
  same ``=`` spacing, same comments, and its value as written when the value does not change;
- a key that moves to another table leaves with its comments (the block of comment lines
  directly above it and the one on its line) and lands after the last key of its destination
  table (an existing ``[table]``, the dotted keys that make one, or an inline table), indented
  like that table's keys;
- a destination table the file does not have takes the place of the old table when every key of
  the old table leaves it (``[float8]`` becomes ``[quantize.linear.float8]``, header comments and
  all); otherwise it is appended at the end of the file;
- an old table left with no keys is removed: its header line goes (a comment on that line stays,
  on a line of its own), and so do its blank lines when nothing else is left in it; comment lines
  around it stay where they were. Comments are never deleted, except those of a key that is
  deleted because its value is what v0.2.2 does anyway;
- a value that changes (an inverted boolean, a converter list) is edited in place: in an array
  only the elements that change are rewritten.

The result is parsed again and must equal the upgraded document exactly (types included);
anything else is refused (:class:`FixRefused`), so a file is never written with a meaning the
upgrade did not intend.
"""

from __future__ import annotations

import copy
import tomllib
import typing
from typing import Any

from migrate.toml_layout import LayoutError, Statement, statements
from schemas import eras, rules
from schemas.spans import locate_keys
from schemas.spec import SectionSpec

CONVERTERS = ("model", "converters")


class FixRefused(Exception):
    """The file cannot be rewritten safely; the message says why."""


class Fixed:
    """The rewritten text and one line per change (empty when nothing needed fixing)."""

    __slots__ = ("text", "fixes")

    def __init__(self, text: str, fixes: tuple[str, ...]) -> None:
        self.text = text
        self.fixes = fixes


def fix_text(text: str, *, schema: SectionSpec) -> Fixed:
    """``text`` (a TOML that ``tomllib`` accepts) with every fixable finding fixed.

    ``schema`` is the legacy schema merged with the file's custom config module: its keys are
    current even where an older torchtitan had the same name, and its ``list[str]`` fields are
    the ones a lone string is wrapped for. Raises :class:`FixRefused`.
    """
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise FixRefused(f"it is not valid TOML ({error})") from None
    notes: list[str] = []
    cleaned = _fix_values(document, schema, notes)
    upgraded, steps = eras.upgrade(cleaned, is_current=lambda parts: _is_current(schema, parts))
    for step in steps:
        if step.kind == "unportable":  # left where it is: the validator reports it
            _put(upgraded, step.old, _get(cleaned, step.old))
    target = _fix_values(upgraded, schema, [])
    applied = [step for step in steps if step.kind == "upgraded"]
    if _same(target, document):
        return Fixed(text, ())
    try:
        editor = _Editor(text, applied)
        editor.run(target)
    except LayoutError as error:
        raise FixRefused(f"its layout could not be read ({error})") from None
    try:
        result = tomllib.loads(editor.text)
    except tomllib.TOMLDecodeError as error:
        raise FixRefused(f"the rewrite would not be valid TOML ({error})") from None
    if not _same(result, target):
        raise FixRefused("the rewrite would not mean what the upgrade says; fix it by hand")
    return Fixed(editor.text, tuple(_describe(step) for step in applied) + tuple(notes))


# --------------------------------------------------------------------------- values


def _fix_values(document: dict, schema: SectionSpec, notes: list[str]) -> dict:
    """A copy with lone strings wrapped for ``list[str]`` fields and stale converter names
    replaced (each change described in ``notes``)."""
    fixed = copy.deepcopy(document)

    def walk(table: dict, section: SectionSpec, parts: tuple[str, ...]) -> None:
        for key, value in table.items():
            field = section.field(key)
            if field is None:
                continue
            here = (*parts, key)
            if isinstance(field.annotation, SectionSpec):
                if isinstance(value, dict):
                    walk(value, field.annotation, here)
            elif isinstance(value, str) and _is_list_of_str(field.annotation):
                table[key] = [value]
                notes.append(f"`{'.'.join(here)}`: the string became a one-element list")

    walk(fixed, schema, ())
    model = fixed.get("model")
    names = model.get("converters") if isinstance(model, dict) else None
    if isinstance(names, list):
        renamed: list[Any] = []
        for name in names:
            new = rules.STALE_CONVERTER_NAMES.get(name) if isinstance(name, str) else None
            if new is not None:
                notes.append(f'`model.converters`: "{name}" -> "{new}"')
                name = new
            if not any(_same(name, other) for other in renamed):
                renamed.append(name)
        model["converters"] = renamed
    return fixed


def _is_list_of_str(annotation: Any) -> bool:
    return typing.get_origin(annotation) is list and typing.get_args(annotation) == (str,)


def _is_current(schema: SectionSpec, parts: tuple[str, ...]) -> bool:
    """Whether ``parts`` is a key (or table) of the merged schema as it stands."""
    section: Any = schema
    for part in parts:
        if not isinstance(section, SectionSpec):
            return False
        field = section.field(part)
        if field is None:
            return False
        section = field.annotation
    return True


_MISSING = object()


def _get(table: Any, parts: tuple[str, ...]) -> Any:
    for part in parts:
        if not isinstance(table, dict) or part not in table:
            return _MISSING
        table = table[part]
    return table


def _put(document: dict, parts: tuple[str, ...], value: Any) -> None:
    table = document
    for part in parts[:-1]:
        table = table.setdefault(part, {})
    table[parts[-1]] = value


def _same(value: Any, other: Any) -> bool:
    """Equal with the same types all the way down (``1 == True`` is not the same TOML)."""
    if type(value) is not type(other):
        return False
    if isinstance(value, dict):
        return value.keys() == other.keys() and all(_same(value[k], other[k]) for k in value)
    if isinstance(value, list):
        return len(value) == len(other) and all(map(_same, value, other))
    return bool(value == other)


def _describe(step: eras.Step) -> str:
    if not step.writes:
        return f"`{step.dotted}` deleted: {step.why}"
    writes = []
    for new, value in step.writes:
        if new == CONVERTERS:
            writes.append(", ".join(f'"{name}"' for name in value) + " in `model.converters`")
        else:
            writes.append(f"`{'.'.join(new)}`")
    return f"`{step.dotted}` -> {' and '.join(writes)}"


# --------------------------------------------------------------------------- the text


class _Editor:
    """Applies the upgrade's steps to the text, one statement edit at a time.

    Every edit re-reads the statements from the current text: files are a few kilobytes and
    steps a handful, and positions can then never go stale.
    """

    def __init__(self, text: str, steps: list[eras.Step]) -> None:
        self.text = text
        self.steps = steps
        crlf = text.count("\r\n")
        self.newline = "\r\n" if crlf and crlf == text.count("\n") else "\n"
        self.renamed: dict[tuple[str, ...], tuple[str, ...]] = {}
        self.touched: set[tuple[str, ...]] = set()  # tables that keys were taken from
        self.emptied = _emptied_tables(statements(text), steps)

    def run(self, target: dict) -> None:
        for step in self.steps:
            self.move(step)
        self.drop_empty_tables()
        self.settle(target)

    def join(self, found: list[Statement], *, drop: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        self.text = "".join(s.text for i, s in enumerate(found) if i not in drop)

    # ----------------------------------------------------------------- moving keys

    def current(self, parts: tuple[str, ...]) -> tuple[str, ...]:
        """Where an old path is now, after the tables renamed so far."""
        for old, new in self.renamed.items():
            if parts[: len(old)] == old:
                return new + parts[len(old) :]
        return parts

    def move(self, step: eras.Step) -> None:
        """Write the step's new keys, then take the old key out (unless it was renamed in place)."""
        found = statements(self.text)
        index = _keyval_at(found, self.current(step.old))
        source = found[index] if index is not None else None
        if source is not None:
            self.touched.add(source.table)
        comments = [found[i].text for i in _comment_indices(found, index)]
        renamed = source is None and self.rename_inline(found, self.current(step.old), step)
        for number, (new, value) in enumerate(step.writes):
            if renamed and number == 0:
                continue
            found = statements(self.text)
            index = _keyval_at(found, self.current(step.old)) if number == 0 else None
            where = self.destination(found, new, index)
            if where[0] == "here":  # only ever the first write
                found = statements(self.text)  # ``destination`` may have renamed the table
                index = _keyval_at(found, self.current(step.old))
                assert index is not None and source is not None
                line = self.keyval(source, key=where[1], value=value)
                found[index].text = line[: len(line.rstrip("\r\n"))] + source.newline
                self.join(found)
                renamed = True  # its comments stay with it
                continue
            first = number == 0
            self.place(found, where, new, value, source=source, first=first, block=comments)
            comments = []
        if not renamed:
            self.delete(step, self.current(step.old))

    def rename_inline(self, found: list[Statement], old: tuple[str, ...], step: eras.Step) -> bool:
        """Rename a key inside an inline table on the spot, when its new name belongs in the same
        inline table (``metrics = { rank_0_only = true }``); the settle pass fixes its value."""
        holder = _inline_holder(found, old)
        if holder is None or not step.writes:
            return False
        statement, new = found[holder], step.writes[0][0]
        if (
            new[:-1] != old[:-1]
            or _get(statement.value(), new[len(statement.path) :]) is not _MISSING
        ):
            return False
        spans = locate_keys(statement.text)
        span = spans.get((*statement.key, *old[len(statement.path) :]))
        if span is None:
            return False
        lines = statement.text.splitlines(keepends=True)
        start = sum(len(line) for line in lines[: span.line - 1])
        statement.text = (
            statement.text[: start + span.col - 1]
            + _key(new[-1:])
            + statement.text[start + span.end_col - 1 :]
        )
        self.join(found)
        return True

    def delete(self, step: eras.Step, old: tuple[str, ...]) -> None:
        """Take the old key (with its comment block) or an empty old table out of the text."""
        found = statements(self.text)
        index = _keyval_at(found, old)
        if index is not None:
            self.join(found, drop={index, *_comment_indices(found, index)})
            return
        if _header_at(found, old) is not None:  # an empty old table: its header goes
            self.touched.add(old)
            return
        holder = _inline_holder(found, old)
        if holder is None:
            raise FixRefused(f"`{step.dotted}` was not found in the text")
        statement = found[holder]
        rest = old[len(statement.path) :]
        if _pruned(statement.value(), rest) == {}:  # the inline table goes
            self.touched.add(statement.table)
            comment = statement.tail.strip(" \t")  # stays, on a line of its own
            statement.text = f"{statement.indent}{comment}{statement.newline}" if comment else ""
        else:
            statement.text = _edit(statement, rest, None)
        self.join(found)

    def destination(
        self, found: list[Statement], new: tuple[str, ...], source: int | None
    ) -> tuple[Any, ...]:
        """Where the key ``new`` goes: ``("here", key)`` replaces the source statement,
        ``("existing", i)``, ``("inline", i, rest)``, ``("after", i, key)`` or ``("end",)``."""
        table = new[:-1]
        at = _keyval_at(found, new)
        if at is not None and at != source:
            return ("existing", at)
        for i, statement in enumerate(found):
            if (
                statement.kind == "keyval"
                and len(statement.path) < len(new)
                and new[: len(statement.path)] == statement.path
            ):
                _refuse_arrays(statement)
                rest = new[len(statement.path) :]
                inner = _get(statement.value(), rest[:-1])
                if not isinstance(inner, dict) and inner is not _MISSING:
                    raise FixRefused(f"`{'.'.join(new)}` cannot be written: a value is in the way")
                return ("inline", i, rest)
        home = found[source].table if source is not None else None
        header = _header_at(found, table)
        if header is not None:
            _refuse_arrays(found[header])
            if home == table:
                return ("here", new[-1:])
            return ("after", _last_keyval(found, header), new[-1:])
        dotted = [
            i
            for i, s in enumerate(found)
            if s.kind == "keyval" and len(s.table) < len(table) and s.path[: len(table)] == table
        ]
        if dotted:
            _refuse_arrays(found[dotted[-1]])
            body = found[dotted[-1]].table
            if home == body:
                return ("here", new[len(body) :])
            return ("after", dotted[-1], new[len(body) :])
        if home is None:
            return ("end",)
        if self.rename(found, home, table):
            return ("here", new[-1:])
        if table[: len(home)] == home and not _defined(found, new[: len(home) + 1]):
            return ("here", new[len(home) :])  # a dotted key in the source's own table
        return ("end",)

    def rename(self, found: list[Statement], old: tuple[str, ...], new: tuple[str, ...]) -> bool:
        """Give the old table's header the new table's name, when every key leaves it."""
        header = _header_at(found, old)
        if header is None or old not in self.emptied or _defined(found, new):
            return False
        statement = found[header]
        statement.text = f"{statement.indent}[{_key(new)}]{statement.tail}{statement.newline}"
        self.join(found)
        self.emptied.discard(old)
        original = next((k for k, v in self.renamed.items() if v == old), old)
        self.renamed[original] = new
        return True

    def place(
        self,
        found: list[Statement],
        where: tuple[Any, ...],
        new: tuple[str, ...],
        value: Any,
        *,
        source: Statement | None,
        first: bool,
        block: list[str],
    ) -> None:
        """Write ``new = value`` where :meth:`destination` said, with the comment lines
        ``block`` above it (the settle pass gives an existing key its new value)."""
        kind = where[0]
        if kind in ("existing", "inline"):
            at = where[1]
            if kind == "inline":
                found[at].text = _edit(found[at], where[2], value, add=True)
            if first and source is not None:
                comment = source.tail.strip(" \t")  # it cannot share the line: one above it
                block = [*block, *([f"{source.indent}{comment}{self.newline}"] if comment else [])]
            found[at:at] = [Statement("comment", line, ()) for line in block]
            self.join(found)
            return
        comment = first
        if kind == "after":
            at, key = where[1], where[2]
            before = found[at]
            if not before.text.endswith("\n"):
                before.text += self.newline
            indent = before.indent if before.kind == "keyval" else None
            line = self.keyval(source, key=key, value=value, indent=indent, comment=comment)
            found.insert(at + 1, Statement("keyval", "".join(block) + line, ()))
            self.join(found)
            return
        text = self.text
        if text and not text.endswith("\n"):
            text += self.newline
        if text and not text.endswith(self.newline * 2):
            text += self.newline
        line = self.keyval(source, key=new[-1:], value=value, comment=comment)
        self.text = f"{text}[{_key(new[:-1])}]{self.newline}{''.join(block)}{line}"

    def keyval(
        self,
        source: Statement | None,
        *,
        key: tuple[str, ...],
        value: Any,
        indent: str | None = None,
        comment: bool = True,
    ) -> str:
        """``key = value`` in the source statement's style: its indent and ``=`` spacing, its
        comment, its value as written when the value does not change."""
        if source is None:
            return f"{indent or ''}{_key(key)} = {_render(value)}{self.newline}"
        key_text = source.key_text if key == source.key else _key(key)
        value_text = source.value_text if _same(source.value(), value) else _render(value)
        return (
            f"{source.indent if indent is None else indent}{key_text}{source.separator}"
            f"{value_text}{source.tail if comment else ''}{source.newline or self.newline}"
        )

    # ----------------------------------------------------------------- tidying up

    def drop_empty_tables(self) -> None:
        """Remove the header of each table keys were taken from that has no key left."""
        while True:
            found = statements(self.text)
            empty = next(
                (
                    h
                    for h, s in enumerate(found)
                    if s.kind == "header"
                    and s.table in self.touched
                    and not any(found[i].kind == "keyval" for i in _body(found, h))
                ),
                None,
            )
            if empty is None:
                return
            header = found[empty]
            self.touched.discard(header.table)
            body = _body(found, empty)
            comment = header.tail.strip(" \t")
            header.text = f"{header.indent}{comment}{header.newline}" if comment else ""
            drop: set[int] = set()
            if all(found[i].kind == "blank" for i in body):
                drop.update(body)
                if not comment and empty + len(body) + 1 == len(found):  # the end of the file
                    above = empty - 1
                    while above >= 0 and found[above].kind == "blank":
                        drop.add(above)
                        above -= 1
            self.join(found, drop=drop)

    def settle(self, target: dict) -> None:
        """Give every key the target's value, editing only the values that differ."""
        found = statements(self.text)
        for statement in found:
            if statement.kind != "keyval" or statement.in_array:
                continue
            want = _get(target, statement.path)
            if want is _MISSING:
                raise FixRefused(f"`{'.'.join(statement.path)}` has no place in the upgrade")
            if not _same(statement.value(), want):
                statement.text = _edit(statement, (), want)
        self.join(found)


# --------------------------------------------------------------------------- statements


def _keyval_at(found: list[Statement], path: tuple[str, ...]) -> int | None:
    return next(
        (i for i, s in enumerate(found) if s.kind == "keyval" and s.path == path and path), None
    )


def _inline_holder(found: list[Statement], path: tuple[str, ...]) -> int | None:
    """The key whose inline table holds ``path`` (``metrics = { rank_0_only = true }``)."""
    for i, s in enumerate(found):
        if s.kind == "keyval" and len(s.path) < len(path) and path[: len(s.path)] == s.path:
            _refuse_arrays(s)
            return i
    return None


def _header_at(found: list[Statement], table: tuple[str, ...]) -> int | None:
    return next(
        (i for i, s in enumerate(found) if s.kind == "header" and s.table == table and table),
        None,
    )


def _body(found: list[Statement], header: int) -> list[int]:
    """The statements of the header's table: up to the next header."""
    end = header + 1
    while end < len(found) and found[end].kind not in ("header", "array-header"):
        end += 1
    return list(range(header + 1, end))


def _last_keyval(found: list[Statement], header: int) -> int:
    keyvals = [i for i in _body(found, header) if found[i].kind == "keyval"]
    return keyvals[-1] if keyvals else header


def _comment_indices(found: list[Statement], index: int | None) -> list[int]:
    """The comment lines directly above a statement (no blank line between), unless they open
    the file: a file's opening comments are about the file."""
    if index is None:
        return []
    start = index
    while start > 0 and found[start - 1].kind == "comment":
        start -= 1
    if not any(s.kind in ("keyval", "header", "array-header") for s in found[:start]):
        return []
    return list(range(start, index))


def _emptied_tables(found: list[Statement], steps: list[eras.Step]) -> set[tuple[str, ...]]:
    """Tables whose every key is an old key the upgrade moves to another table."""
    writes = {step.old: [new for new, _ in step.writes] for step in steps}
    emptied = set()
    for h, header in enumerate(found):
        if header.kind != "header" or header.in_array:
            continue
        table = header.table
        keys = [found[i].path for i in _body(found, h) if found[i].kind == "keyval"]
        if keys and all(
            key in writes and all(new[: len(table)] != table for new in writes[key]) for key in keys
        ):
            emptied.add(table)
    return emptied


def _defined(found: list[Statement], table: tuple[str, ...]) -> bool:
    """Whether any header or key of the file already says something at or under ``table``
    (or holds a value where ``table`` would go)."""
    for s in found:
        if s.kind in ("header", "array-header") and s.table[: len(table)] == table:
            return True
        if s.kind == "keyval" and (s.path[: len(table)] == table or table[: len(s.path)] == s.path):
            return True
    return False


def _refuse_arrays(statement: Statement) -> None:
    if statement.in_array:
        raise FixRefused("a key to fix is inside an array of tables ([[...]])")


# --------------------------------------------------------------------------- tomlkit


def _key(parts: tuple[str, ...]) -> str:
    import tomlkit

    return tomlkit.key(list(parts) if len(parts) > 1 else parts[0]).as_string()


def _item(value: Any) -> Any:
    import tomlkit

    if isinstance(value, dict):
        table = tomlkit.inline_table()
        for key, inner in value.items():
            table[key] = _item(inner)
        return table
    if isinstance(value, list):
        array = tomlkit.array()
        for inner in value:
            array.append(_item(inner))
        return array
    return tomlkit.item(value)


def _render(value: Any) -> str:
    return _item(value).as_string()


def _pruned(value: dict, rest: tuple[str, ...]) -> dict:
    """``value`` (a table) without the key ``rest``, and without the tables that leaves empty."""
    value = copy.deepcopy(value)
    tables = [value]
    for part in rest[:-1]:
        tables.append(tables[-1][part])
    del tables[-1][rest[-1]]
    for depth in range(len(rest) - 1, 0, -1):
        if tables[depth]:
            break
        del tables[depth - 1][rest[depth - 1]]
    return value


def _edit(statement: Statement, rest: tuple[str, ...], value: Any, *, add: bool = False) -> str:
    """The statement with the value at ``rest`` (inside its inline table; ``()`` for its own
    value) set to ``value``, added (``add``), or deleted (``value`` None)."""
    import tomlkit

    mini = tomlkit.parse(statement.text)
    container: Any = mini
    path = (*statement.key, *rest)
    for part in path[:-1]:
        if part not in container:
            container[part] = tomlkit.inline_table()
        container = container[part]
    last = path[-1]
    if add:
        container[last] = _item(value)
    elif value is None:
        del container[last]
        _drop_empty(mini, path[:-1])
    else:
        _set(container, last, value)
    return mini.as_string()


def _drop_empty(mini: Any, path: tuple[str, ...]) -> None:
    """Delete the inline tables on ``path`` that a deletion left empty (innermost first)."""
    for end in range(len(path), 0, -1):
        parent: Any = mini
        for part in path[: end - 1]:
            parent = parent[part]
        if len(parent[path[end - 1]]) == 0:
            del parent[path[end - 1]]
        else:
            return


def _set(container: Any, key: str, want: Any) -> None:
    """Set ``container[key]`` to ``want``, rewriting only what differs: in a table only the keys
    that change, in an array only the elements that change (its layout and comments stay)."""
    have = container[key]
    have = have.unwrap() if hasattr(have, "unwrap") else have  # a bool comes back as a bool
    if isinstance(have, dict) and isinstance(want, dict):
        for name in have:
            if name not in want:
                del container[key][name]
        for name, inner in want.items():
            if name not in have:
                container[key][name] = _item(inner)
            elif not _same(have[name], inner):
                _set(container[key], name, inner)
        return
    if isinstance(have, list) and isinstance(want, list):
        array = container[key]
        for index in range(min(len(have), len(want))):
            if not _same(have[index], want[index]):
                array[index] = _item(want[index])
        for index in range(len(have) - 1, len(want) - 1, -1):
            del array[index]
        for inner in want[len(have) :]:
            array.append(_item(inner))
        return
    container[key] = _item(want)
