"""The era chain inside a migration: old torchtitan keys carried at their v0.2.2 homes.

A TOML written for an older torchtitan (``training.batch_size``, ``[float8]``,
``training.compile``...) fails at v0.2.2, and a migration that rejected those keys would lose
their values. ``titan.schemas.eras`` says what each old key became; this module applies it to a
migration in two moments:

1. :meth:`Upgrade.adjust`, inside the validator's check (``check_file``'s ``adjust`` hook),
   rewrites the parsed document with v0.2.2 keys before it is checked, so the plan is built
   from the upgraded document and the values reach the generated code;
2. :meth:`Upgrade.record`, once the plan is built, gives every old key its own outcome
   (``upgraded`` with its era and v0.2.2 keys, or ``dropped`` with why, a finding and a TODO),
   takes the outcomes of the keys the chain wrote off the list (they were not in the file), and
   carries the old key's comments.

Every finding about a key the chain wrote points at the old key's line: the TOML has no other.
"""

from __future__ import annotations

from typing import Any

from titan.schemas import era_chain, era_defaults, era_stakes, eras
from titan.schemas.diagnostics import Diagnostic, Severity, Span
from titan.schemas.spec import SectionSpec
from titan.schemas.toml_check import FileCheck

CARRIED = ("carried", "default", "structural", "renamed")
"""Outcomes of a written key under which the old key counts as upgraded."""


