"""The defaults of a legacy file's own era, for the keys it omits.

A key a legacy TOML leaves out ran with the default of the torchtitan that read it. Where that
default differs from v0.2.2's (:data:`titan.schemas.era_flips.FLIPS`), carrying the file over as it
stands would silently change the run. This module dates a file from what it holds
(:func:`date_file`, with the evidence of :mod:`titan.schemas.era_clues`) and lists the old defaults
that matter for it (:func:`era_defaults`): the value to write for each, or, where v0.2.2 cannot
express it, the reason it must be reported. :func:`parse_era` reads a ``--era`` value.

Dates are days (``YYYY-MM-DD``, the day a change landed on torchtitan main); an era given as a
month (``YYYY-MM``) means main as it stood when that month began. The era defaults assume the
file was run without command-line overrides.
"""

from __future__ import annotations

import math
from typing import Any

from titan.schemas._frozen import Frozen, _set
from titan.schemas.era_clues import ERA_START, NEW_KEYS, OLD_KEYS, V022, VALUES
from titan.schemas.era_flips import ANSWERED_BY, FLIPS, Flip
from titan.schemas.era_names import _shift, parse_era
from titan.schemas.eras import MISSING, destination, get, leaves, rule_for, toml_value, translate
from titan.schemas.legacy_spec import LEGACY_SPEC
from titan.schemas.moved_keys import CONVERTERS
from titan.schemas.ranges import is_int64
from titan.schemas.spec import SectionSpec

_UNSAID = object()
"""Marks a v0.2.2 key the file spells under an old name whose value v0.2.2 cannot take."""

_CARRIES_NO_VALUE = ("same", "ignored", "never")
"""Old rows that point at a v0.2.2 key without giving it the old key's value."""

_ANSWERS = frozenset(ANSWERED_BY.values())
"""v0.2.2 keys a file of an older era sets to answer an old default v0.2.2 cannot say: a choice
made while migrating, not evidence of when the file was written."""

_OLD_SPELLINGS = {"global.dump_folder": "job.dump_folder"}
"""Old keys the trainer read before the first config manager, so no moved-key row has them."""


class Clue(Frozen):
    """One thing in a file that says when it was written."""

    __slots__ = ("key", "says", "since", "until")
    __match_args__ = ("key",)

    key: str
    """The dotted key (or table) in the file."""
    says: str
    """What it tells, with the commit."""
    since: str
    """The first day it existed."""
    until: str | None
    """The day it was gone (``None``: v0.2.2 still has it, so it only bounds from below)."""

    def __init__(self, key: str, says: str, since: str, until: str | None) -> None:
        _set(self, "key", key)
        _set(self, "says", says)
        _set(self, "since", since)
        _set(self, "until", until)

    @property
    def last(self) -> str | None:
        """The last day the file could have been run with it (``None``: any day since)."""
        if self.until is None:
            return None
        return max(self.since, _shift(self.until, -1))


class EraGuess(Frozen):
    """When a file was written, as far as its contents tell."""

    __slots__ = ("date", "evidence", "stale")
    __match_args__ = ("date",)

    date: str
    """The assumed day, ``YYYY-MM-DD``; :data:`titan.schemas.era_clues.V022` when nothing is older."""
    evidence: tuple[Clue, ...]
    """Every clue the date is consistent with."""
    stale: tuple[Clue, ...]
    """Old keys that contradict a newer key in the same file: left behind, not dated by."""

    def __init__(self, date: str, evidence: tuple[Clue, ...], stale: tuple[Clue, ...]) -> None:
        _set(self, "date", date)
        _set(self, "evidence", evidence)
        _set(self, "stale", stale)

    @property
    def era(self) -> str:
        """The month, ``YYYY-MM``."""
        return self.date[:7]

    @property
    def current(self) -> bool:
        """Whether nothing in the file is older than v0.2.2 (no era default applies)."""
        return self.date == V022


