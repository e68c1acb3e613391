"""Import statements: their lines, and their order and grouping as ruff's isort rule wants."""

from __future__ import annotations

import sys

from titan.migrate.codegen.pyfmt.nodes import Import, ImportFrom, ImportGroup
from titan.migrate.codegen.pyfmt.text import INDENT, LINE_WIDTH, text_width

# ----------------------------------------------------------------------------- imports


def import_lines(node: Import | ImportFrom, indent: int) -> list[str]:
    """``from m import a, b`` on one line if it fits, else one name per line (isort's style,
    which ``ruff format`` keeps)."""
    pad = " " * indent
    if isinstance(node, Import):
        return [f"{pad}import {node.module}"]
    line = f"{pad}from {node.module} import {', '.join(node.names)}"
    if text_width(line) <= LINE_WIDTH:
        return [line]
    names = [f"{pad}{' ' * INDENT}{name}," for name in node.names]
    return [f"{pad}from {node.module} import (", *names, f"{pad})"]


class _Natural(str):
    """A string that sorts in natural order (``x2`` before ``x10``), like the ``natord`` crate
    ruff's isort uses."""

    __slots__ = ()

    def __lt__(self, other: str) -> bool:
        return _natural_compare(self, other) < 0

    def __gt__(self, other: str) -> bool:
        return _natural_compare(self, other) > 0


def _natural_compare(left: str, right: str) -> int:
    """``natord::compare``: digit runs compare as numbers (left-aligned if one starts with 0),
    other characters by code point. Returns -1, 0 or 1."""
    i = j = 0
    while i < len(left) and j < len(right):
        a, b = left[i], right[j]
        if a.isascii() and a.isdigit() and b.isascii() and b.isdigit():
            i_end, j_end = _digits_end(left, i), _digits_end(right, j)
            if a == "0" or b == "0":
                order = _compare_left_aligned(left[i:i_end], right[j:j_end])
            else:
                order = _compare_right_aligned(left[i:i_end], right[j:j_end])
            if order:
                return order
            i, j = i_end, j_end
        elif a != b:
            return -1 if a < b else 1
        else:
            i, j = i + 1, j + 1
    return (i < len(left)) - (j < len(right))


def _digits_end(text: str, start: int) -> int:
    """The end of the run of ASCII digits starting at ``start``."""
    end = start
    while end < len(text) and text[end].isascii() and text[end].isdigit():
        end += 1
    return end


def _compare_right_aligned(left: str, right: str) -> int:
    """Numbers without leading zeros: the longer run wins, then the first differing digit."""
    if len(left) != len(right):
        return -1 if len(left) < len(right) else 1
    return (left > right) - (left < right)


def _compare_left_aligned(left: str, right: str) -> int:
    """Numbers with a leading zero: the first differing digit wins, then the longer run."""
    for a, b in zip(left, right, strict=False):
        if a != b:
            return -1 if a < b else 1
    return (len(left) > len(right)) - (len(left) < len(right))


def _member_key(name: str, alias: str | None) -> tuple:
    """ruff's ``MemberKey`` with ``order-by-type``: CONSTANTS, then Classes, then the rest,
    each case-insensitively in natural order, ties broken by case and alias."""
    if len(name.encode()) > 1 and name.isupper():
        member_type = 0
    elif name[:1].isupper():
        member_type = 1
    else:
        member_type = 2
    alias_key = () if alias is None else (_Natural(alias),)
    return (member_type, _Natural(name.lower()), _Natural(name), alias_key)


def _module_key(module: str, alias: str | None, first_member: tuple | None) -> tuple:
    """ruff's ``ModuleKey``: relative imports from the furthest (``..``) to the closest (``.``),
    then the module case-insensitively in natural order, then the first member and alias."""
    name = module.lstrip(".")
    level = len(module) - len(name)
    name_key = (_Natural(name.lower()), _Natural(name)) if name else ()
    alias_key = () if alias is None else (_Natural(alias),)
    return (-level, name_key, first_member or (), alias_key)


def _section(module: str, first_party: frozenset[str]) -> int:
    """isort's section: 0 future, 1 standard library, 2 third party, 3 first party, 4 local."""
    if module.startswith("."):
        return 4
    top = module.split(".")[0]
    if top == "__future__":
        return 0
    if top in first_party:
        return 3
    return 1 if top in sys.stdlib_module_names else 2


def sort_imports(imports: object, first_party: object = ()) -> list[ImportGroup]:
    """Merge, split and order imports the way ruff's isort (``I001``) wants them.

    Sections (one :class:`ImportGroup` each, empty ones left out): ``__future__``, the standard
    library, third party, first party (top-level names in ``first_party``; ruff finds them as
    folders of the project, so pass what your target tree has), relative imports. In a section,
    ``import x`` lines come first, then ``from`` imports by module; names of one module are
    merged into one statement, except ``x as y`` names, which get their own statement
    (ruff's default ``combine-as-imports = false``). Duplicates are dropped.
    """
    first_party = frozenset(first_party)
    straight, members = _collect_imports(imports)
    sections: dict[int, list[tuple[int, tuple, Import | ImportFrom]]] = {}
    for module, alias in straight:
        key = _module_key(module, alias, None)
        text = module if alias is None else f"{module} as {alias}"
        sections.setdefault(_section(module, first_party), []).append((0, key, Import(text)))
    for module, names in members.items():
        for statement in _from_statements(module, names):
            key = _module_key(module, None, _member_key(*statement[0]))
            texts = [name if alias is None else f"{name} as {alias}" for name, alias in statement]
            entry = (1, key, ImportFrom(module, texts))
            sections.setdefault(_section(module, first_party), []).append(entry)
    return [
        ImportGroup([node for _, _, node in sorted(sections[section], key=lambda e: e[:2])])
        for section in sorted(sections)
    ]


def _collect_imports(imports: object) -> tuple[set, dict[str, set]]:
    """``(module, alias)`` of every ``import`` and ``module -> {(name, alias)}`` of every
    ``from`` import, duplicates merged."""
    straight: set[tuple[str, str | None]] = set()
    members: dict[str, set[tuple[str, str | None]]] = {}
    for node in imports:
        for item in node.imports if isinstance(node, ImportGroup) else [node]:
            if isinstance(item, Import):
                module, _, alias = item.module.partition(" as ")
                straight.add((module, alias or None))
            elif isinstance(item, ImportFrom):
                for name in item.names:
                    member, _, alias = name.partition(" as ")
                    members.setdefault(item.module, set()).add((member, alias or None))
            else:
                raise TypeError(f"not an import: {item!r}")
    return straight, members


def _from_statements(module: str, names: set) -> list[list[tuple[str, str | None]]]:
    """The ``from module import`` statements for ``names``: the plain names together, each
    ``x as y`` alone, names sorted by :func:`_member_key`."""
    ordered = sorted(names, key=lambda name: _member_key(*name))
    plain = [name for name in ordered if name[1] is None]
    return ([plain] if plain else []) + [[name] for name in ordered if name[1] is not None]
