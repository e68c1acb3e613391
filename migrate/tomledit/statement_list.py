"""A TOML file's statements as a linked list that edits splice in place, with the indexes the
``--fix`` editor looks them up by.

``titan-validate --fix`` makes an edit or more for each old key, and a file with thousands of
tables has thousands of them. Cutting the whole text into statements again after each edit, or
scanning every statement for each look-up, would make a fix quadratic in the size of the file.
Here an edit replaces only the statements it changes: the new text is cut in its place (in the
table it is written in), the statements below it whose table that changes get their new table,
and the indexes (a key's path, a table's header, the keys written under a table) change for
those statements alone. The statements are then exactly those of the joined text cut again.

Each statement has an ``order``: numbers growing down the file with gaps between them, which
the statements spliced in take; when a gap runs out every statement is numbered again.
"""

from __future__ import annotations

from collections.abc import Iterator

from titan.migrate.tomledit.statements import Statement, statements

CODE = frozenset({"keyval", "header", "array-header"})
HEADERS = frozenset({"header", "array-header"})
_GAP = 1 << 32
"""Between two statements' orders when they are numbered."""
_STEP = 1 << 16
"""At most this between the statements spliced into a gap, so that a gap takes many splices."""

Path = tuple[str, ...]
Group = dict[Statement, None]  # statements in no particular order (an ordered set)