class Upgrade:
    """The chain's steps on one file, and the bookkeeping that follows them into the plan."""

    def __init__(
        self,
        *,
        old: frozenset[tuple[str, ...]] = frozenset(),
        era: str | None = None,
        era_source: str = "--era",
        project_era: str | None = None,
    ) -> None:
        self.old = old
        """Keys to upgrade even where the merged schema has them: those an earlier pass
        upgraded to a custom config module, now merged for the check."""
        self.steps: list[eras.Step] = []
        """One per old key, in file order."""
        self.values: dict[str, Any] = {}
        """Old dotted key -> the value the file gave it."""
        self.overridden: frozenset[str] = frozenset()
        """v0.2.2 keys a legacy command-line flag set over the file (the flag wins)."""
        self.flags: dict[str, Any] = {}
        """Those keys with the flags' values, for the era defaults computed from other
        settings."""
        self.aliases: dict[str, str] = {}
        """v0.2.2 key the chain wrote (and the file did not) -> the old key that wrote it."""
        self.era = era
        """The era the user named (``--era YYYY-MM[-DD]``), over the one the file's evidence gives."""
        self.guess: era_defaults.EraGuess | None = None
        """When the file was written, as its keys and values tell."""
        self.defaults: list[era_defaults.EraDefault] = []
        """The defaults of the file's era that differ from v0.2.2's, for keys it omits."""
        self.written_defaults: dict[str, era_defaults.EraDefault] = {}
        """Those of them written into the document (v0.2.2 can say them), by dotted key."""
        self.stakes: era_stakes.Stakes | None = None
        """For a file nothing dates (read as v0.2.2, no ``--era``): what its era would decide."""
        self.day: str | None = None
        """The day the era defaults (and the flavor's era) were taken from; ``None``: v0.2.2."""
        self.dated: tuple[str, str] | None = None
        """``(day, evidence)`` when something besides the keys dates the file (a Forge app)."""
        self.project_era = project_era
        """The project's ``[tool.titan] era``: the era of a file nothing in it dates."""
        self.era_source = era_source if era is not None else "--era"
        """Who named the era the file is read in: ``--era``, the file's ``# titan: era``
        comment, or ``[tool.titan] era``."""

    # ----------------------------------------------------------------- before the check

    def adjust(self, document: dict, schema: SectionSpec) -> dict:
        """The document with every old key replaced by its v0.2.2 form and the era's defaults
        written for the keys it omits (``titan.schemas.era_chain``, as titan-validate reads
        it); a key the merged schema has (a custom module may declare one an older torchtitan
        also had) stays."""
        found = era_chain.upgrade(
            document,
            schema,
            old=self.old,
            era=self.era,
            project_era=self.project_era,
            dated=self.dated,
            flags=self.flags,
        )
        self.steps, self.guess = found.steps, found.guess
        if self.steps:
            old = {step.old for step in self.steps}
            self.values = {".".join(p): v for p, v in eras.leaves(document) if p in old}
        if self.era is None and found.era is not None:
            self.era, self.era_source = found.era, era_chain.PROJECT_SOURCE
        self.defaults, self.written_defaults = found.defaults, found.written_defaults
        # a file nothing dates: the report says what its era would decide
        self.stakes = era_stakes.stakes(document, self.guess) if found.day is None else None
        self.day = found.day
        return found.document

    @property
    def assumed(self) -> str | None:
        """The day the era defaults were taken from (``None``: v0.2.2, none applied)."""
        if self.era is not None:
            return era_defaults.parse_era(self.era)
        if self.guess is None or self.guess.current:
            return None
        return self.guess.date

    def dated_by(self) -> str:
        """What dated the file, as a report says it: the era given, or its first clues."""
        if self.era is not None or self.guess is None:
            return f"the {self.era_source} given"
        return era_defaults.dated_by(self.guess)

    def module(self) -> str | None:
        """A custom config module the chain wrote (fault-tolerance keys of v0.1.0)."""
        for step in self.steps:
            for new, value in step.writes:
                if new == ("job", "custom_config_module"):
                    return value
        return None

    def respan(self, check: FileCheck) -> None:
        """Point the keys the chain wrote at the old key's span, and re-point the validator's
        findings on them there (they fell back to the enclosing table, or the file)."""
        written = era_chain.wrote(self.steps, check.spans)
        for dotted, (old, span) in written.items():
            check.spans[tuple(dotted.split("."))] = span
            self.aliases.setdefault(dotted, old)
        if not written:
            return
        check.diagnostics = [era_chain.repoint(d, written) for d in check.diagnostics]
        check.diagnostics.sort(key=Diagnostic.sort_key)

    # ----------------------------------------------------------------- after the plan

    def record(self, plan: Any, check: FileCheck, *, outcome: type) -> None:
        """Outcomes (``outcome`` is ``titan.migrate.plan.migration_plan.KeyOutcome``, passed in by
        ``build_plan``), findings, TODOs and comments of the old keys in ``plan``; an old key
        fares as the v0.2.2 keys it wrote did, so this runs after :meth:`record_era` and the
        measurement (``titan.migrate.plan.measured``)."""
        if not self.steps:
            return
        for step in self.steps:
            key, value = step.dotted, self.values.get(step.dotted)
            span = _span(check, step.old, plan.source)
            if step.kind == "unportable" and step.severity == "error":
                # the run computed with it: the validator's error from the file as written
                # (``eras.refusals``) says what to do; the key is refused, not dropped
                plan.outcomes[key] = outcome(key, "rejected", (), step.why, step.era)
                plan.todo("", f"`{key} = {eras.toml_value(value)}` is not carried: {step.why}")
                continue
            if step.kind == "ignored":
                plan.outcomes[key] = outcome(key, "ignored", (), step.why, step.era)
                plan.diagnostics.append(
                    Diagnostic(
                        code="ignored-key",
                        severity=Severity.WARNING,
                        path=key,
                        message=f"`{key} = {eras.toml_value(value)}` is not carried: {step.why}",
                        hint=f"delete it (titan-validate --fix does); it is not turned into the "
                        f"setting it once was, which the run did not have ({step.era})",
                        span=span,
                    )
                )
                continue
            if step.kind == "unportable":
                plan.outcomes[key] = outcome(key, "dropped", (), step.why, step.era)
                plan.diagnostics.append(
                    Diagnostic(
                        code="dropped-key",
                        severity=Severity.WARNING,
                        path=key,
                        message=f"`{key} = {eras.toml_value(value)}` from an older torchtitan "
                        f"is not carried: {step.why}",
                        hint=f"{step.era}; set what you meant by hand in the registry function",
                        span=span,
                    )
                )
                plan.todo("", f"`{key} = {eras.toml_value(value)}` is not carried: {step.why}")
                continue
            plan.outcomes[key] = self._outcome(plan, step, outcome)
            plan.diagnostics.append(
                Diagnostic(
                    code="upgraded-key",
                    severity=Severity.INFO,
                    path=key,
                    message=f"`{key}` is from an older torchtitan: {eras.action(step)}",
                    hint=f"{step.why}; {step.era}",
                    span=span,
                )
            )
        for new in self.aliases:
            plan.outcomes.pop(new, None)  # the file did not write it: its old key says
        plan.outcomes = dict(sorted(plan.outcomes.items(), key=lambda kv: _line(check, kv[0])))
        plan.diagnostics.sort(key=Diagnostic.sort_key)
        self._comments(plan, check)

    def record_era(self, plan: Any, *, outcome: type) -> None:
        """The file's assumed era on the plan; an outcome and a finding per era default (written,
        or one v0.2.2 cannot say, which is an error: the legacy run had it)."""
        day = self.assumed
        plan.era = {
            "assumed": day,
            "source": self.era_source if self.era is not None else "evidence",
            "evidence": [
                {"key": c.key, "says": c.says, "since": c.since, "until": c.until}
                for c in (self.guess.evidence if self.guess is not None else ())
            ],
            "stale": [c.key for c in (self.guess.stale if self.guess is not None else ())],
        }
        self._undated(plan)
        # the validator's own (evidence-dated) findings give way to the migration's era
        plan.diagnostics = [d for d in plan.diagnostics if d.code != "era-default-lost"]
        if day is None:
            return
        dated = self.dated_by()
        again = f"pass --era YYYY-MM to date the file otherwise (dated {day} by {dated})"
        first = Span(file=plan.source, line=1, col=1)
        for found in self.defaults:
            if found.key in self.overridden:
                continue  # a command-line flag set it: the legacy run had the flag's value
            value = eras.toml_value(found.value)
            if found.key in self.written_defaults:
                booked = plan.outcomes.get(found.key)
                paths = booked.paths if booked is not None else ()
                if booked is None or booked.status in CARRIED:
                    plan.outcomes[found.key] = outcome(
                        found.key, "era-default", paths, f"`{found.key} = {value}`: {found.why}"
                    )
                plan.diagnostics.append(
                    Diagnostic(
                        code="era-default",
                        severity=Severity.INFO,
                        path=found.key,
                        message=f"`{found.key}` is not in the file; its era's default "
                        f"`{value}` is written: {found.why}",
                        hint=f"write `{found.key}` in the TOML to choose another value; {again}",
                        span=plan.spans.get(found.key, first),
                    )
                )
                continue
            plan.outcomes[found.key] = outcome(found.key, "rejected", (), found.why)
            plan.todo("", f"`{found.key}` ran with its era's default {value}: {found.why}")
            message, hint = era_defaults.lost_text(found, day=day, dated_by=dated)
            plan.diagnostics.append(
                Diagnostic(
                    code="era-default-lost",
                    severity=Severity.ERROR,
                    path=found.key,
                    message=message,
                    hint=hint,
                    span=plan.spans.get(found.key, first),
                )
            )

    def _undated(self, plan: Any) -> None:
        """A file nothing dates, whose run the era would change: the report says what depends
        on it, and the plan is not lossless until ``--era`` or ``[tool.titan] era`` says when
        the file was written."""
        stakes = self.stakes
        if stakes is None or not stakes.any:
            return
        at_stake = [
            {
                "key": d.key,
                "value": d.value,
                "until": d.flip.until,
                "commit": d.flip.commit,
                "why": d.flip.why,
            }
            for d in stakes.defaults
        ] + [
            {
                "key": "model.flavor",
                "value": {p: _plain(v) for p, v in c.sets.items()} if c.sets else None,
                "until": c.until,
                "commit": c.commit,
                "why": c.lost or c.why,
            }
            for c in stakes.flavor
        ]
        plan.era.update(undated=True, floor=stakes.floor, at_stake=at_stake)
        listed = "; ".join(_stake_text(item) for item in at_stake[:4])
        more = f"; and {len(at_stake) - 4} more" if len(at_stake) > 4 else ""
        plan.diagnostics.append(
            Diagnostic(
                code="era-undated",
                severity=Severity.WARNING,
                path="",
                message=f"nothing in the file dates it (its keys allow any day from "
                f"{stakes.floor}), so it is read as v0.2.2; a file written earlier ran "
                f"otherwise: {listed}{more}",
                hint="say when it was written: --era v0.2.2 (or the release or month it ran "
                'with), or for every file of the project [tool.titan] era = "v0.2.2" in '
                "pyproject.toml",
                span=Span(file=plan.source, line=1, col=1),
            )
        )

    def _outcome(self, plan: Any, step: eras.Step, outcome: type) -> Any:
        """``upgraded`` at the paths its v0.2.2 keys went to, unless one of them was not
        carried: then that key's status and reason (an old float8 option without its
        converter is inert now as it was then)."""
        key = step.dotted
        found = [plan.outcomes.get(".".join(new)) for new, _ in step.writes]
        paths = tuple(dict.fromkeys(p for o in found if o is not None for p in o.paths))
        for new in found:
            if new is not None and new.status not in CARRIED:
                note = f"now `{new.key}`, which is {new.status}: {new.note}"
                return outcome(key, new.status, new.paths, note, step.era)
        note = eras.action(step)
        replaced = [".".join(new) for new, _ in step.writes if ".".join(new) in self.overridden]
        if replaced:
            note += "; then the command line set " + ", ".join(f"`--{k}`" for k in replaced)
        return outcome(key, "upgraded", paths, note, step.era)

    def _comments(self, plan: Any, check: FileCheck) -> None:
        """The old keys' comments go where their values went (the plan saw no such key)."""
        if not check.text or check.form != "toml":
            return
        from titan.migrate.tomledit.comments import toml_comments

        found = toml_comments(check.text)
        for step in self.steps:
            outcome = plan.outcomes.get(step.dotted)
            comment = found.get(step.old)
            if comment is None or outcome is None or not outcome.paths:
                continue
            path = outcome.paths[0]
            if "[" in path:
                continue  # inside the converter list: not addressable by a path
            lines, trailing = plan.comments.get(path, ((), None))
            plan.comments[path] = (lines + tuple(comment.leading), trailing or comment.trailing)


def _plain(value: Any) -> Any:
    """A flavor field's era value as JSON holds it (a size the tokenizer gave is a phrase)."""
    from titan.schemas.era_flavors import FromTokenizer

    return "<the tokenizer's size>" if isinstance(value, FromTokenizer) else value


def _stake_text(item: dict[str, Any]) -> str:
    """One setting at stake, as the finding lists it."""
    if item["key"] == "model.flavor":
        value = item["value"]
        said = ", ".join(
            f"{p} = {v if str(v).startswith('<') else eras.toml_value(v)}"
            for p, v in (value or {}).items()
        )
        return f"the flavor had {said or item['why']} before {item['until']} ({item['commit']})"
    value = eras.toml_value(item["value"])
    return f"`{item['key']}` was {value} before {item['until']} ({item['commit']})"


def _span(check: FileCheck, parts: tuple[str, ...], file: str) -> Span:
    found = check.spans.get(parts)
    if found is None:
        return Span(file=file, line=1, col=1)
    return Span(file=file, line=found.line, col=found.col, end_col=found.end_col)


def _line(check: FileCheck, key: str) -> tuple[int, int]:
    found = check.spans.get(tuple(key.split(".")))
    return (found.line, found.col) if found is not None else (1 << 30, 0)