class EraDefault(Frozen):
    """An old default a file relied on: the value to write for an omitted key, or why not."""

    __slots__ = ("key", "value", "flip", "portable", "why")
    __match_args__ = ("key", "value")

    key: str
    """The dotted v0.2.2 key the file omits."""
    value: Any
    """The value the run had (``None`` where it could not be worked out)."""
    flip: Flip
    """The researched row."""
    portable: bool
    """Whether v0.2.2 can take :attr:`value`; if not, it is reported and nothing is written."""
    why: str
    """One sentence for the report: what the run did, and when that default held."""

    def __init__(self, key: str, value: Any, flip: Flip, portable: bool, why: str) -> None:
        _set(self, "key", key)
        _set(self, "value", value)
        _set(self, "flip", flip)
        _set(self, "portable", portable)
        _set(self, "why", why)


# --------------------------------------------------------------------------- dating

_OLD = {key: (since, until, commit) for key, since, until, commit in OLD_KEYS}
_NEW = {key: since for since, keys in NEW_KEYS for key in keys.split()}


def _v022_defaults(spec: SectionSpec, prefix: str = "") -> dict[str, Any]:
    """Every leaf default under ``spec``, by dotted key."""
    found: dict[str, Any] = {}
    for field in spec.fields:
        if isinstance(field.annotation, SectionSpec):
            found.update(_v022_defaults(field.annotation, f"{prefix}{field.name}."))
        else:
            found[prefix + field.name] = field.default
    return found


V022_DEFAULTS: dict[str, Any] = _v022_defaults(LEGACY_SPEC)
"""Every v0.2.2 key's default, by dotted key."""


def _old_tables() -> dict[str, tuple[str, str]]:
    """Tables only older eras had (``[global]``, ``[float8]``, ``[quantize.dense.mx]``...), with
    the first and last days of their keys: an empty one still dates a file."""
    current = {
        key.rsplit(".", end)[0] for key in V022_DEFAULTS for end in range(1, key.count(".") + 1)
    }
    tables: dict[str, tuple[str, str]] = {}
    for key, (since, until, _) in _OLD.items():
        for end in range(1, key.count(".") + 1):
            table = key.rsplit(".", end)[0]
            if table not in current:
                low, high = tables.get(table, (since, until))
                tables[table] = (min(low, since), max(high, until))
    return tables


_OLD_TABLES = _old_tables()


def _matches(value: Any, wanted: tuple) -> bool:
    """Whether ``value`` is one of ``wanted`` (same type and value), or of a type listed there."""
    for each in wanted:
        if isinstance(each, type):
            if isinstance(value, each) and not isinstance(value, bool):
                return True
        elif type(value) is type(each) and value == each:
            return True
    return False


_VALUES_OF: dict[str, list[tuple]] = {}
for _row in VALUES:
    _VALUES_OF.setdefault(_row[0], []).append(_row)
"""The rows of :data:`titan.schemas.era_clues.VALUES` by key (every key of every file is looked up)."""


def _has_old(flat: list) -> bool:
    """Whether a document's leaves hold any clue that bounds its date from above."""
    for parts, value in flat:
        key = ".".join(parts)
        if key in _OLD or (value == {} and key in _OLD_TABLES):
            return True
        if any(_matches(value, row[1]) for row in _VALUES_OF.get(key, ())):
            return True
    return False


def clues(document: dict, flat: list | None = None) -> list[Clue]:
    """Everything in ``document`` that says when it was written, in file order (``flat`` is
    ``leaves(document)`` when the caller has it)."""
    found: list[Clue] = []
    for parts, value in leaves(document) if flat is None else flat:
        key = ".".join(parts)
        if key in _OLD:
            since, until, commit = _OLD[key]
            found.append(Clue(key, f"an older key, gone on {until} ({commit})", since, until))
        elif key in _NEW and key not in _ANSWERS:
            found.append(Clue(key, f"a key declared from {_NEW[key]} on", _NEW[key], None))
        elif value == {} and key in _OLD_TABLES:
            since, until = _OLD_TABLES[key]
            found.append(Clue(key, f"an older table, gone on {until}", since, until))
        for _key, wanted, since, until, commit, unless in _VALUES_OF.get(key, ()):
            if _matches(value, wanted) and get(document, tuple(unless.split("."))) is MISSING:
                says = f"{value!r} was accepted until {until} ({commit})"
                found.append(Clue(key, says, since, until))
    return found


