"""The cases of ``tests/data/fork_keys.toml`` run through titan-validate's check, and what each
finding's hint offers, judged against the case's verdict.

Each case is one key (or one value) as a fork's TOML writes it, in a file with the sections
that file has. The document is built from the case, checked with ``check_text`` exactly as
titan-validate checks a file outside any project, and the finding at the key is read the way a
user reads it: the names its did-you-mean offers (``did you mean `a` or `b`?``, ``did you mean
"full"?``, ```llama3` is close, but``, ``now `x```, the extension in ```data` is added by the vlm
extension``).

- ``typo``: right when the hint names the intended key or value alone; *misleading* when it
  names another; missed when it names none (two names with the intended one: ambiguous).
- ``fork``: right when the hint names nothing (for a key: the declare-it route); misleading
  when it names anything.
- ``moved``: right when the era chain reports it (``moved-key``), or for a value when the hint
  names only the intended value, if any; misleading when it offers a did-you-mean.

Used by tests/test_suggestion_precision.py and bench/suggestions.py.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import tempfile
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

import tomli_w

DATA = Path(__file__).resolve().parent / "data" / "fork_keys.toml"

VERDICTS = ("typo", "fork", "moved")
FINDING_CODES = (
    "unknown-key",
    "moved-key",
    "ignored-key",
    "invalid-choice",
    "unknown-model",
    "unknown-flavor",
    "unknown-converter",
    "wrong-type",
    "extension-error",
    "invalid-value",
)

_OFFER = re.compile(r"did you mean (.*?)\?(?:\s|$)")
_NAMED = re.compile(r"`\"?([^`\"]+)\"?`|\"([^\"]+)\"")
_CLOSE = re.compile(r"^`([^`]+)` is close, but")
_NOW = re.compile(r"^now `([^`=]+)`")
_EXTENSION = re.compile(r"^`[^`]+` is added by the (\S+) extension")


@dataclasses.dataclass(frozen=True)
class Case:
    """One fork-style key or value and the verdict a reader would give it."""

    key: str
    value: Any
    kind: str
    verdict: str
    sections: tuple[str, ...]
    source: str
    intended: str | None = None
    context: tuple[tuple[str, Any], ...] = ()

    @property
    def label(self) -> str:
        shown = "" if self.kind == "key" else f" = {self.value!r}"
        return f"{self.verdict}: {self.key}{shown}"


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What the check said at the case, and how it is judged."""

    case: Case
    code: str | None
    hint: str | None
    named: tuple[str, ...]
    judged: str
    """``right``, ``misleading``, ``missed``, ``ambiguous`` or ``unreported``."""


@functools.cache
def load() -> tuple[Case, ...]:
    """Every case of the data file, in file order."""
    raw = tomllib.loads(DATA.read_text(encoding="utf-8"))["case"]
    return tuple(
        Case(
            key=entry["key"],
            value=entry["value"],
            kind=entry["kind"],
            verdict=entry["verdict"],
            sections=tuple(entry["sections"]),
            source=entry["source"],
            intended=entry.get("intended"),
            context=tuple(entry.get("context", {}).items()),
        )
        for entry in raw
    )


def document(case: Case) -> dict:
    """The TOML document of a file with the case's sections, context keys and the case."""
    doc: dict = {section: {} for section in case.sections}
    for dotted, value in (*case.context, (case.key, case.value)):
        node = doc
        *parents, last = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return doc


def named(hint: str | None) -> tuple[str, ...]:
    """The keys or values a hint offers in place of what was written."""
    if not hint:
        return ()
    for pattern in (_CLOSE, _NOW, _EXTENSION):
        found = pattern.match(hint)
        if found:
            return (found.group(1),)
    offer = _OFFER.search(hint)
    if offer is None:
        return ()
    return tuple(a or b for a, b in _NAMED.findall(offer.group(1)))


