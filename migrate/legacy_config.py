"""Legacy JobConfig sections to the config ``titan-train`` runs, for a program that holds them.

An RL actor (TorchForge's trainer actor reads the ``trainer:`` block of its app YAML into a
dict) calls :func:`trainer_config` with the sections, or with the path of a legacy TOML or of a
Forge app YAML, and gets the ``Trainer.Config`` that ``titan-train --job.config_file`` would
train: the same migration plan (:func:`titan.migrate.plan.build.build_plan`) made live by the
same renderer (:func:`titan.migrate.targets.live.instantiate`), so the two cannot differ.

A misspelt key or a wrong value raises :class:`LegacyConfigError`, whose text is what
``titan-validate`` prints for it (at ``file:line:col`` for a file; at the key path for a dict,
which has no positions). Torch is not imported.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping, Sequence
from typing import Any

from titan.schemas.diagnostics import Diagnostic

SECTIONS_NAME = "trainer"
"""How findings on sections given as a dict name their source."""


class LegacyConfigError(ValueError):
    """The legacy sections do not make a config; ``str()`` is titan-validate's report."""

    def __init__(self, report: str, *, diagnostics: Sequence[Diagnostic]) -> None:
        super().__init__(report)
        self.diagnostics = tuple(diagnostics)
        """Every finding, errors and warnings, as data."""


def trainer_config(
    source: Mapping[str, Any] | str | os.PathLike[str],
    *,
    ngpu: int | None = None,
    overrides: Sequence[str] = (),
    name: str = SECTIONS_NAME,
) -> Any:
    """The ``Trainer.Config`` of legacy sections (a dict) or of a legacy TOML or app YAML path,
    checked for ``ngpu`` processes (``None`` skips the world-size rules) with v0.2.2-style
    ``overrides`` (``--training.steps 5``) applied. ``name`` names a dict in findings.

    Raises :class:`LegacyConfigError` when a check finds an error."""
    from titan.migrate.plan.build import build_plan
    from titan.migrate.targets.live import instantiate
    from titan.schemas.toml_check import CheckOptions

    options = CheckOptions(ngpu=ngpu)
    if isinstance(source, str | os.PathLike):
        plan = build_plan(os.fspath(source), overrides=overrides, options=options)
    else:  # anything else is sections: one that is not a mapping is a finding
        plan = build_plan(name, sections=source, overrides=overrides, options=options)
    if plan.root is None or plan.errors():
        given = not isinstance(source, str | os.PathLike)
        report = _sections_report(plan, name) if given else _report(plan)
        raise LegacyConfigError(report, diagnostics=plan.diagnostics)
    return instantiate(plan)


def _sections_report(plan: Any, name: str) -> str:
    """The findings on sections given in code: each at its key path under ``name`` (a dict
    has no file, lines or columns), then the count."""
    from titan.schemas.diagnostics import Diagnostic, Severity

    lines = []
    findings = sorted(plan.diagnostics, key=Diagnostic.sort_key)
    for d in findings:
        where = f"{name}.{d.path}" if d.path else name
        message, hint = _in_code(d)
        lines.append(f"{where}: {d.severity.value}[{d.code}] {message}")
        if hint:
            lines.append(f"  = hint: {hint}")
        lines.append("")
    errors = sum(d.severity is Severity.ERROR for d in findings)
    warnings = sum(d.severity is Severity.WARNING for d in findings)
    plural = lambda n, word: f"{n} {word}{'s' if n != 1 else ''}"  # noqa: E731
    lines.append(
        f"Found {plural(errors, 'error')} and {plural(warnings, 'warning')} in the sections "
        f"given as {name!r} in code."
    )
    return "\n".join(lines)


def _in_code(finding: Diagnostic) -> tuple[str, str | None]:
    """A finding's message and hint as they read for sections given in code: the undated
    warning speaks of the sections, not of a file and its command line."""
    if finding.code != "era-undated":
        return finding.message, finding.hint
    message = finding.message.replace("nothing in the file dates it", "nothing dates them")
    for old, new in [
        ("(its keys", "(their keys"),
        ("so it is read", "so they are read"),
        ("a file written earlier", "sections written earlier"),
    ]:
        message = message.replace(old, new)
    return message, "sections given in code carry no date: they are read as v0.2.2"


def _report(plan: Any) -> str:
    """The findings as titan-validate's text output (no colour)."""
    from titan.schemas.diagnostics import Diagnostic
    from titan.schemas.render import render_text

    out = io.StringIO()
    sources = {plan.source: plan.text} if plan.text is not None else {}
    # A plan without a config always holds the error that stopped it (unreadable, not parsed).
    render_text(
        sorted(plan.diagnostics, key=Diagnostic.sort_key), files=1, out=out, sources=sources
    )
    return out.getvalue().rstrip("\n")
