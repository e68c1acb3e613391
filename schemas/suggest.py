"""Hints for unknown keys: moved keys, keys in the wrong section, typos, extension sections.

The search runs over the whole dotted-key tree of the (merged) schema, so a key written in the
wrong section is found as well as a misspelt one.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from schemas._frozen import Frozen, _set
from schemas.spec import SectionSpec

if TYPE_CHECKING:
    from schemas import moved_keys


class Suggestion(Frozen):
    """What titan can say about an unknown key."""

    __slots__ = ("code", "hint")
    __match_args__ = ("code", "hint")

    code: str
    """``moved-key`` when the key is known from an older torchtitan, else ``unknown-key``."""
    hint: str | None
    """The sentence shown to the user, or ``None`` when nothing close exists."""

    def __init__(self, code: str, hint: str | None) -> None:
        _set(self, "code", code)
        _set(self, "hint", hint)


def schema_paths(spec: SectionSpec, prefix: str = "") -> dict[str, bool]:
    """Every dotted path of the schema, mapped to whether it is a section."""
    paths: dict[str, bool] = {}
    for field in spec.fields:
        path = prefix + field.name
        is_section = isinstance(field.annotation, SectionSpec)
        paths[path] = is_section
        if is_section:
            paths.update(schema_paths(field.annotation, path + "."))
    return paths


def _close(word: str, candidates: list[str], cutoff: float = 0.75) -> list[str]:
    import difflib  # only files with unknown keys get here

    return difflib.get_close_matches(word, candidates, n=3, cutoff=cutoff)


def suggest(parts: tuple[str, ...], paths: dict[str, bool], *, is_table: bool) -> Suggestion:
    """A hint for the unknown key ``parts`` (the dotted path split), given the schema's paths."""
    from schemas import moved_keys  # only files with unknown keys get here

    dotted = ".".join(parts)
    moved = moved_keys.lookup(dotted)
    if moved is not None and moved_keys.new_location(dotted) != dotted:
        return Suggestion("moved-key", _moved_hint(dotted, moved))
    # Exact keys of a known extension the file did not declare (flux's [encoder], ft's keys).
    owner = extension_owner(dotted)
    if owner is not None:
        return Suggestion("unknown-key", owner)

    name, parent = parts[-1], ".".join(parts[:-1])
    siblings = [p.rsplit(".", 1)[-1] for p in paths if p.rpartition(".")[0] == parent]
    close = _close(name, siblings)
    if close:
        return Suggestion("unknown-key", f"did you mean `{_join(parent, close[0])}`?")

    # The same name elsewhere in the tree: a key written in the wrong section.
    elsewhere = sorted(p for p in paths if p.rsplit(".", 1)[-1] == name and paths[p] == is_table)
    if elsewhere:
        spots = " or ".join(f"`{p}`" for p in elsewhere[:3])
        where = "[" + parent + "]" if parent else "the top level"
        return Suggestion(
            "unknown-key", f"`{name}` does not belong in {where}; did you mean {spots}?"
        )

    # A near-miss anywhere in the tree (typo in the wrong section too).
    leaves = {p.rsplit(".", 1)[-1]: p for p in paths if paths[p] == is_table}
    close = _close(name, list(leaves), cutoff=0.8)
    if close:
        return Suggestion("unknown-key", f"did you mean `{leaves[close[0]]}`?")
    if not parent:
        return Suggestion(
            "unknown-key", "sections are: " + ", ".join(p for p in paths if "." not in p)
        )
    return Suggestion("unknown-key", None)


def _join(parent: str, name: str) -> str:
    return f"{parent}.{name}" if parent else name


def _moved_hint(dotted: str, moved: moved_keys.MovedKey) -> str:
    from schemas import moved_keys

    target = moved_keys.new_location(dotted)
    if target is None:
        text = f"removed; {moved.era}"
    else:
        text = f"now `{target}`; {moved.era}"
    if moved.inverted:
        text += "; the meaning is inverted, so flip the value"
    if moved.note:
        text += f"; {moved.note}"
    return text


@functools.cache
def _extension_index() -> dict[str, list[str]]:
    """Dotted path -> short names of the built-in extensions that add it."""
    from schemas import builtin_extensions

    index: dict[str, list[str]] = {}
    base = schema_paths(_legacy())
    for short in sorted(set(builtin_extensions.KNOWN_EXTENSIONS.values())):
        spec = builtin_extensions.known_extension(short)
        if spec is None:
            continue
        for path in schema_paths(spec.root):
            if path not in base:
                index.setdefault(path, []).append(short)
    return index


def _legacy() -> SectionSpec:
    from schemas.legacy_spec import LEGACY_SPEC

    return LEGACY_SPEC


def extension_owner(dotted: str) -> str | None:
    """A hint naming the built-in extension that defines ``dotted``, if one does."""
    owners = _extension_index().get(dotted)
    if not owners:
        return None
    from schemas.builtin_extensions import KNOWN_EXTENSIONS

    modules = {short: module for module, short in KNOWN_EXTENSIONS.items()}
    first = owners[0]
    return (
        f"`{dotted}` is added by the {first} extension: set "
        f'`[job] custom_config_module = "{modules.get(first, first)}"` or pass `--extension {first}`'
    )