def judge(case: Case, code: str | None, hint: str | None) -> str:
    """How the finding at a case reads, given the case's verdict."""
    if code is None:
        return "unreported"
    offered = named(hint)
    if case.verdict == "typo":
        if not offered:
            return "missed"
        if case.intended not in offered:
            return "misleading"
        return "right" if len(offered) == 1 else "ambiguous"
    if case.verdict == "fork":
        return "misleading" if offered else "right"
    if code == "moved-key":
        return "right"
    if code == "ignored-key":  # an old key its file's era no longer read: delete it
        return "right" if hint and hint.startswith("delete it") and not offered else "misleading"
    if offered and (case.intended is None or offered != (case.intended,)):
        return "misleading"
    return "right" if case.kind == "value" else "missed"


def run(case: Case, folder: Path) -> Outcome:
    """Check the case's document and judge the finding at its key."""
    from titan.schemas.toml_check import check_text

    checked = check_text(tomli_w.dumps(document(case)), file="job.toml", base_dir=folder)
    parts = case.key.split(".")
    best = None
    for finding in checked.diagnostics:
        if finding.code not in FINDING_CODES:
            continue
        at = finding.path.split(".")
        if at == parts[: len(at)] and (best is None or len(at) > len(best.path.split("."))):
            best = finding  # the key itself, or the unknown section it was written in
    code, hint = (best.code, best.hint) if best else (None, None)
    return Outcome(case, code, hint, named(hint), judge(case, code, hint))


def run_all(cases: tuple[Case, ...] | None = None) -> list[Outcome]:
    """Every case checked, in a folder outside any project (no pyproject.toml declares
    anything for them)."""
    with tempfile.TemporaryDirectory() as folder:
        return [run(case, Path(folder)) for case in (cases or load())]


@dataclasses.dataclass(frozen=True)
class Summary:
    """The counts the bench prints and the test asserts on."""

    cases: Counter
    judged: Counter
    misleading: int
    typos: int
    typos_right: int
    offered: int
    offered_right: int

    @property
    def recall(self) -> float:
        """Typos whose hint names the intended key or value alone."""
        return self.typos_right / self.typos if self.typos else 1.0

    @property
    def precision(self) -> float:
        """Hints offering a name that offer the right one alone."""
        return self.offered_right / self.offered if self.offered else 1.0


def summarize(outcomes: list[Outcome]) -> Summary:
    """Counts over all outcomes."""
    offers = [o for o in outcomes if o.named]
    return Summary(
        cases=Counter(o.case.verdict for o in outcomes),
        judged=Counter((o.case.verdict, o.judged) for o in outcomes),
        misleading=sum(o.judged == "misleading" for o in outcomes),
        typos=sum(o.case.verdict == "typo" for o in outcomes),
        typos_right=sum(o.case.verdict == "typo" and o.judged == "right" for o in outcomes),
        offered=len(offers),
        offered_right=sum(o.judged == "right" for o in offers),
    )


# --------------------------------------------------------------------------- random typos

TYPICAL_SECTIONS = ("job", "model", "optimizer", "lr_scheduler", "training", "parallelism")


def random_typos(seed: int = 0) -> tuple[Case, ...]:
    """One slip of the hand (a letter dropped, doubled, swapped with the next or replaced) in
    every v0.2.2 key and section name of five letters or more that has a default to write
    (the slips tests/test_follow_suggestions.py makes); a slip that makes another v0.2.2 name
    is skipped. Unbiased by the data file's choices."""
    import random

    from titan.schemas.legacy_spec import LEGACY_SPEC
    from titan.schemas.spec import MISSING, SectionSpec

    from tests.test_follow_suggestions import _typo

    rng = random.Random(seed)
    cases = []

    def walk(section: SectionSpec, parents: tuple[str, ...]) -> None:
        names = {field.name for field in section.fields}
        for field in section.fields:
            is_table = isinstance(field.annotation, SectionSpec)
            if is_table:
                walk(field.annotation, (*parents, field.name))
            value = {} if is_table else field.default
            if len(field.name) < 5 or value is MISSING or value is None:
                continue
            typo = _typo(field.name, rng)
            if typo in names:
                continue
            cases.append(
                Case(
                    key=".".join((*parents, typo)),
                    value=value,
                    kind="key",
                    verdict="typo",
                    sections=tuple(s for s in TYPICAL_SECTIONS if s != field.name),
                    source=f"random slip in {'.'.join((*parents, field.name))}",
                    intended=".".join((*parents, field.name)),
                )
            )

    walk(LEGACY_SPEC, ())
    return tuple(cases)
