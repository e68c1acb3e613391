"""``titan-validate --fix``: rewrite a legacy TOML as v0.2.2 wants it, keeping every other byte.

What is fixed is what has one right answer:

- keys of older torchtitan eras, as :func:`titan.schemas.eras.upgrade` says (moved, renamed, inverted,
  values mapped); an *unportable* key is left where it is, for the validator to report;
- stale converter names in ``model.converters`` (``"float8"`` -> ``"quantize.linear.float8"``),
  and a string where the schema wants a ``list[str]`` (``converters = "float8"`` becomes
  ``converters = ["quantize.linear.float8"]``).

How the text changes (``titan.migrate.tomledit.statement_edits``; ``titan.migrate.tomledit.statements`` cuts the
file into statements, and only the statements named below are replaced; tomlkit renders new values
and edits a single statement's value):

- a key whose new home is the table it is written in is renamed on its own line: same place,
  same ``=`` spacing, same comments, and its value as written when the value does not change
  (also inside an inline table: ``metrics = { rank_0_only = true }``);
- a key that moves to another table leaves with its comments (the block of comment lines
  directly above it, and the one on its line) and lands after the last key of its destination
  table (an existing ``[table]``, the dotted keys that make one, or an inline table), indented
  like that table's keys. When the destination key exists already (``model.converters``), the
  comments go on lines above it and only its value changes;
- a destination table the file does not have takes the place of the old table when every key of
  the old table leaves it (``[float8]`` becomes ``[quantize.linear.float8]``, header comments and
  all, so a renamed table stays where the reader knew it); otherwise it is appended at the end
  of the file;
- an old table left with no keys is removed: its header line goes (a comment on that line stays,
  on a line of its own), and so do its blank lines when nothing else is left in it; comment lines
  above or inside it stay where they were. Comments are never deleted, except those of a key
  that is deleted because its value is what v0.2.2 does anyway;
- a value that changes (an inverted boolean, a converter list) is edited in place: in an array
  only the elements that change are rewritten, the others keep their layout and comments.

The result is parsed again and must equal the upgraded document exactly (types included);
anything else is refused (:class:`FixRefused`), so a file is never written with a meaning the
upgrade did not intend.
"""

from __future__ import annotations

import copy
import tomllib
import typing
from typing import Any

from titan.migrate.tomledit.statement_edits import FixRefused, apply_steps
from titan.migrate.tomledit.statements import LayoutError, same_value
from titan.schemas import era_defaults, era_flips, era_pragma, eras, rules
from titan.schemas.spec import SectionSpec

CONVERTERS = ("model", "converters")


class Fixed:
    """The rewritten text and one line per change (empty when nothing needed fixing)."""

    __slots__ = ("text", "fixes")

    def __init__(self, text: str, fixes: tuple[str, ...]) -> None:
        self.text = text
        self.fixes = fixes


def fix_text(
    text: str, *, schema: SectionSpec, era: str | None = None, project_era: str | None = None
) -> Fixed:
    """``text`` (a TOML that ``tomllib`` accepts) with every fixable finding fixed.

    ``schema`` is the legacy schema merged with the file's custom config module: its keys are
    current even where an older torchtitan had the same name, and its ``list[str]`` fields are
    the ones a lone string is wrapped for. ``era`` (``--era``) dates the file for its era's
    defaults instead of its evidence. Raises :class:`FixRefused`.
    """
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise FixRefused(f"it is not valid TOML ({error})") from None
    era = era or era_pragma.era_of(text)
    notes: list[str] = []
    cleaned = _fix_values(document, schema, notes)
    upgraded, steps = eras.upgrade(
        cleaned,
        is_current=lambda parts: _is_current(schema, parts),
        ignored=era_defaults.stale_keys(document, _day(document, era, project_era)),
    )
    for step in steps:
        if step.kind == "unportable":  # left where it is: the validator reports it
            _put_back(upgraded, cleaned, step.old)
    target = _fix_values(upgraded, schema, [])
    # an ignored key did nothing in its run: it is deleted, never turned into a setting
    applied = [step for step in steps if step.kind in ("upgraded", "ignored")]
    additions = _era_defaults(document, target, era=era, project_era=project_era)
    if same_value(target, document):
        return Fixed(text, ())
    try:
        fixed = apply_steps(text, applied, target=target, additions=additions)
    except LayoutError as error:
        raise FixRefused(f"its layout could not be read ({error})") from None
    try:
        result = tomllib.loads(fixed)
    except tomllib.TOMLDecodeError as error:
        raise FixRefused(f"the rewrite would not be valid TOML ({error})") from None
    if not same_value(result, target):
        raise FixRefused("the rewrite would not mean what the upgrade says; fix it by hand")
    described = tuple(_describe(step) for step in applied)
    written = tuple(f"`{'.'.join(key)}` written: {why}" for key, _, why in additions)
    day = _day(document, era, project_era)
    if day < era_defaults.V022 and era_pragma.find(text) is None:
        # the keys that dated the file are gone: the comment keeps its date (its flavor and
        # the defaults of its era still mean what they meant then)
        fixed = era_pragma.insert(fixed, day)
        written += (f"`{era_pragma.line(day)}` written: the file keeps the date its old keys gave",)
    return Fixed(fixed, described + written + tuple(notes))


