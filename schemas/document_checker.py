"""The checks on each key of a parsed legacy document, against the merged schema: unknown keys
(with where they moved), wrong types and choices, out-of-range numbers, deprecated keys, and the
values and era defaults v0.2.2 cannot express.

:class:`DocumentChecker` also holds the findings of one file and places them: a key path becomes
the ``file:line:col`` of its key, or of its nearest written parent.
"""

from __future__ import annotations

import typing
from typing import Any, Literal

from titan.schemas import ranges, typecheck
from titan.schemas.diagnostics import Diagnostic, Severity, Span
from titan.schemas.legacy_spec import LEGACY_RANGES
from titan.schemas.spans import KeySpan
from titan.schemas.spec import SectionSpec, schema_paths
from titan.schemas.suggest import suggest
from titan.schemas.value_hints import choice_hint, value_hint


class DocumentChecker:
    """Walks a document against a schema, collecting diagnostics with spans."""

    def __init__(self, *, file: str, spans: dict[tuple, KeySpan]) -> None:
        self.file = file
        self.spans = spans
        self.diagnostics: list[Diagnostic] = []
        self._schema: SectionSpec | None = None
        self._document: dict = {}
        self.stale: dict[str, str] = {}
        """Old keys the loader of the file's era did not read -> why (``lost_era_defaults``)."""

    def span_of(self, parts: tuple) -> Span | None:
        """The span of a key path, or of its nearest written ancestor."""
        for end in range(len(parts), 0, -1):
            found = self.spans.get(parts[:end])
            if found is not None:
                return Span(file=self.file, line=found.line, col=found.col, end_col=found.end_col)
        return None

    def report(self, finding: Diagnostic) -> None:
        """A finding located elsewhere (in ``pyproject.toml``), kept as it is."""
        self.diagnostics.append(finding)

    def add(
        self,
        code: str,
        parts: tuple,
        message: str,
        hint: str | None = None,
        *,
        severity: Severity = Severity.ERROR,
        path: str | None = None,
    ) -> None:
        """A finding at the key path ``parts`` (the top of the file when empty); ``path``
        names it otherwise than the key path does."""
        span = (self.span_of(parts) if parts else None) or Span(file=self.file, line=1, col=1)
        dotted = path if path is not None else ".".join(str(p) for p in parts)
        self.diagnostics.append(
            Diagnostic(
                code=code, severity=severity, path=dotted, message=message, hint=hint, span=span
            )
        )

    def walk(self, data: dict, section: SectionSpec, parts: tuple) -> None:
        """Check every key of ``data`` (the section at ``parts``) against ``section``."""
        if not parts:
            self._schema = section
            self._document = data
        for key, value in data.items():
            here = (*parts, key)
            field = section.field(key)
            if field is None:
                self.unknown(here, value)
            elif isinstance(field.annotation, SectionSpec):
                if isinstance(value, dict):
                    self.walk(value, field.annotation, here)
                else:
                    dotted = ".".join(here)
                    self.add(
                        "wrong-type",
                        here,
                        f"`{dotted}` must be a table [{dotted}], got {typecheck.value_name(value)}",
                        _table_hint(dotted, value),
                    )
            elif not typecheck.matches(value, field.annotation):
                self.mismatch(here, value, field.annotation)
            elif isinstance(value, int | float):
                self.bounds(here, value)

    def bounds(self, parts: tuple, value: float) -> None:
        """A well-typed number outside the range of its key (``titan.schemas.ranges``)."""
        dotted = ".".join(parts)
        finding = ranges.out_of_range(
            value, LEGACY_RANGES.get(dotted), path=dotted, span=self.span_of(parts)
        )
        if finding is not None:
            self.diagnostics.append(finding)

    def unknown(self, parts: tuple, value: Any) -> None:
        """A key or section the schema does not have: where it moved, or what was meant."""
        dotted = ".".join(parts)
        is_table = isinstance(value, dict)
        if dotted in self.stale:
            self.add(
                "ignored-key",
                parts,
                f"`{dotted}` did nothing in this file's run: {self.stale[dotted]}",
                "delete it (titan-validate --fix does; titan-migrate does not carry it): "
                "turning it into the setting it once was would change the run",
                severity=Severity.WARNING,
            )
            return
        if is_table and value and _is_old_table(parts):
            # [float8], [quantize.dense.float8]...: each key went somewhere else, so each is
            # reported at its own line with its own destination.
            for key, item in value.items():
                self.unknown((*parts, key), item)
            return
        if not is_table and self.era_value(parts, value, old=True):
            return
        # Only files with unknown keys pay for listing every path of the schema.
        found = suggest(
            parts,
            schema_paths(self._schema),
            is_table=is_table,
            value=value,
            document=self._document,
            schema=self._schema,
        )
        kind = "section" if is_table else "key"
        where = f"[{'.'.join(parts[:-1])}]" if len(parts) > 1 else "the top level"
        message = (
            f"unknown {kind} `{dotted}`"
            if is_table or len(parts) == 1
            else f"unknown key `{parts[-1]}` in {where}"
        )
        if found.code == "moved-key":
            message = f"`{dotted}` is not a v0.2.2 {kind}"
        self.add(found.code, parts, message, found.hint)

    def era_value(self, parts: tuple, value: Any, *, old: bool, annotation: Any = None) -> bool:
        """A value an older era read otherwise (``titan.schemas.moved_keys`` ``SPLITS`` and
        ``REFUSALS``): a comma-separated string its loader split, or a value v0.2.2 cannot
        express; False when it is neither."""
        from titan.schemas import eras

        step = eras.translate(parts, value, self._document) if old else None
        step = step if old else eras.value_step(parts, value)
        if step is None or (step.kind == "upgraded" and old):
            return False  # an old key's own moved-key finding says what it becomes
        shown = f"`{'.'.join(parts)} = {eras.toml_value(value)}`"
        if step.kind == "upgraded":
            ((_, names),) = step.writes
            said = value_hint(parts, value, annotation, self._document)
            era = (
                f"{step.why} ({step.era}): titan-migrate reads it as `{parts[-1]} = "
                f"{eras.toml_value(names)}`"
            )
            self.add(
                "wrong-type",
                parts,
                f"{shown} is a comma-separated string; v0.2.2 takes a list",
                f"{said}; {era}" if said else era,
            )
            return True
        return step.severity == "error"  # reported from the file as written: refusals()

    def era_pragma(self, text: str | None) -> str | None:
        """The era the file's ``# titan: era`` comment names (a finding when it names none)."""
        from titan.schemas import era_pragma

        found = era_pragma.find(text)
        if found is None:
            return None
        if found.problem is not None:
            self.diagnostics.append(
                Diagnostic(
                    code="invalid-value",
                    severity=Severity.ERROR,
                    path="",
                    message=f"`# titan: era = {found.value}` names no era: {found.problem}",
                    hint="write a release (v0.2.1), a month (2025-06) or a day (2025-06-04) "
                    "after `# titan: era =`",
                    span=Span(file=self.file, line=found.line, col=1),
                )
            )
            return None
        return found.value

    def lost_era_defaults(
        self,
        document: dict,
        flat: list,
        *,
        era: str | None,
        era_source: str = "--era",
        project_era: str | None = None,
        dated: tuple[str, str] | None = None,
    ) -> None:
        """Defaults of the file's era that v0.2.2 cannot say, for keys it omits: the run used
        them (a .model tokenizer, a removed dataset), so they are errors, as in titan-migrate.
        ``era`` (``--era``) dates the file instead of its evidence; ``project_era`` (``[tool.titan]
        era``) dates a file its evidence does not; ``dated`` is evidence besides its keys."""
        from titan.schemas import era_defaults

        guess = era_defaults.with_evidence(era_defaults.date_file(document, flat), dated)
        source = era_source
        if era is None and guess.current and project_era is not None:
            era, source = project_era, "[tool.titan] era"
        day = era_defaults.parse_era(era) if era is not None else guess.date
        # a Forge app (dated by its shape) was read by Forge's own loader, which skipped keys
        self.stale = era_defaults.stale_keys(document, day, flat, skipping=dated is not None)
        if era is None and guess.current:
            return
        dated = source if era is not None else era_defaults.dated_by(guess)
        self.era_flavor(document, day, dated)
        for found in era_defaults.era_defaults(document, day, skipping=dated is not None):
            if found.portable:
                continue
            message, hint = era_defaults.lost_text(found, day=day, dated_by=dated)
            parts = tuple(found.key.split("."))
            span = self.span_of(parts[:1]) or Span(file=self.file, line=1, col=1)
            self.diagnostics.append(
                Diagnostic(
                    code="era-default-lost",
                    severity=Severity.ERROR,
                    path=found.key,
                    message=message,
                    hint=hint,
                    span=span,
                )
            )

    def era_flavor(self, document: dict, day: str, dated: str) -> None:
        """The model the file's flavor built on ``day``, where it is not v0.2.2's: what titan
        cannot build is an error (as in titan-migrate); what it builds is a note, since
        torchtitan v0.2.2 would read the same file as another model."""
        from titan.schemas import flavor_eras

        model = document.get("model")
        name = model.get("name", "llama3") if isinstance(model, dict) else "llama3"
        flavor = model.get("flavor", "debugmodel") if isinstance(model, dict) else "debugmodel"
        if not isinstance(name, str) or not isinstance(flavor, str):
            return
        found = flavor_eras.flavor_at(name, flavor, day)
        if not found.differs:
            return
        parts = ("model", "flavor")
        shown = f"`model.flavor = {flavor!r}`".replace("'", '"')
        for change in found.changes:
            if change.lost and not change.init_only:
                self.add(
                    "era-flavor-lost",
                    parts,
                    f"{shown} built another model on {day} than titan can: {change.lost} "
                    f"({change.era})",
                    f"{change.why}; keep this run on a torchtitan {change.era}, or accept "
                    f"v0.2.2's {flavor}; pass --era YYYY-MM to date the file otherwise (dated "
                    f"{day} by {dated})",
                )
        if found.sets:
            said = ", ".join(f"{p} = {_toml(v)}" for p, v in found.sets.items())
            self.add(
                "era-flavor",
                parts,
                f"{shown} built another model on {day} than it does at v0.2.2: {said}",
                "titan-migrate writes that model and titan-train builds it from this file; "
                f"torchtitan v0.2.2 would build its own {flavor} (dated {day} by {dated})",
                severity=Severity.INFO,
            )

    def refusals(self, document: dict, flat: list) -> None:
        """Values the run computed with that v0.2.2 cannot express, from the file as written
        (the migrator checks the upgraded document, where such a key is no longer)."""
        from titan.schemas import eras

        for step in eras.refusals(document, flat):
            if step.dotted in self.stale:
                continue  # its run did without it: nothing was computed with it
            shown = f"`{step.dotted} = {eras.toml_value(eras.get(document, step.old))}`"
            code = "invalid-choice" if eras.rule_for(step.old) is None else "moved-key"
            message = f"{shown} cannot be expressed at v0.2.2: {step.why}"
            self.add(code, step.old, message, f"{step.hint}; {step.era}")

    def mismatch(self, parts: tuple, value: Any, annotation: Any) -> None:
        """A value of the wrong type, or a string that is none of the key's choices."""
        if self.era_value(parts, value, old=False, annotation=annotation):
            return
        dotted = ".".join(parts)
        choices = _literal_choices(annotation)
        if choices and isinstance(value, str):
            message = f"`{dotted}` is {typecheck.value_name(value)}; expected {typecheck.type_name(annotation)}"
            self.add("invalid-choice", parts, message, choice_hint(parts, value, choices))
            return
        message = f"`{dotted}` must be {typecheck.type_name(annotation)}, got {typecheck.value_name(value)}"
        self.add(
            "wrong-type",
            parts,
            message + _element_detail(value, annotation),
            value_hint(parts, value, annotation, self._document),
        )

    def deprecations(self, document: dict) -> None:
        """Keys v0.2.2 still reads but ignores or copies elsewhere."""
        model = document.get("model")
        if isinstance(model, dict) and isinstance(model.get("tokenizer_path"), str):
            self.add(
                "deprecated-key",
                ("model", "tokenizer_path"),
                "`model.tokenizer_path` is deprecated; the old loader copied it into model.hf_assets_path",
                "set `model.hf_assets_path` to the folder that holds tokenizer.json instead",
                severity=Severity.WARNING,
            )
        experimental = document.get("experimental")
        if isinstance(experimental, dict) and experimental.get("custom_args_module"):
            from titan.schemas import eras

            module = experimental["custom_args_module"]
            step = eras.value_step(("experimental", "custom_args_module"), module)
            hint = "use `[job] custom_config_module` instead"
            if step is not None:
                hint = f"{eras.action(step)}: {step.why}; {step.era}; titan-migrate carries it"
            self.add(
                "deprecated-key",
                ("experimental", "custom_args_module"),
                "`experimental.custom_args_module` is deprecated: v0.2.2 does not add the "
                "module's sections",
                hint,
                severity=Severity.WARNING,
            )
        job = document.get("job")
        if isinstance(job, dict) and "config_file" in job:
            self.add(
                "ignored-key",
                ("job", "config_file"),
                "`job.config_file` inside a TOML is ignored; the file to load is named on the command line",
                "delete the key",
                severity=Severity.WARNING,
            )


