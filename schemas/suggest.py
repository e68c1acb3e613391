"""Hints for unknown keys: moved keys, keys in the wrong section, typos, extension sections.

The search runs over the whole dotted-key tree of the (merged) schema, so a key written in the
wrong section is found as well as a misspelt one.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from schemas._frozen import Frozen, _set
from schemas.spec import SectionSpec

if TYPE_CHECKING:
    from schemas import eras


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


_NO_VALUE: Any = object()


def suggest(
    parts: tuple[str, ...],
    paths: dict[str, bool],
    *,
    is_table: bool,
    value: Any = _NO_VALUE,
    document: dict | None = None,
) -> Suggestion:
    """A hint for the unknown key ``parts`` (the dotted path split), given the schema's paths.

    With the key's ``value`` (and the whole parsed ``document``), a key from an older torchtitan
    gets the exact v0.2.2 settings its value becomes (``schemas.eras``); without (a command-line
    flag), where it lives now."""
    moved = _moved(parts, is_table=is_table, value=value, document=document)
    if moved is not None:
        return moved
    dotted = ".".join(parts)
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
    # Nothing in torchtitan is close: most likely a fork's own setting, which the project can
    # declare once instead of seeing it rejected in every file (schemas.project).
    return Suggestion("unknown-key", DECLARE_HINT)


DECLARE_HINT = (
    "a fork's own setting? declare it: titan-migrate --scaffold-extension FILE.toml > "
    'fork_ext.py, then [tool.titan] extensions = ["fork_ext.py"] in pyproject.toml'
)
"""The hint of an unknown key or section that nothing known is close to (the scaffold skips
every other unknown key: those are typos, moved keys or a built-in extension's)."""


def _join(parent: str, name: str) -> str:
    return f"{parent}.{name}" if parent else name


def _moved(
    parts: tuple[str, ...], *, is_table: bool, value: Any, document: dict | None
) -> Suggestion | None:
    """The moved-key hint for a key or table of an older torchtitan, if ``parts`` is one."""
    from schemas import eras  # only files with unknown keys get here

    if is_table and eras.is_old_table(parts):
        return Suggestion("moved-key", _old_table_hint(parts))
    if value is _NO_VALUE:
        found = _flag_hint(parts)
        return None if found is None else Suggestion("moved-key", found)
    step = eras.translate(parts, value, document)
    if step is not None:
        return Suggestion("moved-key", _step_hint(step))
    if eras.is_old_table(parts[:-1]):
        return Suggestion("unknown-key", _stray_hint(parts))
    return None


def _step_hint(step: eras.Step) -> str:
    """An old key's hint: exactly which v0.2.2 settings its value becomes, or why none."""
    from schemas import eras

    if step.kind == "unportable":
        return f"cannot be carried: {step.why}; {step.era}; delete it (titan-migrate drops it)"
    wrong = _ill_typed(step)
    if wrong:  # the setting it becomes would be rejected too: say what to write instead
        return f"{eras.action(step)}, but {wrong}; {step.why}; {step.era}"
    return (
        f"{eras.action(step)}; {step.why}; {step.era}; "
        "`titan-validate --fix` rewrites it and titan-migrate carries it"
    )


def _ill_typed(step: eras.Step) -> str | None:
    """Why a value the step writes is not valid at its v0.2.2 key, if one is not."""
    from schemas import typecheck

    for new, value in step.writes:
        section: Any = _legacy()
        for part in new:
            field = section.field(part) if isinstance(section, SectionSpec) else None
            if field is None:
                break
            section = field.annotation
        else:
            if not typecheck.matches(value, section):
                return (
                    f"`{'.'.join(new)}` must be {typecheck.type_name(section)}, "
                    f"not {typecheck.value_name(value)}"
                )
    return None


def _flag_hint(parts: tuple[str, ...]) -> str | None:
    """Where an old key lives now, without a value to translate (a command-line flag)."""
    from schemas import eras

    rule = eras.rule_for(parts)
    if rule is None:
        return None
    if rule.how == "never":
        return f"torchtitan never had `{'.'.join(parts)}`: {rule.why}"
    where = eras.destination(parts)
    return f"{f'now `{where}`' if where else 'removed'}; {rule.why}; {rule.era}"


def _old_table_hint(parts: tuple[str, ...]) -> str:
    """An empty table only older eras had (a table with keys has each key reported)."""
    from schemas import eras
    from schemas.moved_keys import RULES

    dotted = ".".join(parts)
    homes = sorted(
        {
            eras.destination(tuple(rule.old.split(".")))
            for rule in RULES
            if rule.to and rule.old.startswith(dotted + ".")
        }
    )
    where = ", ".join(f"`{home}`" for home in homes[:3]) + (", ..." if len(homes) > 3 else "")
    return f"[{dotted}] is from an older torchtitan; its keys now live at {where}; delete it"


def _stray_hint(parts: tuple[str, ...]) -> str:
    """A key an old table never had: a near miss of one it had, or a plain delete."""
    from schemas import eras
    from schemas.moved_keys import RULES

    table = ".".join(parts[:-1])
    names = [rule.old.rsplit(".", 1)[-1] for rule in RULES if rule.old.startswith(table + ".")]
    close = _close(parts[-1], names)
    if close:
        moved = eras.destination((*parts[:-1], close[0]))
        return f"did you mean `{table}.{close[0]}`? (now `{moved}`)"
    return f"[{table}] is from an older torchtitan and never had `{parts[-1]}`; delete it"


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
