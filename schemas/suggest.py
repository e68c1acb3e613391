"""Hints for unknown keys: moved keys, keys in the wrong section, typos, extension sections
(a value of the wrong type or outside its choices gets its hint from ``titan.schemas.value_hints``).

The search runs over the whole dotted-key tree of the (merged) schema, so a key written in the
wrong section is found as well as a misspelt one. A suggestion is made only where following it
helps: the name it offers is the one written, misspelt (``titan.schemas.misspelling``: a fork's
``muon_weight_decay`` is no misspelling of ``weight_decay``) or in another section; the key it
names takes the value written and is not in the file already; and a value it offers would
itself be accepted. tests/test_follow_suggestions.py applies them to mutated real TOMLs, and
tests/test_suggestion_precision.py checks that fork settings get none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from titan.schemas._frozen import Frozen, _set
from titan.schemas.extension_owners import extension_index, extension_owner
from titan.schemas.misspelling import closest
from titan.schemas.spec import SectionSpec

if TYPE_CHECKING:
    from titan.schemas import eras


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


def _either(found: list[str]) -> str:
    """``did you mean `a`?`` or, for equally close candidates, ``did you mean `a` or `b`?``"""
    return "did you mean " + " or ".join(f"`{name}`" for name in found[:3]) + "?"


_NO_VALUE: Any = object()


def suggest(
    parts: tuple[str, ...],
    paths: dict[str, bool],
    *,
    is_table: bool,
    value: Any = _NO_VALUE,
    document: dict | None = None,
    schema: SectionSpec | None = None,
) -> Suggestion:
    """A hint for the unknown key ``parts`` (the dotted path split), given the schema's paths.

    With the key's ``value`` (and the whole parsed ``document``), a key from an older torchtitan
    gets the exact v0.2.2 settings its value becomes (``titan.schemas.eras``); without (a command-line
    flag), where it lives now. With the ``schema`` too, a key is only suggested where its value
    has the right type: ``eps = 1e-8`` in [training] is ``optimizer.eps``, not
    ``training.steps``."""
    moved = _moved(parts, is_table=is_table, value=value, document=document)
    if moved is not None:
        return moved
    dotted = ".".join(parts)
    # Exact keys of a known extension the file did not declare (flux's [encoder], ft's keys).
    owner = extension_owner(dotted, value, document)
    if owner is not None:
        return Suggestion("unknown-key", owner)

    name, parent = parts[-1], ".".join(parts[:-1])

    def fits(path: str) -> bool:
        # A key or section the file already writes is not the one meant: following the hint
        # would write it twice (`[evaluation]` beside `[validation]` is a section of its own).
        return (
            paths[path] == is_table and _fits(path, value, schema) and not _written(document, path)
        )

    siblings = [p.rsplit(".", 1)[-1] for p in paths if p.rpartition(".")[0] == parent]
    twice = [
        s
        for s in closest(name, siblings)
        if _written(document, _join(parent, s)) and paths[_join(parent, s)] == is_table
    ]
    siblings = [s for s in siblings if fits(_join(parent, s))]
    close = closest(name, siblings)
    if close:
        return Suggestion("unknown-key", _either([_join(parent, c) for c in close]))
    if twice:  # a misspelt copy of a key the file sets: no other setting is meant
        return Suggestion("unknown-key", TWICE_HINT.format(key=_join(parent, twice[0])))

    # The same name elsewhere in the tree: a key written in the wrong section.
    elsewhere = _nearest(
        parts[:-1], sorted(p for p in paths if p.rsplit(".", 1)[-1] == name and fits(p))
    )
    if elsewhere:
        spots = " or ".join(f"`{p}`" for p in elsewhere[:3])
        where = "[" + parent + "]" if parent else "the top level"
        return Suggestion(
            "unknown-key", f"`{name}` does not belong in {where}; did you mean {spots}?"
        )

    # A near-miss anywhere in the tree (typo in the wrong section too).
    leaves: dict[str, list[str]] = {}
    for path in paths:
        if fits(path):
            leaves.setdefault(path.rsplit(".", 1)[-1], []).append(path)
    # Only for names of five characters or more: `type` in [job] is no typo of training.dtype.
    close = closest(name, list(leaves), cutoff=0.8) if len(name) >= 5 else []
    if close:
        return Suggestion("unknown-key", _either(sorted(p for c in close for p in leaves[c])))
    # Nothing in torchtitan is close: most likely a fork's own setting, which the project can
    # declare once instead of seeing it rejected in every file (titan.schemas.project), unless
    # the scaffold would refuse it.
    from titan.schemas.extension_fields import refused

    left_out = refused(parts, None if value is _NO_VALUE else value, known=len(parts) - 1)
    if left_out:
        return Suggestion("unknown-key", _refused_hint(left_out))
    return Suggestion("unknown-key", DECLARE_HINT)


def _refused_hint(left_out: list[tuple[str, str]]) -> str:
    """The hint of a fork's setting that ``--scaffold-extension`` cannot declare as written."""
    from titan.schemas.extension_fields import DATE

    (dotted, why), more = left_out[0], len(left_out) - 1
    also = f" (and {more} more key{'s' if more > 1 else ''} of it)" if more else ""
    change = "write the value as a string" if why == DATE else "rename it"
    return (
        f"{FORK_SETTING}titan-migrate --scaffold-extension cannot declare `{dotted}`{also}: {why}; "
        f"{change} in the fork's TOMLs and code, then declare it with --scaffold-extension"
    )