def _literal_choices(annotation: Any) -> tuple:
    """The choices of a ``Literal`` annotation, or of the ``Literal`` members of a union."""
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return typing.get_args(annotation)
    return tuple(
        c
        for arg in typing.get_args(annotation)
        if typing.get_origin(arg) is Literal
        for c in typing.get_args(arg)
    )


def _element_detail(value: Any, annotation: Any) -> str:
    """For a list with one bad element, say which (the list itself had the right shape): in a
    list of lists, the element inside the inner list (``element [0][1] is integer 5``)."""
    found = _bad_element(value, annotation)
    if found is None:
        return ""
    where, item = found
    position = str(where[0]) if len(where) == 1 else "".join(f"[{i}]" for i in where)
    return f": element {position} is {typecheck.value_name(item)}"


def _bad_element(value: Any, annotation: Any) -> tuple[tuple[int, ...], Any] | None:
    """The position and value of the first element of ``value`` (a list, or a list of lists)
    that does not match ``annotation``'s element type; None when there is none."""
    if not isinstance(value, list):
        return None
    for arg in [annotation, *typing.get_args(annotation)]:
        if typing.get_origin(arg) is list and typing.get_args(arg):
            inner = typing.get_args(arg)[0]
            for index, item in enumerate(value):
                if not typecheck.matches(item, inner):
                    deeper = _bad_element(item, inner)
                    if deeper is not None:
                        return (index, *deeper[0]), deeper[1]
                    return (index,), item
    return None


def _table_hint(dotted: str, value: Any) -> str:
    """For a section written as a value: how to write it as a table."""
    from titan.schemas import eras

    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return (
            f"write `[{dotted}]` with one pair of brackets: `[[{dotted}]]` declares an array of "
            "tables"
        )
    return (
        f"write its keys under a `[{dotted}]` header (v0.2.2 silently replaced "
        f"`{dotted} = {eras.toml_value(value)}` with the defaults)"
    )


def _is_old_table(parts: tuple) -> bool:
    """Whether ``parts`` names a table only older eras had (each of its keys moved)."""
    from titan.schemas import eras  # only files with unknown sections get here

    return eras.is_old_table(parts)


def _toml(value: Any) -> str:
    """A value as TOML spells it."""
    from titan.schemas.eras import toml_value

    return toml_value(value)