def with_evidence(guess: EraGuess, dated: tuple[str, str] | None) -> EraGuess:
    """``guess`` dated instead by ``dated`` (``(day, evidence)``: what a file's shape says, such
    as the torchtitan a TorchForge app ran on), its keys' stale clues kept."""
    if dated is None:
        return guess
    day, says = dated
    return EraGuess(day, (Clue(APP, says, day, None), *guess.evidence), guess.stale)


APP = "(the app)"
"""The key of the clue a file's shape gives (:func:`with_evidence`)."""


def model_clues(document: dict) -> list[Clue]:
    """The model family and flavor a file names: neither existed before it was added (a file
    naming ``8B_flex`` was written on or after that flavor's first day). They bound the era of
    a file its keys do not date (``titan.schemas.era_stakes``), but never make its keys stale:
    a fork may have named its own model so before upstream did."""
    from titan.schemas.flavor_eras import first_day

    model = document.get("model")
    name = model.get("name") if isinstance(model, dict) else None
    flavor = model.get("flavor") if isinstance(model, dict) else None
    found = []
    if isinstance(name, str):
        for key, asked in (("model.name", None), ("model.flavor", flavor)):
            if key == "model.flavor" and not isinstance(asked, str):
                continue
            added = first_day(name, asked)
            if added is not None:
                day, commit, pr = added
                found.append(Clue(key, f"a model named from {day} on ({commit}, {pr})", day, None))
    return found


def date_file(document: dict, flat: list | None = None) -> EraGuess:
    """The latest day consistent with every clue in ``document``.

    Old keys and values bound the date from above (the last day they existed), and every key
    from below (the day it was declared). The *latest* consistent day is assumed: it needs the
    fewest old defaults, and the report names it so that ``--era`` can say otherwise. A file
    with no older clue is dated v0.2.2 (no era default applies). Where an old key ended before
    another key of the same file began, the old key was left behind: it is listed as stale and
    the rest date the file. Such a file ran only while loaders skipped the keys they did not
    declare (until #1644, eadca483, 2025-08-28; later ones refused the file), so it is dated
    before that day when its other keys allow it.
    """
    flat = leaves(document) if flat is None else flat
    if not _has_old(flat):  # most files: nothing bounds the date, so it is v0.2.2
        return EraGuess(V022, (), ())
    found = clues(document, flat)
    floor = max((clue.since for clue in found), default=ERA_START)
    stale = tuple(c for c in found if c.last is not None and c.last < floor)
    bounds = [c.last for c in found if c.last is not None and c.last >= floor]
    if stale and floor < STRICT_LOADER:
        bounds.append(_shift(STRICT_LOADER, -1))
    day = min(bounds, default=V022)
    evidence = tuple(c for c in found if c not in stale)
    return EraGuess(day, evidence, stale)


STRICT_LOADER = "2025-08-28"
"""The day torchtitan's loader began to refuse keys it did not declare (eadca483, #1644); before
it, a key gone from the loader (or not yet in it) was skipped without a word."""


