"""The migration report: what became of every key, and the findings, as text or JSON."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TextIO

from titan.migrate.plan.migration_plan import Plan
from titan.schemas.diagnostics import Diagnostic, Severity, Span

NOT_CARRIED = ("renamed", "dropped", "inert", "ignored", "rejected", "changed")
"""Outcomes a reader must see one by one (the others are counted)."""


LISTED = ("upgraded", "era-default", *NOT_CARRIED)
"""Outcomes the text report lists key by key: the not-carried ones, the keys of an older
torchtitan carried through their v0.2.2 form (each with its era), and the defaults of the file's
era written for keys it omits."""


def summary(plan: Plan) -> dict[str, int]:
    """How many keys had each outcome."""
    counts = dict.fromkeys(
        ("carried", "default", "structural", "upgraded", "era-default", *NOT_CARRIED), 0
    )
    for outcome in plan.outcomes.values():
        counts[outcome.status] += 1
    return counts


def exit_status(plans: Sequence[Plan], *, strict: bool) -> int:
    """1 when a file was not migrated or has errors (with ``strict``: anything not carried)."""
    if any(not p.ok or p.errors() for p in plans):
        return 1
    if strict and not all(p.lossless() for p in plans):
        return 1
    return 0


def note_renamed_functions(plans: Sequence[Plan], *, names: Sequence[str]) -> None:
    """Give each plan its function name in the module, saying so (and why) where it had to
    change: an earlier file's function, a class the module defines or a model registry package
    it imports had the name."""
    from titan.migrate.codegen.bindings import function_renames

    reasons = function_renames(plans)
    for plan, name, why in zip(plans, names, reasons, strict=True):
        if name != plan.function:
            plan.diagnostics.append(
                Diagnostic(
                    code="renamed-function",
                    severity=Severity.INFO,
                    path="",
                    message=f"the registry function is `{name}`: {why}",
                    hint=f"run it as `--config {name}`; rename the TOML to give its function "
                    "a name of its own",
                    span=Span(file=plan.source, line=1, col=1),
                )
            )
            plan.function = name


def _returns(plan: Plan) -> str:
    return plan.root.cls.rpartition(":")[2] if plan.root is not None else "-"


def render_text(
    plans: Sequence[Plan],
    diagnostics: Sequence[Diagnostic],
    *,
    out: TextIO,
    color: bool,
    quiet: bool = False,
) -> None:
    """Per file: the function, key counts and every key not carried as is; then the findings."""
    if not quiet:
        for plan in plans:
            out.write(_plan_text(plan))
    from titan.schemas import render

    sources = {p.source: p.text for p in plans if p.text is not None}
    if diagnostics or not quiet:
        render.render(
            diagnostics,
            format="text",
            files=len(plans),
            out=out,
            sources=sources,
            color=color,
            tool="titan-migrate",
        )


def _plan_text(plan: Plan) -> str:
    if plan.root is None:
        return f"{plan.source}: not migrated (see the errors below)\n"
    counts = summary(plan)
    verdict = "lossless" if plan.lossless() else "NOT lossless"
    if plan.era.get("undated") and not plan.errors():
        verdict += " (undated: its era decides the run)"
    lines = [
        f"{plan.source} -> {plan.function}() returns {_returns(plan)}: {verdict}",
        "  " + ", ".join(f"{n} {status}" for status, n in counts.items() if n),
    ]
    if plan.era.get("assumed"):
        lines.append(f"  era: {_era_line(plan.era)}")
    elif plan.era.get("undated"):
        keys = ", ".join(dict.fromkeys(f"`{item['key']}`" for item in plan.era["at_stake"]))
        lines.append(
            f"  era: undated, read as v0.2.2 (its keys allow any day from {plan.era['floor']}); "
            f"a file written earlier ran with other {keys} (--era to say when)"
        )
    if plan.era.get("flavor"):
        flavor = plan.era["flavor"]
        said = ", ".join(f"{p} = {_toml(v)}" for p, v in flavor["sets"].items())
        if said:
            lines.append(f"  model: {flavor['flavor']} as its era built it: {said}")
    rows = [o for o in plan.outcomes.values() if o.status in LISTED]
    width = max((len(o.key) for o in rows), default=0)
    status_width = max([8, *(len(o.status) for o in rows)])
    for outcome in rows:
        target = f" -> {outcome.paths[0]}" if outcome.paths else ""
        era = f" [{outcome.era}]" if outcome.era else ""
        lines.append(
            f"  {outcome.status:<{status_width}} {outcome.key:<{width}}{target}  "
            f"{outcome.note}{era}"
        )
    for setting, why in plan.behaviour_changes:
        lines.append(f"  behaviour change {setting}: {why}")
    return "\n".join(lines) + "\n"


def _toml(value: Any) -> str:
    from titan.schemas.eras import toml_value

    return toml_value(value)


def _era_line(era: dict[str, Any]) -> str:
    """When the file was dated, and from what: the day its era's defaults were taken from."""
    if era["source"] != "evidence":
        from titan.schemas.era_clues import RELEASES

        release = next((name for name, day in RELEASES.items() if day == era["assumed"]), None)
        named = f"{release}, " if release is not None else ""
        return f"{era['assumed']} ({named}{era['source']})"
    if era["evidence"] and era["evidence"][0]["key"] == "(the app)":  # a Forge app's shape
        return f"{era['assumed']}, {era['evidence'][0]['says']} (--era to say otherwise)"
    keys = ", ".join(f"`{clue['key']}`" for clue in era["evidence"][:4])
    more = f" and {len(era['evidence']) - 4} more" if len(era["evidence"]) > 4 else ""
    return f"{era['assumed']}, the latest day its {keys}{more} allow (--era to say otherwise)"


