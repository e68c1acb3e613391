"""Which built-in extension a section or key the file did not declare belongs to.

torchtitan's experiments and models add sections and keys through their custom config modules
(vlm's ``[data]``, flux's ``[encoder]`` and ``training.img_size``). A file that writes one
without naming the module gets the hint to name it, but only when loading that extension would
make the file's keys there valid: a fork's own ``[data]`` (``dataset_folder``, ``augment``,
``patch_size`` for its own patches) shares a name or a key with vlm's and is still not vlm's,
and so is an ``[inference]`` for text generation that happens to have a ``prompts_path``. So
the extension must declare the section and the keys the file writes in it that titan does not
know, all of them or nearly all (one in five may be the fork's own, or misspelt: once the
extension is named, those are reported one by one).
"""

from __future__ import annotations

import functools
from typing import Any

from titan.schemas.misspelling import closest
from titan.schemas.spec import schema_paths


@functools.cache
def extension_index() -> dict[str, list[str]]:
    """Dotted path -> short names of the built-in extensions that add it."""
    from titan.schemas import builtin_extensions

    index: dict[str, list[str]] = {}
    for short in sorted(set(builtin_extensions.KNOWN_EXTENSIONS.values())):
        spec = builtin_extensions.known_extension(short)
        if spec is None:
            continue
        for path in schema_paths(spec.root):
            if path not in _base_paths():
                index.setdefault(path, []).append(short)
    return index


@functools.cache
def _base_paths() -> dict[str, bool]:
    """Every dotted path of v0.2.2's own schema (no extension merged)."""
    from titan.schemas.legacy_spec import LEGACY_SPEC

    return schema_paths(LEGACY_SPEC)


def extension_owner(dotted: str, value: Any = None, document: dict | None = None) -> str | None:
    """A hint naming the built-in extension that defines ``dotted``, if one does and it
    declares (nearly) every key the file writes there: the keys of ``value`` for a table, the
    unknown keys of the section in ``document`` for a key of a section titan has."""
    owners = extension_index().get(dotted)
    if not owners:
        return None
    section, written = _written_there(dotted, value, document)
    if written:
        owners = [short for short in owners if _declares_nearly_all(short, section, written)]
        if not owners:
            return None
    from titan.schemas.builtin_extensions import KNOWN_EXTENSIONS

    modules = {short: module for module, short in KNOWN_EXTENSIONS.items()}
    first = owners[0]
    return (
        f"`{dotted}` is added by the {first} extension: set "
        f'`[job] custom_config_module = "{modules.get(first, first)}"` or pass `--extension {first}`'
    )


def _written_there(dotted: str, value: Any, document: dict | None) -> tuple[str, list[str]]:
    """The section the extension must declare and the keys the file writes in it that titan
    does not know (none to compare without a document: a command-line flag)."""
    if isinstance(value, dict):
        return dotted, list(value)
    section = dotted.rpartition(".")[0]
    node: Any = document
    for part in section.split(".") if section else ():
        node = node.get(part) if isinstance(node, dict) else None
    if not section or not isinstance(node, dict):
        return section, []
    base = [p.rsplit(".", 1)[-1] for p in _base_paths() if p.rpartition(".")[0] == section]
    # A key of titan's misspelt, or written in the wrong section, is reported as that key:
    # it is no key of the fork's.
    return section, [
        key
        for key in node
        if f"{section}.{key}" not in _base_paths()
        and key not in _base_leaves()
        and not closest(str(key), base)
    ]


@functools.cache
def _base_leaves() -> frozenset[str]:
    """The key names v0.2.2's own schema has in any section."""
    return frozenset(p.rsplit(".", 1)[-1] for p in _base_paths())


def _declares_nearly_all(short: str, section: str, keys: list[str]) -> bool:
    """Whether extension ``short`` declares ``section`` with all of ``keys`` but one in five
    (a key that misspells one of its fields counts as its)."""
    from titan.schemas import builtin_extensions

    spec = builtin_extensions.known_extension(short)
    paths = schema_paths(spec.root) if spec is not None else {}
    if section not in paths:
        return False
    fields = [p.rsplit(".", 1)[-1] for p in paths if p.rpartition(".")[0] == section]
    theirs = [key for key in keys if f"{section}.{key}" in paths or closest(str(key), fields)]
    return bool(theirs) and len(keys) - len(theirs) <= len(keys) // 5