def stale_keys(
    document: dict, day: str, flat: list | None = None, *, skipping: bool = False
) -> dict[str, str]:
    """The old keys of ``document`` that the loader of ``day`` skipped (gone by then, or not
    yet declared), each with why: their run did without them. From #1644 (2025-08-28) such a
    key made torchtitan's loader refuse the file, so on those days there was no run to be
    faithful to, and none is listed (the key is upgraded as for a file of its own era), unless
    ``skipping``: a loader of its own read the file and skipped what it did not know (Forge
    merged an app's sections into its dataclasses itself)."""
    flat = leaves(document) if flat is None else flat
    if (day >= STRICT_LOADER and not skipping) or not any(
        ".".join(parts) in _OLD for parts, _ in flat
    ):
        return {}
    newer = [c for c in clues(document, flat) if c.until is None]
    latest = max(newer, key=lambda clue: clue.since, default=None)
    found: dict[str, str] = {}
    for parts, _ in flat:
        key = ".".join(parts)
        if key not in _OLD:
            continue
        since, until, commit = _OLD[key]
        # a key gone on the day it came still ran that day (Clue.last)
        if max(since, _shift(until, -1)) < day:
            when = (
                f"before the file's `{latest.key}` existed (from {latest.since})"
                if latest is not None and until <= latest.since
                else f"before {day}, the day the file is dated to"
            )
            found[key] = (
                f"the loader stopped reading it on {until} ({commit}), {when}, so the run "
                "did without it"
            )
        elif since > day:
            found[key] = (
                f"the loader read it only from {since} on, after {day}, the day the file is "
                "dated to, so the run did without it"
            )
    return found


# --------------------------------------------------------------------------- era defaults


def spelled(document: dict, skip: frozenset[str] | dict = frozenset()) -> dict[str, Any]:
    """The v0.2.2 keys ``document`` sets, under their own name or an older one, with the value
    they get (an old name whose value v0.2.2 cannot take still counts as set); old keys in
    ``skip`` (those the era's loader did not read) set nothing."""
    view: dict[str, Any] = {}
    converters = ".".join(CONVERTERS)
    for parts, value in leaves(document):
        key = ".".join(parts)
        if key in skip:
            continue
        step = translate(parts, value, document)
        if step is None or getattr(step, "severity", None) == "error":
            view.setdefault(_OLD_SPELLINGS.get(key, key), value)
            continue
        for new, new_value in step.writes:
            written = ".".join(new)
            if written == converters:
                had = view.get(written, get(document, CONVERTERS))
                had = list(had) if isinstance(had, list) else []
                view[written] = had + [n for n in new_value if n not in had]
            else:
                view.setdefault(written, new_value)
        rule = rule_for(parts)
        target = destination(parts)
        if target and rule is not None and rule.how not in _CARRIES_NO_VALUE:
            view.setdefault(target, _UNSAID)
    return view


def _in_force(flip: Flip, day: str) -> bool:
    """Whether the old default of ``flip`` held on ``day``."""
    return flip.since <= day < flip.until


def _effective(key: str, view: dict[str, Any], day: str, asked: frozenset = frozenset()) -> Any:
    """What the run had for ``key``: the file's value, else the era's default (one that has
    conditions when they hold for the file: from 2024-04-05 to 2024-04-15 a checkpoint.folder
    turned checkpointing on, and with it the checkpoint defaults of that era), else v0.2.2's."""
    if key in view:
        return view[key]
    for flip in FLIPS:
        if flip.key != key or not _in_force(flip, day) or flip.derive or key in asked:
            continue
        if all(_holds(c, view, day, asked | {key}) for c in flip.only_if):
            return flip.old
    return V022_DEFAULTS.get(key)


def _holds(
    condition: tuple[str, str, Any], view: dict[str, Any], day: str, asked: frozenset = frozenset()
) -> bool:
    """Whether one ``only_if`` condition is true of the file at ``day`` (``asked``: the keys
    whose conditions are being judged, so none is judged by itself)."""
    key, op, wanted = condition
    if op == "set":
        return view.get(key) not in (None, _UNSAID, "", False, [])
    if op == "unset":
        return view.get(key) in (None, "")
    value = _effective(key, view, day, asked)
    if op == "has":
        return isinstance(value, list) and any(name in value for name in wanted)
    if op == ">":
        return isinstance(value, int) and not isinstance(value, bool) and value > wanted
    same = type(value) is type(wanted) and value == wanted
    return same if op == "==" else not same