def _day(document: dict, era: str | None, project_era: str | None) -> str:
    """The day the file is read on: ``--era``'s, else its evidence's (the project's era for a
    file nothing dates)."""
    guess = era_defaults.date_file(document)
    if era is None and guess.current:
        era = project_era
    return era_defaults.parse_era(era) if era is not None else guess.date


def _era_defaults(
    document: dict, target: dict, *, era: str | None, project_era: str | None = None
) -> tuple[tuple[tuple[str, ...], Any, str], ...]:
    """The defaults of the file's era (dated from its evidence) that differ from v0.2.2's and
    that v0.2.2 can say, for keys the file omits: put into ``target`` and returned as
    ``(key, value, comment)``. Once the old keys are upgraded the file dates as v0.2.2, so
    without them it would run with v0.2.2's defaults instead of its own era's."""
    guess = era_defaults.date_file(document)
    if era is None and guess.current:
        era = project_era  # the project says when its undated files were written
    if era is None and guess.current:
        return ()
    day = era_defaults.parse_era(era) if era is not None else guess.date
    found = []
    lost = []
    for default in era_defaults.era_defaults(document, day):
        key = tuple(default.key.split("."))
        if not default.portable:
            answer = era_flips.ANSWERED_BY.get(default.key, default.key)
            lost.append(f"`{default.key}` ({default.why}): write `{answer}` in the file first")
            continue
        if eras.get(target, key) is not eras.MISSING:
            continue
        if eras.put(target, key, default.value):
            found.append((key, default.value, f"the default of this file's era: {default.why}"))
    if lost:  # upgrading the old keys would date the file v0.2.2 and hide what its run used
        raise FixRefused(f"its era ({day}) ran with defaults v0.2.2 cannot say: " + "; ".join(lost))
    return tuple(found)


# --------------------------------------------------------------------------- values


def _fix_values(document: dict, schema: SectionSpec, notes: list[str]) -> dict:
    """A copy with lone strings wrapped for ``list[str]`` fields and stale converter names
    replaced (each change described in ``notes``)."""
    fixed = copy.deepcopy(document)

    def walk(table: dict, section: SectionSpec, parts: tuple[str, ...]) -> None:
        for key, value in table.items():
            field = section.field(key)
            if field is None:
                continue
            here = (*parts, key)
            if isinstance(field.annotation, SectionSpec):
                if isinstance(value, dict):
                    walk(value, field.annotation, here)
            elif isinstance(value, str) and _is_list_of_str(field.annotation):
                step = eras.value_step(here, value)
                if step is not None and step.kind == "upgraded" and step.writes:
                    # its era's loader split the string at its commas: the run had the list
                    table[key] = list(step.writes[0][1])
                    notes.append(f"`{'.'.join(here)}`: {step.why} ({step.era})")
                    continue
                table[key] = [value]
                notes.append(f"`{'.'.join(here)}`: the string became a one-element list")

    walk(fixed, schema, ())
    model = fixed.get("model")
    names = model.get("converters") if isinstance(model, dict) else None
    if isinstance(names, list):
        renamed: list[Any] = []
        for name in names:
            new = rules.STALE_CONVERTER_NAMES.get(name) if isinstance(name, str) else None
            if new is not None:
                notes.append(f'`model.converters`: "{name}" -> "{new}"')
                name = new
            if not any(same_value(name, other) for other in renamed):
                renamed.append(name)
        model["converters"] = renamed
    return fixed


def _is_list_of_str(annotation: Any) -> bool:
    return typing.get_origin(annotation) is list and typing.get_args(annotation) == (str,)


def _is_current(schema: SectionSpec, parts: tuple[str, ...]) -> bool:
    """Whether ``parts`` is a key (or table) of the merged schema as it stands."""
    section: Any = schema
    for part in parts:
        if not isinstance(section, SectionSpec):
            return False
        field = section.field(part)
        if field is None:
            return False
        section = field.annotation
    return True


def _put_back(document: dict, source: dict, parts: tuple[str, ...]) -> None:
    """Copy the key ``parts`` of ``source`` into ``document``, making its tables as needed."""
    value: Any = source
    for part in parts:
        value = value[part]
    table = document
    for part in parts[:-1]:
        table = table.setdefault(part, {})
    table[parts[-1]] = value


def _describe(step: eras.Step) -> str:
    if not step.writes:
        return f"`{step.dotted}` deleted: {step.why}"
    writes = []
    for new, value in step.writes:
        if new == CONVERTERS:
            writes.append(", ".join(f'"{name}"' for name in value) + " in `model.converters`")
        else:
            writes.append(f"`{'.'.join(new)}`")
    return f"`{step.dotted}` -> {' and '.join(writes)}"


# --------------------------------------------------------------------------- the text