def as_dict(plan: Plan) -> dict[str, Any]:
    from titan.schemas.render import as_dict as finding_dict

    return {
        "file": plan.source,
        "function": plan.function if plan.root is not None else None,
        "returns": plan.root.cls if plan.root is not None else None,
        "target": plan.target,
        "lossless": plan.lossless(),
        "counts": summary(plan),
        "keys": {
            key: {"status": o.status, "paths": list(o.paths), "note": o.note}
            | ({"era": o.era} if o.era else {})
            for key, o in plan.outcomes.items()
        },
        "upgraded": [
            {"key": key, "era": o.era, "paths": list(o.paths), "now": o.note}
            for key, o in plan.outcomes.items()
            if o.status == "upgraded"
        ],
        "era": plan.era,
        "behaviour_changes": [
            {"setting": setting, "why": why} for setting, why in plan.behaviour_changes
        ],
        "todos": {path: list(texts) for path, texts in plan.todos.items()},
        "diagnostics": [finding_dict(d) for d in plan.diagnostics],
    }


def render_json(plans: Sequence[Plan], *, out: TextIO) -> None:
    """Every file's plan (each key's outcome, the findings) and the verdict, as one object."""
    import json

    document = {
        "files": [as_dict(p) for p in plans],
        "lossless": all(p.lossless() for p in plans),
        "errors": sum(len(p.errors()) for p in plans),
    }
    out.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


# --------------------------------------------------------------------------- many files at once

FILE_OUTCOMES = ("lossless", "upgraded", "undated", "reported", "failed")
"""A file's line in the summary of a multi-file run: ``lossless`` every key carried as is (or
already the default); ``upgraded`` carried, some keys through the era chain from an older
torchtitan; ``undated`` carried as a v0.2.2 file, though nothing dates it and its era would
change the run; ``reported`` something not carried as is (renamed, dropped, inert, rejected) or
an error finding; ``failed`` no config at all (unreadable, not TOML, its custom module
missing)."""


def tree_summary(plans: Sequence[Plan], *, modules: Sequence[str | None]) -> list[dict[str, Any]]:
    """One row per file of a multi-file run, in file order: its function, outcome
    (:data:`FILE_OUTCOMES`), how many keys were upgraded, the keys not carried by status, its
    error count, and the module its function went to (``modules``, ``None`` where none was
    written)."""
    rows = []
    for plan, module in zip(plans, modules, strict=True):
        statuses = [o.status for o in plan.outcomes.values()]
        counts = {status: statuses.count(status) for status in NOT_CARRIED}
        lifted = statuses.count("upgraded") + statuses.count("era-default")
        errors = len(plan.errors())
        if not plan.ok:
            outcome = "failed"
        elif errors or any(counts.values()):
            outcome = "reported"
        elif plan.era.get("undated"):
            outcome = "undated"
        elif lifted:
            outcome = "upgraded"
        else:
            outcome = "lossless"
        rows.append(
            {
                "file": plan.source,
                "function": plan.function if plan.ok else None,
                "outcome": outcome,
                "upgraded": lifted,
                "not_carried": {status: n for status, n in counts.items() if n},
                "errors": errors,
                "module": module,
            }
        )
    return rows
