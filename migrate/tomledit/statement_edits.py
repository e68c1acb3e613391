"""The text side of ``titan-validate --fix``: the upgrade's steps applied to a TOML's statements.

``migrate.tomledit.fix`` decides what the fixed document is; this module changes the text so that it
parses to exactly that, replacing as few statements as it can (the rules are listed in
``migrate.tomledit.fix``). ``migrate.tomledit.statements`` cuts the text into statements and edits
one statement's value with tomlkit.
"""

from __future__ import annotations

import copy
from typing import Any

from migrate.tomledit.statements import (
    Statement,
    edit_value,
    rename_key,
    render_key,
    render_value,
    same_value,
    statements,
)
from schemas import eras


class FixRefused(Exception):
    """The file cannot be rewritten safely; the message says why."""


def apply_steps(
    text: str,
    steps: list[eras.Step],
    *,
    target: dict,
    additions: tuple[tuple[tuple[str, ...], Any, str], ...] = (),
) -> str:
    """``text`` with each upgraded step's old key replaced by its writes, each of
    ``additions`` (``(key, value, comment)``: a key the file omits) written with its comment
    above it, and every value set to ``target``'s (a stale converter name, a string made a
    list). Raises :class:`FixRefused` and ``LayoutError``."""
    editor = _Editor(text, steps)
    for step in steps:
        editor.move(step)
    for new, value, comment in additions:
        editor.add(new, value, comment)
    editor.drop_empty_tables()
    editor.settle(target)
    return editor.text


class _Editor:
    """Applies the upgrade's steps to the text, one statement edit at a time.

    Every edit re-reads the statements from the current text: files are a few kilobytes and
    steps a handful, and positions can then never go stale.
    """

    def __init__(self, text: str, steps: list[eras.Step]) -> None:
        self.text = text
        crlf = text.count("\r\n")
        self.newline = "\r\n" if crlf and crlf == text.count("\n") else "\n"
        self.renamed: dict[tuple[str, ...], tuple[str, ...]] = {}
        self.touched: set[tuple[str, ...]] = set()  # tables that keys were taken from
        self.emptied = _emptied_tables(statements(text), steps)

    def join(
        self, found: list[Statement], *, drop: frozenset[int] | set[int] = frozenset()
    ) -> None:
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
        writes = list(step.writes)
        if source is not None and writes:  # the write keeping the old value carries its place
            keeps = [i for i, (_, value) in enumerate(writes) if same_value(value, source.value())]
            writes.insert(0, writes.pop(keeps[0] if keeps else 0))
        renamed = source is None and self.rename_inline(found, self.current(step.old), step)
        for number, (new, value) in enumerate(writes):
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

    def add(self, new: tuple[str, ...], value: Any, comment: str) -> None:
        """Write a key the file does not have, with ``comment`` on the line above it."""
        found = statements(self.text)
        where = self.destination(found, new, None)
        if where[0] == "existing":
            raise FixRefused(f"`{'.'.join(new)}` is in the file already")
        block = [f"# {line}{self.newline}" for line in comment.splitlines()]
        self.place(found, where, new, value, source=None, first=True, block=block)

    def rename_inline(self, found: list[Statement], old: tuple[str, ...], step: eras.Step) -> bool:
        """Rename a key inside an inline table on the spot, when its new name belongs in the same
        inline table (``metrics = { rank_0_only = true }``); the settle pass fixes its value."""
        holder = _inline_holder(found, old)
        if holder is None or not step.writes:
            return False
        statement, new = found[holder], step.writes[0][0]
        if (
            new[:-1] != old[:-1]
            or eras.get(statement.value(), new[len(statement.path) :]) is not eras.MISSING
        ):
            return False
        statement.text = rename_key(statement, old[len(statement.path) :], new[-1])
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
            statement.text = edit_value(statement, rest, None)
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
                inner = eras.get(statement.value(), rest[:-1])
                if not isinstance(inner, dict) and inner is not eras.MISSING:
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
        statement.text = f"{statement.indent}[{render_key(new)}]{statement.tail}{statement.newline}"
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
                found[at].text = edit_value(found[at], where[2], value, add=True)
            if first and source is not None:
                comment = source.tail.strip(" \t")  # it cannot share the line: one above it
                block = [*block, *([f"{comment}{self.newline}"] if comment else [])]
            lines = _indented(block, found[at].indent)
            found[at:at] = [Statement("comment", line, ()) for line in lines]
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
            block = _indented(block, line[: len(line) - len(line.lstrip(" \t"))])
            found.insert(at + 1, Statement("keyval", "".join(block) + line, ()))
            self.join(found)
            return
        text = self.text
        if text and not text.endswith("\n"):
            text += self.newline
        if text and not text.endswith(self.newline * 2):
            text += self.newline
        line = self.keyval(source, key=new[-1:], value=value, comment=comment)
        self.text = f"{text}[{render_key(new[:-1])}]{self.newline}{''.join(block)}{line}"

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
            return f"{indent or ''}{render_key(key)} = {render_value(value)}{self.newline}"
        key_text = source.key_text if key == source.key else render_key(key)
        value_text = source.value_text if same_value(source.value(), value) else render_value(value)
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
            want = eras.get(target, statement.path)
            if want is eras.MISSING:
                raise FixRefused(f"`{'.'.join(statement.path)}` has no place in the upgrade")
            if not same_value(statement.value(), want):
                statement.text = edit_value(statement, (), want)
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


def _indented(lines: list[str], indent: str) -> list[str]:
    """Comment lines that travel with a key, indented like it at its new place."""
    return [indent + line.lstrip(" \t") for line in lines]


def _refuse_arrays(statement: Statement) -> None:
    if statement.in_array:
        raise FixRefused("a key to fix is inside an array of tables ([[...]])")


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