def _warmup_pct(flip: Flip, view: dict[str, Any], day: str, document: dict) -> Any:
    """The warmup steps of a fraction of training.steps (at least 2), as #99 replaced it."""
    steps = _effective("training.steps", view, day)
    if not is_int64(steps) or not math.isfinite(flip.old):
        return None  # a step count the range check refuses: no warmup to work out from it
    return max(int(steps * flip.old), 2)


_SINGLE_STAGE = ("1F1B", "GPipe")


def _pp_microbatches(flip: Flip, view: dict[str, Any], day: str, document: dict) -> Any:
    """The microbatch size of the old default count (one per rank, or one per stage); ``None``
    where the count is not in the file (a looped schedule's stages came from the model)."""
    batch = _effective("training.local_batch_size", view, day)
    count = _effective("parallelism.pipeline_parallel_degree", view, day)
    if flip.old == "stages":
        splits = [
            get(document, (section, "pipeline_parallel_split_points"))
            for section in ("experimental", "parallelism")
        ]
        listed = [s for s in splits if isinstance(s, list) and s]
        if listed:
            count = len(listed[0]) + 1
        elif _effective("parallelism.pipeline_parallel_schedule", view, day) not in _SINGLE_STAGE:
            return None  # a looped schedule's stage count came from the model's layers
    if not isinstance(batch, int) or not isinstance(count, int) or count < 1 or batch % count:
        return None
    return batch // count


_DERIVE = {"warmup_pct": _warmup_pct, "pp_microbatches": _pp_microbatches}


def era_defaults(document: dict, era: str, *, skipping: bool = False) -> list[EraDefault]:
    """The old defaults ``document`` relied on at ``era`` (``YYYY-MM`` or ``YYYY-MM-DD``): one
    per key it omits whose default then differs from v0.2.2's and matters for this file (each
    row's ``only_if`` holds, judged with the file's values, else that era's defaults)."""
    day = parse_era(era)
    view = spelled(document, stale_keys(document, day, skipping=skipping))
    found: list[EraDefault] = []
    for flip in FLIPS:
        if flip.key in view or not _in_force(flip, day):
            continue
        if not all(_holds(condition, view, day) for condition in flip.only_if):
            continue
        value = _DERIVE[flip.derive](flip, view, day, document) if flip.derive else flip.old
        portable = flip.portable and value is not None
        why = f"{flip.why} (torchtitan {flip.era})"
        if flip.portable and value is None:
            why += "; it could not be worked out from this file"
        found.append(EraDefault(flip.key, value, flip, portable, why))
    return found


def lost_text(found: EraDefault, *, day: str, dated_by: str) -> tuple[str, str]:
    """The message and hint of the error for an old default v0.2.2 cannot say (``era-default-
    lost``), one text for titan-validate and titan-migrate: ``dated_by`` says what dated the
    file to ``day`` (its evidence, or ``--era``)."""
    value = toml_value(found.value)
    message = (
        f"`{found.key}` is not in the file, and its era's default {value} cannot be said in "
        f"v0.2.2: {found.why}"
    )
    answer = ANSWERED_BY.get(found.key, found.key)
    hint = (
        f"write the value the migrated run should use in the TOML (`{answer}`); pass "
        f"--era YYYY-MM to titan-migrate to date the file otherwise (dated {day} by {dated_by})"
    )
    return message, hint


def dated_by(guess: EraGuess) -> str:
    """The first few keys that dated a file, as a report names them (or its shape: a Forge
    app's evidence in words)."""
    if guess.evidence and guess.evidence[0].key == APP:  # its first words: what kind of app
        return "its shape: " + guess.evidence[0].says.split(" (")[0].split(";")[0]
    return "its " + ", ".join(f"`{clue.key}`" for clue in guess.evidence[:3])
