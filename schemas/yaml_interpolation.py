"""``${...}`` interpolations of a Forge app config, resolved from the file as OmegaConf resolves them.

A whole-value reference (``${local_batch_size}``) takes the target's value and type; a reference
inside a string (``hf://${model}``) its text; ``${sum:${a},${b}}`` calls the resolver Forge
registers itself (``forge/util/config.py``). Anything else (``${oc.env:USER}``, a key whose value is
``???``, given on Forge's command line, a block taken whole that holds interpolations of its own)
is left unresolved: the caller says so and does not
check the value. A reference to a key the file does not have, or one that leads back to itself
(``${a}`` → ``${b}`` → ``${a}``), is :class:`BrokenReference`: OmegaConf refuses it when the app
reads the value, so the caller reports it as an error.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

_REFERENCE = re.compile(r"\$\{([A-Za-z_][\w\-]*(?:\.[\w\-]+)*)\}")
# Resolvers Forge registers itself (forge/util/config.py): their arguments must be numbers.
_RESOLVERS = {"sum": lambda *args: sum(args)}
_CALL = re.compile(r"\$\{([A-Za-z_]\w*):((?:[^{}]|\$\{[\w.\-]+\})*)\}")
MISSING = "???"
"""OmegaConf's mandatory value: the key is there, its value given later (Forge's command line)."""
_MAX_HOPS = 32  # interpolations that lead to interpolations, as far as a real file goes


class BrokenReference(Exception):
    """A reference OmegaConf refuses: to a key the file does not have (``missing``), or one
    that leads back to a key it came from (``cycle``). ``chain`` is the references followed,
    as written (``("a", "b", "a")``)."""

    def __init__(self, kind: str, chain: tuple[str, ...]) -> None:
        super().__init__(kind)
        self.kind, self.chain = kind, chain


Unresolved = tuple[tuple, str, "BrokenReference | None"]
"""A value left unresolved: its path, the value as written, and why when OmegaConf would
refuse it (``None``: only Forge can compute it)."""


def resolve(value: Any, whole: dict) -> tuple[Any, bool]:
    """``value`` with its interpolations resolved from ``whole`` (the file), and whether all
    were; :class:`BrokenReference` when one names no key or leads back to itself."""
    return _resolve(value, whole, chain=())


def resolve_tree(tree: dict | list, whole: dict, path: tuple = ()) -> list[Unresolved]:
    """Resolve the interpolations of every string in ``tree`` from ``whole``, in place; each
    value that cannot be resolved is taken out of a mapping (left in a list) and returned with
    its path and, for a broken reference, why (:data:`Unresolved`), in order."""
    unresolved: list[Unresolved] = []
    items = tree.items() if isinstance(tree, dict) else enumerate(tree)
    for key, value in list(items):
        here = (*path, key)
        if isinstance(value, dict | list):
            unresolved += resolve_tree(value, whole, here)
        elif isinstance(value, str) and "${" in value:
            try:
                resolved, ok = resolve(value, whole)
                broken = None
            except BrokenReference as error:
                ok, broken = False, error
            if ok:
                tree[key] = resolved
                continue
            unresolved.append((here, value, broken))
            if isinstance(tree, dict):
                del tree[key]
    return unresolved


def _resolve(value: Any, whole: dict, *, chain: tuple[str, ...]) -> tuple[Any, bool]:
    """``value`` with its ``${a.b}`` references replaced as OmegaConf does (a whole-string
    reference keeps the target's type, one inside a string becomes its text); False when a
    reference is one only Forge computes. ``chain``: the references followed to get here."""
    if isinstance(value, dict | list):
        # A block taken whole (``model: ${shared_model}``): a copy, when nothing in it is to be
        # resolved in turn (which could refer back to the block itself).
        held = holds_string(value, lambda text: "${" in text)
        return (copy.deepcopy(value), True) if not held else (value, False)
    if not isinstance(value, str) or "${" not in value:
        return value, True
    if len(chain) > _MAX_HOPS:
        return value, False
    call = _CALL.fullmatch(value)
    if call and call.group(1) in _RESOLVERS:
        return _call(call.group(1), call.group(2), whole, chain=chain)
    whole_match = _REFERENCE.fullmatch(value)
    if whole_match:
        return _follow(whole_match.group(1), whole, chain=chain)
    parts, last = [], 0
    for match in _REFERENCE.finditer(value):
        target, ok = _follow(match.group(1), whole, chain=chain)
        if not ok or isinstance(target, dict | list):
            return value, False
        parts += [value[last : match.start()], str(target)]
        last = match.end()
    text = "".join(parts) + value[last:]
    return (text, True) if "${" not in text else (value, False)


def _follow(dotted: str, whole: dict, *, chain: tuple[str, ...]) -> tuple[Any, bool]:
    """The resolved value of the key ``dotted`` names; :class:`BrokenReference` when the file
    has no such key or the key is one the chain came through."""
    here = (*chain, dotted)
    if dotted in chain:
        raise BrokenReference("cycle", here)
    target, ok = _lookup(whole, dotted)
    if not ok:
        raise BrokenReference("missing", here)
    if target == MISSING:  # a value the app's command line gives: only Forge knows it
        return target, False
    return _resolve(target, whole, chain=here)


def holds_string(tree: Any, test: Callable[[str], bool]) -> bool:
    """Whether a string of ``tree`` (its values, at any depth) passes ``test``. Walked without
    recursion: ``tree`` is finite (aliases were counted before it was built) but may be deep."""
    stack = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str) and test(item):
            return True
    return False


def _call(name: str, arguments: str, whole: dict, *, chain: tuple[str, ...]) -> tuple[Any, bool]:
    """A resolver Forge registers, over arguments that are numbers or plain references."""
    values = []
    for argument in arguments.split(","):
        argument = argument.strip()
        if _REFERENCE.fullmatch(argument):
            value, ok = _resolve(argument, whole, chain=chain)
        else:
            value, ok = _number(argument)
        if not ok or isinstance(value, bool) or not isinstance(value, int | float):
            return f"${{{name}:{arguments}}}", False
        values.append(value)
    return _RESOLVERS[name](*values), True


def _number(text: str) -> tuple[Any, bool]:
    """A literal argument of a resolver call, read as OmegaConf's grammar reads numbers."""
    for kind in (int, float):
        try:
            return kind(text), True
        except ValueError:
            continue
    return None, False


def _lookup(whole: dict, dotted: str) -> tuple[Any, bool]:
    """The value at ``a.b.c`` in the file, and whether there is one."""
    node: Any = whole
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None, False
        node = node[part]
    return node, True
