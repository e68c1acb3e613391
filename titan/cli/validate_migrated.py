"""``titan-validate FILE.toml --as-registry``: also check the config the TOML migrates to.

The TOML is migrated in memory (``titan.migrate.plan.build`` + the live renderer, exactly what
``titan-train --job.config_file`` runs) and the resulting ``Trainer.Config`` goes through the
registry-side checks (``titan.config.check``: strict field types, structure, the shared rules).
Findings the legacy check already made (same code at the same key) are not repeated; the others
point at the TOML key whose value went to the offending field.
"""

from __future__ import annotations

from titan.schemas.diagnostics import Diagnostic, Severity, Span
from titan.schemas.toml_check import CheckOptions, FileCheck


def registry_findings(
    path: str, shown: str, result: FileCheck, options: CheckOptions, *, target: str = "titan"
) -> list[Diagnostic]:
    """The migrated config's findings that the legacy check did not already report.

    For another ``target`` than titan (``torchtitan==0.3.0``), the config cannot be built here
    (that trainer is not installed beside titan): the findings are what the migration for it
    reports, everything 0.3.0 cannot express or does otherwise."""
    from titan.migrate.plan.build import build_plan

    plan = build_plan(path, options=options, shown=shown, era=options.era)
    if plan.root is None:
        return []
    if target != "titan":
        from titan.migrate.targets.choice import converter

        seen = {(d.code, d.path) for d in result.diagnostics}
        retargeted = converter(target)(plan)
        return [d for d in retargeted.diagnostics if (d.code, d.path) not in seen]
    from titan.cli import user_code
    from titan.config.check import check_config

    owners = {p: o.key for o in plan.outcomes.values() for p in o.paths}

    def locate(config_path: str) -> Span | None:
        key = owners.get(config_path)
        while key is None and "." in config_path:
            config_path = config_path.rpartition(".")[0]
            key = owners.get(config_path)
        parts = tuple(key.split(".")) if key else ()
        while parts:
            found = result.spans.get(parts)
            if found is not None:
                return Span(file=shown, line=found.line, col=found.col)
            parts = parts[:-1]
        return None

    seen = {(d.code, d.path) for d in result.diagnostics}
    found = [  # what the migration itself cannot carry: the TOML alone would pass
        d for d in plan.diagnostics if d.severity is Severity.ERROR and (d.code, d.path) not in seen
    ]
    seen |= {(d.code, d.path) for d in found}
    try:
        config = user_code.build(plan, allow_import=options.allow_import, toml=path)
    except (user_code.ImportNotAllowed, user_code.ImportFailed) as stop:
        return [*found, *user_code_findings(stop, locate=locate, shown=shown)]
    for finding in check_config(config, ngpu=options.ngpu, locate=locate):
        legacy_key = owners.get(finding.path, finding.path)
        if (finding.code, legacy_key) in seen or (finding.code, finding.path) in seen:
            continue
        found.append(
            Diagnostic(
                code=finding.code,
                severity=finding.severity,
                path=finding.path,
                message=f"(as migrated) {finding.message}",
                hint=finding.hint,
                span=finding.span or Span(file=shown, line=1, col=1),
            )
        )
    return found


def user_code_findings(stop: Exception, *, locate, shown: str) -> list[Diagnostic]:
    """Why the migrated config was not built: the project's own code it imports needs
    ``--allow-import`` (a warning: the TOML's own checks ran), or failed to import (an error)."""
    from titan.cli import user_code

    if isinstance(stop, user_code.ImportFailed):
        span = stop.span or locate(stop.path) or Span(file=shown, line=1, col=1)
        return [_user_code(Severity.ERROR, stop.message, stop.hint, span=span)]
    assert isinstance(stop, user_code.ImportNotAllowed)
    return [
        _user_code(
            Severity.WARNING,
            f"not checked as migrated: building the config imports `{module}`, the project's "
            "own code, which titan-validate imports only with --allow-import",
            f"pass --allow-import to import {module} and check the migrated config",
            span=locate(path) or Span(file=shown, line=1, col=1),
        )
        for module, path in stop.modules
    ]


def _user_code(severity: Severity, message: str, hint: str, *, span: Span) -> Diagnostic:
    return Diagnostic(
        code="user-code", severity=severity, path="", message=message, hint=hint, span=span
    )
