"""A legacy document as the cross-field rules read it: upgraded through the era chain.

A file written for an older torchtitan sets some values with old keys (``[training]
data_parallel_type``, ``[experimental] pipeline_parallel_degree``) and omits keys whose default
was another one in its era. The run had those values, so the rules must judge them: both readers
of a TOML, ``titan-validate`` (``titan.schemas.toml_check``) and ``titan-migrate``
(``titan.migrate.plan.upgrades``), judge the document :func:`upgrade` returns, one upgrade for
both, so that neither reports a layout the other accepts.

A rule finding about a value an old key wrote has no line of its own in the file: :func:`wrote`
and :func:`repoint` place it at the old key, and say which old key it was.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from titan.schemas.diagnostics import Diagnostic, Span

if TYPE_CHECKING:
    from titan.schemas.era_defaults import EraDefault, EraGuess
    from titan.schemas.eras import Step
    from titan.schemas.spans import KeySpan
    from titan.schemas.spec import SectionSpec

PROJECT_SOURCE = "[tool.titan] era"
"""How reports name the project's declaration as the source of a file's era."""


class Upgraded:
    """What :func:`upgrade` made of one document."""

    __slots__ = ("document", "steps", "guess", "era", "day", "defaults", "written_defaults")

    document: dict
    """A copy with every old key at its v0.2.2 key and the era's portable defaults written."""
    steps: list[Step]
    """One per old key, in file order (``titan.schemas.eras.upgrade``)."""
    guess: EraGuess
    """When the file was written, as its keys (and ``dated``) tell."""
    era: str | None
    """The era the file is read in: the one given, else the project's for a file nothing
    dates, else ``None`` (its evidence dates it)."""
    day: str | None
    """The day its era defaults were taken from; ``None``: read as v0.2.2, none applied."""
    defaults: list[EraDefault]
    """The defaults of that day that differ from v0.2.2's, for keys the file omits."""
    written_defaults: dict[str, EraDefault]
    """Those of them written into :attr:`document` (v0.2.2 can say them), by dotted key."""

    def __init__(
        self,
        document: dict,
        steps: list[Step],
        guess: EraGuess,
        *,
        era: str | None,
        day: str | None,
        defaults: list[EraDefault],
        written_defaults: dict[str, EraDefault],
    ) -> None:
        self.document = document
        self.steps = steps
        self.guess = guess
        self.era = era
        self.day = day
        self.defaults = defaults
        self.written_defaults = written_defaults


def upgrade(
    document: dict,
    schema: SectionSpec,
    *,
    old: frozenset[tuple[str, ...]] = frozenset(),
    era: str | None = None,
    project_era: str | None = None,
    dated: tuple[str, str] | None = None,
    flat: list | None = None,
    flags: dict[str, Any] | None = None,
) -> Upgraded:
    """``document`` upgraded as a v0.2.2 run of it would read it: old keys at their v0.2.2 keys
    (a key the merged ``schema`` has stays, unless ``old`` names it: a custom config module may
    declare a key an older torchtitan also had), the keys the loader of its era did not read
    removed, and its era's defaults written for the keys it omits.

    ``era`` (``--era``, or the file's ``# titan: era`` comment) dates the file over its
    evidence; ``project_era`` (``[tool.titan] era``) dates a file nothing else dates; ``dated``
    is evidence besides its keys (a Forge app's shape). ``flat`` is ``eras.leaves(document)``,
    when the caller has it; ``flags`` are the legacy command line's values (dotted v0.2.2 key
    -> value): an era default computed from another setting (a warmup that was a share of
    training.steps) is computed from the flag's. The document itself is not changed."""
    from titan.schemas import era_defaults, eras

    flat = eras.leaves(document) if flat is None else flat
    guess = era_defaults.with_evidence(era_defaults.date_file(document, flat), dated)
    if era is None and guess.current:
        era = project_era
    day = era_defaults.parse_era(era) if era is not None else guess.date
    upgraded, steps = eras.upgrade(
        document,
        is_current=lambda p: p not in old and _in(schema, p),
        ignored=era_defaults.stale_keys(document, day, flat, skipping=dated is not None),
    )
    if era is None and guess.current:
        return Upgraded(
            upgraded, steps, guess, era=None, day=None, defaults=[], written_defaults={}
        )
    defaults = era_defaults.era_defaults(
        _with_flags(document, flags or {}), day, skipping=dated is not None
    )
    written: dict[str, EraDefault] = {}
    for found in defaults:
        parts = tuple(found.key.split("."))
        if not found.portable or eras.get(upgraded, parts) is not eras.MISSING:
            continue
        if eras.put(upgraded, parts, found.value):
            written[found.key] = found
    return Upgraded(
        upgraded, steps, guess, era=era, day=day, defaults=defaults, written_defaults=written
    )


def wrote(steps: list[Step], spans: dict[tuple, KeySpan]) -> dict[str, tuple[str, KeySpan]]:
    """Each v0.2.2 key the chain wrote where the file has none (and each table above it the
    file lacks), dotted -> the old key that wrote it and that key's span; the first old key
    wins. An old key without a span (sections held in memory) places nothing."""
    found: dict[str, tuple[str, KeySpan]] = {}
    for step in steps:
        span = spans.get(step.old)
        if span is None:
            continue
        for new, _ in step.writes:
            for end in range(1, len(new) + 1):  # the key, and tables the file lacks
                if new[:end] not in spans:
                    found.setdefault(".".join(new[:end]), (step.dotted, span))
    return found


def repoint(finding: Diagnostic, written: dict[str, tuple[str, KeySpan]]) -> Diagnostic:
    """``finding`` at the old key that wrote the value it is about (``written``, from
    :func:`wrote`), saying which; otherwise as it is. Its own place fell back to the enclosing
    table or the file, since the file does not write that key."""
    found = written.get(finding.path)
    if found is None or finding.span is None:
        return finding
    old, where = found
    return Diagnostic(
        code=finding.code,
        severity=finding.severity,
        path=finding.path,
        message=f"{finding.message} (written by `{old}`)",
        hint=finding.hint,
        span=Span(file=finding.span.file, line=where.line, col=where.col, end_col=where.end_col),
    )


def _with_flags(document: dict, flags: dict[str, Any]) -> dict:
    """``document``, or a copy with the command line's values written over it (dotted keys)."""
    if not flags:
        return document
    import copy

    from titan.schemas import eras

    found = copy.deepcopy(document)
    for key, value in flags.items():
        eras.put(found, tuple(key.split(".")), value)
    return found


def _in(schema: SectionSpec, parts: tuple[str, ...]) -> bool:
    """Whether ``parts`` is a key (or section) of ``schema``."""
    from titan.schemas.spec import SectionSpec

    section: Any = schema
    for part in parts:
        field = section.field(part) if isinstance(section, SectionSpec) else None
        if field is None:
            return False
        section = field.annotation
    return True