class StatementList:
    """The statements of a TOML text, first to last, and indexes over them."""

    def __init__(self, text: str) -> None:
        self.first: Statement | None = None
        self.last: Statement | None = None
        self._build(statements(text))

    def _build(self, found: list[Statement]) -> None:
        """Link and index ``found``, the statements of a whole file."""
        self.first = self.last = None
        self._keyvals: dict[Path, Group] = {}  # path -> keyvals
        self._headers: dict[Path, Group] = {}  # table -> [table] headers
        self._arrays: dict[Path, Group] = {}  # table -> [[table]] headers
        self._crossing: dict[Path, Group] = {}  # table -> dotted keys written from above it
        self._keys_under: dict[Path, int] = {}  # table -> how many keyvals are at or under it
        self._headers_under: dict[Path, int] = {}  # table -> how many headers are at or under it
        self._link(None, found, None)
        for statement in found:
            self._index(statement, 1)
        self._renumber()
        self._first_code = next((s for s in found if s.kind in CODE), None)

    # ----------------------------------------------------------------- reading

    def __iter__(self) -> Iterator[Statement]:
        statement = self.first
        while statement is not None:
            following = statement.next
            yield statement
            statement = following

    def text(self) -> str:
        """The file as it stands."""
        return "".join(statement.text for statement in self)

    def tail(self, size: int) -> str:
        """The file's last ``size`` characters (fewer in a shorter file)."""
        parts: list[str] = []
        length = 0
        statement = self.last
        while statement is not None and length < size:
            parts.append(statement.text)
            length += len(statement.text)
            statement = statement.prev
        return "".join(reversed(parts))[-size:] if size else ""

    def keyval_at(self, path: Path) -> Statement | None:
        """The first key of ``path``."""
        return _first(self._keyvals.get(path, ())) if path else None

    def holder(self, path: Path) -> Statement | None:
        """The first key whose path is above ``path`` (its value is an inline table or is in the
        way of ``path``)."""
        held = [s for end in range(1, len(path)) for s in self._keyvals.get(path[:end], ())]
        return _first(held)

    def header_at(self, table: Path) -> Statement | None:
        """The first ``[table]`` header."""
        return _first(self._headers.get(table, ())) if table else None

    def last_crossing(self, table: Path) -> Statement | None:
        """The last dotted key that writes into ``table`` from a table above it."""
        return max(self._crossing.get(table, ()), key=_order, default=None)

    def defined(self, table: Path) -> bool:
        """Whether a header or key says something at or under ``table`` (or holds a value where
        ``table`` would go)."""
        return (
            table in self._headers_under
            or table in self._keys_under
            or any(table[:end] in self._keyvals for end in range(1, len(table) + 1))
        )

    def code_above(self, statement: Statement) -> bool:
        """Whether a key or header comes before ``statement``."""
        return self._first_code is not None and self._first_code.order < statement.order

    # ----------------------------------------------------------------- editing

    def replace(self, statement: Statement, text: str) -> None:
        """Put ``text`` in the place of ``statement``."""
        self.splice(statement.prev, [statement], text)

    def remove(self, found: list[Statement]) -> None:
        """Take out the consecutive statements ``found``."""
        if found:
            self.splice(found[0].prev, found, "")

    def insert(self, prev: Statement | None, text: str) -> None:
        """Put ``text`` after ``prev`` (at the start of the file for ``None``)."""
        self.splice(prev, [], text)

    def splice(self, prev: Statement | None, old: list[Statement], text: str) -> None:
        """Replace the consecutive statements ``old`` that follow ``prev`` with ``text``, cut in
        its place."""
        old = list(old)
        after = old[-1].next if old else (prev.next if prev is not None else self.first)
        while text and not text.endswith("\n") and after is not None:
            old.append(after)  # the text runs into the next line: they are cut as one
            text += after.text
            after = after.next
        table, in_array = (prev.table, prev.in_array) if prev is not None else ((), False)
        new = statements(
            text, table=table, in_array=in_array, under=lambda inner: self._under(inner, prev)
        )
        if any(s.kind == "array-header" for s in (*old, *new)):  # every table below may change
            self._build(statements(self.text()[: _offset(prev)] + text + _rest(after)))
            return
        was = (old[-1].table, old[-1].in_array) if old else (table, in_array)
        removed_first_code = self._first_code in old
        for statement in old:
            self._index(statement, -1)
        self._link(prev, new, after)
        self._number(prev, new, after)
        for statement in new:
            self._index(statement, 1)
        self._settle_first_code(new, after, removed_first_code)
        now = (new[-1].table, new[-1].in_array) if new else (table, in_array)
        if now != was:
            self._retable(after, *now)

    def _retable(self, statement: Statement | None, table: Path, in_array: bool) -> None:
        """Give the statements from ``statement`` to the next header the table they now lie in
        (a new statement each: a statement is never changed once in the list)."""
        while statement is not None and statement.kind not in HEADERS:
            moved = Statement(
                statement.kind,
                statement.text,
                table,
                key=statement.key,
                in_array=in_array,
                eq=statement.eq,
                value_end=statement.value_end,
            )
            self._index(statement, -1)
            self._link(statement.prev, [moved], statement.next)
            moved.order = statement.order
            self._index(moved, 1)
            if self._first_code is statement:
                self._first_code = moved
            statement = moved.next

    def _settle_first_code(
        self, new: list[Statement], after: Statement | None, removed: bool
    ) -> None:
        """Keep ``_first_code``, the file's first key or header, after a splice."""
        code = next((s for s in new if s.kind in CODE), None)
        if removed:  # nothing above the splice is code: the first is in it or below it
            while code is None and after is not None:
                code, after = (after if after.kind in CODE else None), after.next
            self._first_code = code
        elif code is not None and (self._first_code is None or code.order < self._first_code.order):
            self._first_code = code

    def _under(self, table: Path, prev: Statement | None) -> bool:
        """Whether an array of tables declared at or above ``prev`` holds ``table``."""
        if prev is None:
            return False
        return any(
            array.order <= prev.order
            for end in range(1, len(table))
            for array in self._arrays.get(table[:end], ())
        )

    def _link(self, prev: Statement | None, new: list[Statement], after: Statement | None) -> None:
        """Chain ``new`` between ``prev`` and ``after`` (the file's ends for ``None``)."""
        chain = [prev, *new, after]
        for above, below in zip(chain, chain[1:], strict=False):
            if above is not None:
                above.next = below
            if below is not None:
                below.prev = above
        if prev is None:
            self.first = new[0] if new else after
        if after is None:
            self.last = new[-1] if new else prev

    def _number(
        self, prev: Statement | None, new: list[Statement], after: Statement | None
    ) -> None:
        """Number ``new`` inside the gap between ``prev`` and ``after``."""
        low = prev.order if prev is not None else 0
        high = after.order if after is not None else low + _GAP * (len(new) + 1)
        step = min((high - low) // (len(new) + 1), _STEP)
        if step == 0:  # the gap ran out
            self._renumber()
            return
        for number, statement in enumerate(new, 1):
            statement.order = low + number * step

    def _renumber(self) -> None:
        """Number every statement again, a gap apart."""
        for number, statement in enumerate(self, 1):
            statement.order = number * _GAP

    def _index(self, statement: Statement, change: int) -> None:
        """Add the statement to the indexes (``change`` 1) or take it out of them (-1)."""
        if statement.kind == "keyval":
            path = statement.path
            _group(self._keyvals, path, statement, change)
            for end in range(len(statement.table) + 1, len(path) + 1):
                _group(self._crossing, path[:end], statement, change)
            _count(self._keys_under, path, change)
        elif statement.kind in HEADERS:
            groups = self._headers if statement.kind == "header" else self._arrays
            _group(groups, statement.table, statement, change)
            _count(self._headers_under, statement.table, change)


def _order(statement: Statement) -> int:
    """Where the statement is in the file (for ``min`` and ``max``)."""
    return statement.order


def _first(group) -> Statement | None:
    """The statement of ``group`` nearest the start of the file."""
    return min(group, key=_order, default=None)


def _group(groups: dict[Path, Group], key: Path, statement: Statement, change: int) -> None:
    """Add the statement to ``groups[key]`` (``change`` 1) or take it out (-1)."""
    if change > 0:
        groups.setdefault(key, {})[statement] = None
        return
    group = groups[key]
    del group[statement]
    if not group:
        del groups[key]


def _count(counts: dict[Path, int], path: Path, change: int) -> None:
    """Count ``path`` under each of its prefixes (the empty one too)."""
    for end in range(len(path) + 1):
        prefix = path[:end]
        left = counts.get(prefix, 0) + change
        if left:
            counts[prefix] = left
        else:
            del counts[prefix]


def _offset(prev: Statement | None) -> int:
    """Where the text after ``prev`` starts."""
    offset = 0
    while prev is not None:
        offset += len(prev.text)
        prev = prev.prev
    return offset


def _rest(statement: Statement | None) -> str:
    """The text from ``statement`` to the end of the file."""
    parts = []
    while statement is not None:
        parts.append(statement.text)
        statement = statement.next
    return "".join(parts)
