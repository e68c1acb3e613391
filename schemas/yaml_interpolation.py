"""``${...}`` interpolations of a Forge app config, resolved from the file as OmegaConf resolves them.

A whole-value reference (``${local_batch_size}``) takes the target's value and type; a reference
inside a string (``hf://${model}``) its text; ``${sum:${a},${b}}`` calls the resolver Forge
registers itself (``forge/util/config.py``). Anything else (``${oc.env:USER}``, a key given on
Forge's command line) is left unresolved: the caller says so and does not check the value.
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
_MAX_HOPS = 32  # interpolations that lead to interpolations, as far as a real file goes


def resolve(value: Any, whole: dict) -> tuple[Any, bool]:
    """``value`` with its interpolations resolved from ``whole`` (the file), and whether all were."""
    return _resolve(value, whole, hops=0)


def resolve_tree(tree: dict | list, whole: dict, path: tuple = ()) -> list[tuple[tuple, str]]:
    """Resolve the interpolations of every string in ``tree`` from ``whole``, in place; each
    value that cannot be resolved is taken out of a mapping (left in a list) and returned with
    its path, in order."""
    unresolved = []
    items = tree.items() if isinstance(tree, dict) else enumerate(tree)
    for key, value in list(items):
        here = (*path, key)
        if isinstance(value, dict | list):
            unresolved += resolve_tree(value, whole, here)
        elif isinstance(value, str) and "${" in value:
            resolved, ok = resolve(value, whole)
            if ok:
                tree[key] = resolved
                continue
            unresolved.append((here, value))
            if isinstance(tree, dict):
                del tree[key]
    return unresolved


def _resolve(value: Any, whole: dict, *, hops: int) -> tuple[Any, bool]:
    """``value`` with its ``${a.b}`` references replaced as OmegaConf does (a whole-string
    reference keeps the target's type, one inside a string becomes its text); False when a
    reference is not a plain path to a value of this file."""
    if isinstance(value, dict | list):
        # A block taken whole (``model: ${shared_model}``): a copy, when nothing in it is to be
        # resolved in turn (which could refer back to the block itself).
        held = holds_string(value, lambda text: "${" in text)
        return (copy.deepcopy(value), True) if not held else (value, False)
    if not isinstance(value, str) or "${" not in value:
        return value, True
    if hops > _MAX_HOPS:
        return value, False
    call = _CALL.fullmatch(value)
    if call and call.group(1) in _RESOLVERS:
        return _call(call.group(1), call.group(2), whole, hops=hops)
    whole_match = _REFERENCE.fullmatch(value)
    if whole_match:
        target, ok = _lookup(whole, whole_match.group(1))
        return _resolve(target, whole, hops=hops + 1) if ok else (value, False)
    parts, last = [], 0
    for match in _REFERENCE.finditer(value):
        target, ok = _lookup(whole, match.group(1))
        target, ok = _resolve(target, whole, hops=hops + 1) if ok else (target, False)
        if not ok or isinstance(target, dict | list):
            return value, False
        parts += [value[last : match.start()], str(target)]
        last = match.end()
    text = "".join(parts) + value[last:]
    return (text, True) if "${" not in text else (value, False)


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


def _call(name: str, arguments: str, whole: dict, *, hops: int) -> tuple[Any, bool]:
    """A resolver Forge registers, over arguments that are numbers or plain references."""
    values = []
    for argument in arguments.split(","):
        argument = argument.strip()
        if _REFERENCE.fullmatch(argument):
            value, ok = _resolve(argument, whole, hops=hops + 1)
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