TWICE_HINT = "looks like a misspelling of `{key}`, which the file sets already: keep one of the two"
"""The hint of a misspelt key whose correct spelling the file also writes."""

FORK_SETTING = "a fork's own setting? "
"""How the hint of an unknown key that nothing known is close to begins (the scaffold declares
exactly those keys)."""

DECLARE_HINT = (
    f"{FORK_SETTING}declare it: titan-migrate --scaffold-extension FILE.toml > "
    'fork_ext.py, then [tool.titan] extensions = ["fork_ext.py"] in pyproject.toml'
)
"""The hint of an unknown key or section that nothing known is close to (the scaffold skips
every other unknown key: those are typos, moved keys or a built-in extension's)."""


def _fits(path: str, value: Any, schema: SectionSpec | None) -> bool:
    """Whether ``value`` would be accepted at the schema key ``path`` (True without a value or
    a schema to tell: a table, a command-line flag)."""
    if value is _NO_VALUE or schema is None or isinstance(value, dict):
        return True
    from titan.schemas import typecheck

    node: Any = schema
    for part in path.split("."):
        field = node.field(part) if isinstance(node, SectionSpec) else None
        if field is None:
            return True
        node = field.annotation
    return isinstance(node, SectionSpec) or typecheck.matches(value, node)


def _nearest(parent: tuple[str, ...], found: list[str]) -> list[str]:
    """Of the homes of a misplaced key, the one inside the section it was written in, when one
    is (``num_workers`` in [training] is ``training.dataloader.num_workers``, not validation's)."""

    def shared(path: str) -> int:
        count = 0
        for mine, theirs in zip(parent, path.split("."), strict=False):
            if mine != theirs:
                break
            count += 1
        return count

    best = max(map(shared, found), default=0)
    inside = [p for p in found if shared(p) == best]
    return inside if best > 0 and len(inside) == 1 else found


def _written(document: dict | None, path: str) -> bool:
    """Whether the parsed ``document`` sets the dotted ``path`` (a key or a section)."""
    node: Any = document
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def _join(parent: str, name: str) -> str:
    return f"{parent}.{name}" if parent else name


def _moved(
    parts: tuple[str, ...], *, is_table: bool, value: Any, document: dict | None
) -> Suggestion | None:
    """The moved-key hint for a key or table of an older torchtitan, if ``parts`` is one."""
    from titan.schemas import eras  # only files with unknown keys get here

    def old(table: tuple[str, ...]) -> bool:
        # A built-in extension's section (flux's [encoder]) is a table of today too, which a
        # fork's extension may add keys to: only its old keys are the older era's.
        return eras.is_old_table(table) and ".".join(table) not in extension_index()

    if is_table and old(parts):
        return Suggestion("moved-key", _old_table_hint(parts))
    if value is _NO_VALUE:
        found = _flag_hint(parts)
        return None if found is None else Suggestion("moved-key", found)
    step = eras.translate(parts, value, document)
    if step is not None:
        return Suggestion("moved-key", _step_hint(step))
    if old(parts[:-1]):
        return Suggestion("unknown-key", _stray_hint(parts))
    return None


def _step_hint(step: eras.Step) -> str:
    """An old key's hint: exactly which v0.2.2 settings its value becomes, or why none."""
    from titan.schemas import eras

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
    from titan.schemas import typecheck

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
    from titan.schemas import eras

    rule = eras.rule_for(parts)
    if rule is None:
        return None
    if rule.how == "never":
        return f"torchtitan never had `{'.'.join(parts)}`: {rule.why}"
    where = eras.destination(parts)
    return f"{f'now `{where}`' if where else 'removed'}; {rule.why}; {rule.era}"


def _old_table_hint(parts: tuple[str, ...]) -> str:
    """An empty table only older eras had (a table with keys has each key reported)."""
    from titan.schemas import eras
    from titan.schemas.moved_keys import RULES

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
    from titan.schemas import eras
    from titan.schemas.moved_keys import RULES

    table = ".".join(parts[:-1])
    names = [rule.old.rsplit(".", 1)[-1] for rule in RULES if rule.old.startswith(table + ".")]
    close = closest(parts[-1], names)
    if close:
        moved = eras.destination((*parts[:-1], close[0]))
        return f"did you mean `{table}.{close[0]}`? (now `{moved}`)"
    return f"[{table}] is from an older torchtitan and never had `{parts[-1]}`; delete it"


def _legacy() -> SectionSpec:
    from titan.schemas.legacy_spec import LEGACY_SPEC

    return LEGACY_SPEC
