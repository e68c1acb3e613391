"""The text side of ``titan-validate --fix``: the upgrade's steps applied to a TOML's statements.

``titan.migrate.tomledit.fix`` decides what the fixed document is; this module changes the text so that it
parses to exactly that, replacing as few statements as it can (the rules are listed in
``titan.migrate.tomledit.fix``). ``titan.migrate.tomledit.statements`` cuts the text into statements and edits
one statement's value with tomlkit; ``titan.migrate.tomledit.statement_list`` keeps the statements in
order as edits replace them.
"""

from __future__ import annotations

import copy
from typing import Any

from titan.migrate.tomledit.statement_list import HEADERS, StatementList
from titan.migrate.tomledit.statements import (
    Statement,
    edit_value,
    rename_key,
    render_key,
    render_value,
    same_value,
)
from titan.schemas import eras


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
    return editor.settle(target)


class _Editor:
    """Applies the upgrade's steps to the text, one statement edit at a time.

    The statements are kept in a :class:`StatementList`: an edit replaces the statements it
    changes and looks the others up by index, so a fix takes time in proportion to the file
    and its steps, however many tables it has.
    """

    def __init__(self, text: str, steps: list[eras.Step]) -> None:
        crlf = text.count("\r\n")
        self.newline = "\r\n" if crlf and crlf == text.count("\n") else "\n"
        self.found = StatementList(text)
        self.renamed: dict[tuple[str, ...], tuple[str, ...]] = {}
        self.rank: dict[tuple[str, ...], int] = {}  # old table -> when it was first renamed
        self.origin: dict[tuple[str, ...], tuple[str, ...]] = {}  # new table -> old table
        self.touched: set[tuple[str, ...]] = set()  # tables that keys were taken from
        self.emptied = _emptied_tables(self.found, steps)

    # ----------------------------------------------------------------- moving keys

    def current(self, parts: tuple[str, ...]) -> tuple[str, ...]:
        """Where an old path is now, after the tables renamed so far (the first renamed wins)."""
        old = min(
            (parts[:end] for end in range(1, len(parts) + 1) if parts[:end] in self.renamed),
            key=self.rank.__getitem__,
            default=None,
        )
        return parts if old is None else self.renamed[old] + parts[len(old) :]

    def move(self, step: eras.Step) -> None:
        """Write the step's new keys, then take the old key out (unless it was renamed in place)."""
        found = self.found
        source = found.keyval_at(self.current(step.old))
        if source is not None:
            self.touched.add(source.table)
        comments = [s.text for s in _comment_block(found, source)]
        writes = list(step.writes)
        if source is not None and writes:  # the write keeping the old value carries its place
            keeps = [i for i, (_, value) in enumerate(writes) if same_value(value, source.value())]
            writes.insert(0, writes.pop(keeps[0] if keeps else 0))
        renamed = source is None and self.rename_inline(self.current(step.old), step)
        for number, (new, value) in enumerate(writes):
            if renamed and number == 0:
                continue
            here = found.keyval_at(self.current(step.old)) if number == 0 else None
            where = self.destination(new, here)
            if where[0] == "here":  # only ever the first write
                here = found.keyval_at(self.current(step.old))  # the table may have been renamed
                assert here is not None and source is not None
                line = self.keyval(source, key=where[1], value=value)
                found.replace(here, line[: len(line.rstrip("\r\n"))] + source.newline)
                renamed = True  # its comments stay with it
                continue
            first = number == 0
            self.place(where, new, value, source=source, first=first, block=comments)
            comments = []
        if not renamed:
            self.delete(step, self.current(step.old))

    def add(self, new: tuple[str, ...], value: Any, comment: str) -> None:
        """Write a key the file does not have, with ``comment`` on the line above it."""
        where = self.destination(new, None)
        if where[0] == "existing":
            raise FixRefused(f"`{'.'.join(new)}` is in the file already")
        block = [f"# {line}{self.newline}" for line in comment.splitlines()]
        self.place(where, new, value, source=None, first=True, block=block)

    def rename_inline(self, old: tuple[str, ...], step: eras.Step) -> bool:
        """Rename a key inside an inline table on the spot, when its new name belongs in the same
        inline table (``metrics = { rank_0_only = true }``); the settle pass fixes its value."""
        statement = _holder(self.found, old)
        if statement is None or not step.writes:
            return False
        new = step.writes[0][0]
        if (
            new[:-1] != old[:-1]
            or eras.get(statement.value(), new[len(statement.path) :]) is not eras.MISSING
        ):
            return False
        self.found.replace(statement, rename_key(statement, old[len(statement.path) :], new[-1]))
        return True

    def delete(self, step: eras.Step, old: tuple[str, ...]) -> None:
        """Take the old key (with its comment block) or an empty old table out of the text."""
        found = self.found
        statement = found.keyval_at(old)
        if statement is not None:
            found.remove([*_comment_block(found, statement), statement])
            return
        if found.header_at(old) is not None:  # an empty old table: its header goes
            self.touched.add(old)
            return
        statement = _holder(found, old)
        if statement is None:
            raise FixRefused(f"`{step.dotted}` was not found in the text")
        rest = old[len(statement.path) :]
        if _pruned(statement.value(), rest) == {}:  # the inline table goes
            self.touched.add(statement.table)
            comment = statement.tail.strip(" \t")  # stays, on a line of its own
            found.replace(
                statement, f"{statement.indent}{comment}{statement.newline}" if comment else ""
            )
        else:
            found.replace(statement, edit_value(statement, rest, None))

    def destination(self, new: tuple[str, ...], source: Statement | None) -> tuple[Any, ...]:
        """Where the key ``new`` goes: ``("here", key)`` replaces the source statement,
        ``("existing", s)``, ``("inline", s, rest)``, ``("after", s, key)`` or ``("end",)``."""
        found = self.found
        table = new[:-1]
        at = found.keyval_at(new)
        if at is not None and at is not source:
            return ("existing", at)
        holder = _holder(found, new)
        if holder is not None:
            rest = new[len(holder.path) :]
            inner = eras.get(holder.value(), rest[:-1])
            if not isinstance(inner, dict) and inner is not eras.MISSING:
                raise FixRefused(f"`{'.'.join(new)}` cannot be written: a value is in the way")
            return ("inline", holder, rest)
        home = source.table if source is not None else None
        header = found.header_at(table)
        if header is not None:
            _refuse_arrays(header)
            if home == table:
                return ("here", new[-1:])
            return ("after", _last_keyval(header), new[-1:])
        dotted = found.last_crossing(table)
        if dotted is not None:
            _refuse_arrays(dotted)
            body = dotted.table
            if home == body:
                return ("here", new[len(body) :])
            return ("after", dotted, new[len(body) :])
        if home is None:
            return ("end",)
        if self.rename(home, table):
            return ("here", new[-1:])
        if table[: len(home)] == home and not found.defined(new[: len(home) + 1]):
            return ("here", new[len(home) :])  # a dotted key in the source's own table
        return ("end",)

    def rename(self, old: tuple[str, ...], new: tuple[str, ...]) -> bool:
        """Give the old table's header the new table's name, when every key leaves it."""
        header = self.found.header_at(old)
        if header is None or old not in self.emptied or self.found.defined(new):
            return False
        text = f"{header.indent}[{render_key(new)}]{header.tail}{header.newline}"
        self.found.replace(header, text)
        self.emptied.discard(old)
        original = self.origin.pop(old, old)
        self.rank.setdefault(original, len(self.rank))
        self.renamed[original] = new
        self.origin.setdefault(new, original)
        return True

    def place(
        self,
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
        found = self.found
        kind = where[0]
        if kind in ("existing", "inline"):
            at: Statement = where[1]
            text = at.text
            if kind == "inline":
                text = edit_value(at, where[2], value, add=True)
            if first and source is not None:
                comment = source.tail.strip(" \t")  # it cannot share the line: one above it
                block = [*block, *([f"{comment}{self.newline}"] if comment else [])]
            lines = _indented(block, text[: len(text) - len(text.lstrip(" \t"))])
            found.replace(at, "".join(lines) + text)
            return
        comment = first
        if kind == "after":
            before: Statement = where[1]
            key = where[2]
            indent = before.indent if before.kind == "keyval" else None
            line = self.keyval(source, key=key, value=value, indent=indent, comment=comment)
            block = _indented(block, line[: len(line) - len(line.lstrip(" \t"))])
            if before.text.endswith("\n"):
                found.insert(before, "".join(block) + line)
            else:
                found.replace(before, before.text + self.newline + "".join(block) + line)
            return
        tail = found.tail(2 * len(self.newline))
        text = ""
        if tail and not tail.endswith("\n"):
            text += self.newline
        if tail and not (tail + text).endswith(self.newline * 2):
            text += self.newline
        line = self.keyval(source, key=new[-1:], value=value, comment=comment)
        text += f"[{render_key(new[:-1])}]{self.newline}{''.join(block)}{line}"
        if found.last is not None and not found.last.text.endswith("\n"):
            found.replace(found.last, found.last.text + text)
        else:
            found.insert(found.last, text)

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
        """Remove the header of each table keys were taken from that has no key left (first to
        last: taking one out never empties or fills another)."""
        headers = [s for s in self.found if s.kind == "header" and s.table in self.touched]
        for header in headers:
            body = _body(header)
            if header.table not in self.touched or any(s.kind == "keyval" for s in body):
                continue
            self.touched.discard(header.table)
            comment = header.tail.strip(" \t")
            text = f"{header.indent}{comment}{header.newline}" if comment else ""
            first, taken = header, [header]
            if all(s.kind == "blank" for s in body):
                taken += body
                if not comment and (body[-1] if body else header).next is None:  # the file's end
                    while first.prev is not None and first.prev.kind == "blank":
                        first = first.prev
                        taken.insert(0, first)
            self.found.splice(first.prev, taken, text)

    def settle(self, target: dict) -> str:
        """The text with every key given the target's value, only the values that differ
        edited."""
        parts = []
        for statement in self.found:
            text = statement.text
            if statement.kind == "keyval" and not statement.in_array:
                want = eras.get(target, statement.path)
                if want is eras.MISSING:
                    raise FixRefused(f"`{'.'.join(statement.path)}` has no place in the upgrade")
                if not same_value(statement.value(), want):
                    text = edit_value(statement, (), want)
            parts.append(text)
        return "".join(parts)


# --------------------------------------------------------------------------- statements


def _holder(found: StatementList, path: tuple[str, ...]) -> Statement | None:
    """The key whose inline table holds ``path`` (``metrics = { rank_0_only = true }``)."""
    holder = found.holder(path)
    if holder is not None:
        _refuse_arrays(holder)
    return holder


def _body(header: Statement) -> list[Statement]:
    """The statements of the header's table: up to the next header."""
    body = []
    statement = header.next
    while statement is not None and statement.kind not in HEADERS:
        body.append(statement)
        statement = statement.next
    return body


def _last_keyval(header: Statement) -> Statement:
    """The last key of the header's table (the header itself if it has none)."""
    return next((s for s in reversed(_body(header)) if s.kind == "keyval"), header)


def _comment_block(found: StatementList, statement: Statement | None) -> list[Statement]:
    """The comment lines directly above a statement (no blank line between), unless they open
    the file: a file's opening comments are about the file."""
    if statement is None:
        return []
    block = []
    above = statement.prev
    while above is not None and above.kind == "comment":
        block.append(above)
        above = above.prev
    block.reverse()
    if not found.code_above(block[0] if block else statement):
        return []
    return block


def _emptied_tables(found: StatementList, steps: list[eras.Step]) -> set[tuple[str, ...]]:
    """Tables whose every key is an old key the upgrade moves to another table."""
    writes = {step.old: [new for new, _ in step.writes] for step in steps}
    emptied = set()
    for header in found:
        if header.kind != "header" or header.in_array:
            continue
        table = header.table
        keys = [s.path for s in _body(header) if s.kind == "keyval"]
        if keys and all(
            key in writes and all(new[: len(table)] != table for new in writes[key]) for key in keys
        ):
            emptied.add(table)
    return emptied


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
