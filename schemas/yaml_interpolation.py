"""``${...}`` interpolations of a Forge app config, resolved from the file as OmegaConf resolves them.

A whole-value reference (``${local_batch_size}``) takes the target's value and type; a reference
inside a string (``hf://${model}``) its text; ``${sum:${a},${b}}`` calls the resolver Forge
registers itself (``forge/util/config.py``). Anything else (``${oc.env:USER}``, a key whose value is
``???``, given on Forge's command line, a block taken whole that holds interpolations of its own)
is left unresolved: the caller says so and does not
check the value. A reference to a key the file does not have, or one that leads back to itself
(``${a}`` → ``${b}`` → ``${a}``), is :class:`BrokenReference`: OmegaConf refuses it when the app
reads the value, so the caller reports it as an error; so is a string whose text would grow past
:data:`MAX_TEXT` characters (``too-long``). Each key is resolved once per call, so references
that repeat references cost time in proportion to the file, not to the text they would build.
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
MAX_TEXT = 1 << 16
"""The most characters a resolved string may hold: references that repeat references
(``a: ${b}${b}``, ``b: ${c}${c}``, ...) double it at each step, and no setting takes more."""


class BrokenReference(Exception):
    """A reference OmegaConf refuses: to a key the file does not have (``missing``), or one
    that leads back to a key it came from (``cycle``); or a string that would grow past
    :data:`MAX_TEXT` (``too-long``). ``chain`` is the references followed, as written
    (``("a", "b", "a")``)."""

    def __init__(self, kind: str, chain: tuple[str, ...]) -> None:
        super().__init__(kind)
        self.kind, self.chain = kind, chain


Unresolved = tuple[tuple, str, "BrokenReference | None"]
"""A value left unresolved: its path, the value as written, and why when OmegaConf would
refuse it (``None``: only Forge can compute it)."""


def resolve(value: Any, whole: dict) -> tuple[Any, bool]:
    """``value`` with its interpolations resolved from ``whole`` (the file), and whether all
    were; :class:`BrokenReference` when one names no key or leads back to itself."""
    return _resolve(value, whole, chain=(), memo={})


def resolve_tree(
    tree: dict | list, whole: dict, path: tuple = (), *, memo: dict | None = None
) -> list[Unresolved]:
    """Resolve the interpolations of every string in ``tree`` from ``whole``, in place; each
    value that cannot be resolved is taken out of a mapping (left in a list) and returned with
    its path and, for a broken reference, why (:data:`Unresolved`), in order."""
    memo = {} if memo is None else memo
    unresolved: list[Unresolved] = []
    items = tree.items() if isinstance(tree, dict) else enumerate(tree)
    for key, value in list(items):
        here = (*path, key)
        if isinstance(value, dict | list):
            unresolved += resolve_tree(value, whole, here, memo=memo)
        elif isinstance(value, str) and "${" in value:
            try:
                resolved, ok = _resolve(value, whole, chain=(), memo=memo)
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


def _resolve(value: Any, whole: dict, *, chain: tuple[str, ...], memo: dict) -> tuple[Any, bool]:
    """``value`` with its ``${a.b}`` references replaced as OmegaConf does (a whole-string
    reference keeps the target's type, one inside a string becomes its text); False when a
    reference is one only Forge computes. ``chain``: the references followed to get here;
    ``memo``: the keys resolved so far, to a value that is not a block."""
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
        return _call(call.group(1), call.group(2), whole, chain=chain, memo=memo)
    whole_match = _REFERENCE.fullmatch(value)
    if whole_match:
        return _follow(whole_match.group(1), whole, chain=chain, memo=memo)
    parts, last, size = [], 0, 0
    for match in _REFERENCE.finditer(value):
        target, ok = _follow(match.group(1), whole, chain=chain, memo=memo)
        if not ok or isinstance(target, dict | list):
            return value, False
        parts += [value[last : match.start()], str(target)]
        size += match.start() - last + len(parts[-1])
        if size > MAX_TEXT:
            raise BrokenReference("too-long", (*chain, match.group(1)))
        last = match.end()
    text = "".join(parts) + value[last:]
    return (text, True) if "${" not in text else (value, False)


def _follow(dotted: str, whole: dict, *, chain: tuple[str, ...], memo: dict) -> tuple[Any, bool]:
    """The resolved value of the key ``dotted`` names; :class:`BrokenReference` when the file
    has no such key or the key is one the chain came through."""
    here = (*chain, dotted)
    if dotted in chain:
        raise BrokenReference("cycle", here)
    if dotted in memo:  # resolved before, without a cycle: the same from any chain
        return memo[dotted], True
    target, ok = _lookup(whole, dotted)
    if not ok:
        raise BrokenReference("missing", here)
    if target == MISSING:  # a value the app's command line gives: only Forge knows it
        return target, False
    resolved, ok = _resolve(target, whole, chain=here, memo=memo)
    if ok and not isinstance(resolved, dict | list):  # a block is copied afresh for each use
        memo[dotted] = resolved
    return resolved, ok


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


def _call(
    name: str, arguments: str, whole: dict, *, chain: tuple[str, ...], memo: dict
) -> tuple[Any, bool]:
    """A resolver Forge registers, over arguments that are numbers or plain references."""
    values = []
    for argument in arguments.split(","):
        argument = argument.strip()
        if _REFERENCE.fullmatch(argument):
            value, ok = _resolve(argument, whole, chain=chain, memo=memo)
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
