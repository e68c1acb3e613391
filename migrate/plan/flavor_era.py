"""The model of the file's era: a flavor written as the torchtitan that read the file defined it.

``model_registry("8B")`` builds v0.2.2's 8B. A file dated before one of that flavor's changes
(``titan.schemas.flavor_eras``) trained another model, so the migration sets each field that
differed on the built model config (:class:`~titan.migrate.targets.config_objects.ModelEdit`,
written ``model_spec.model.rope.scaling = "none"`` under a comment naming the commit). What
titan's config cannot say is an error, and a field the era took from the tokenizer is a warning
with a TODO: neither is ever silently replaced by v0.2.2's value.

:func:`apply` runs on titan's plan; :func:`measure` runs on the plan of every target, after its
conversion, and compares the model config the final plan builds with the era's, field by field,
so a target that cannot carry a field says so (the outcome of ``model.flavor`` is measured, not
booked).
"""

from __future__ import annotations

import textwrap
from typing import Any

from titan.migrate.plan.migration_plan import KeyOutcome, Plan
from titan.migrate.targets.config_objects import ModelEdit, RegistryCall, same
from titan.schemas import flavor_eras
from titan.schemas.diagnostics import Diagnostic, Severity, Span
from titan.schemas.eras import toml_value

KEY = "model.flavor"
"""The key the findings and the outcome are about."""


def apply(plan: Plan, day: str | None, *, dated_by: str) -> None:
    """Write the era's definition of the plan's flavor into its model spec (``day`` is the
    day the file is dated to, ``None`` for v0.2.2; ``dated_by`` says how it was dated)."""
    # the validator's own (evidence-dated) findings give way to the migration's era
    plan.diagnostics = [d for d in plan.diagnostics if not d.code.startswith("era-flavor")]
    spec = plan.root.fields.get("model_spec") if plan.root is not None else None
    if day is None or not isinstance(spec, RegistryCall) or spec.module is not None:
        return  # v0.2.2, no model, or a model family of the user's own: its flavors are its
    found = flavor_eras.flavor_at(spec.family, spec.flavor, day)
    if not found.differs:
        return
    edits = tuple(
        ModelEdit(path, value, comment(found.change_of(path), spec.flavor))
        for path, value in found.sets.items()
    )
    plan.root.fields["model_spec"] = RegistryCall(
        spec.family, spec.flavor, spec.module, spec.kwargs, spec.model, edits
    )
    plan.era["flavor"] = record(found)
    again = f"pass --era YYYY-MM to date the file otherwise (dated {day} by {dated_by})"
    shown = f"`{KEY} = {toml_value(spec.flavor)}`"
    for change in found.changes:
        if change.lost and change.init_only:
            _report(
                plan,
                "era-flavor-init",
                f"{shown} of {day} initialised a run from scratch otherwise than titan: "
                f"{change.lost} ({change.era})",
                f"{change.why}; a run resumed from its checkpoint computes the same, a new run "
                f"starts from other weights; {again}",
                Severity.WARNING,
            )
            continue
        if change.lost:
            _report(
                plan,
                "era-flavor-lost",
                f"{shown} built another model on {day} than titan can: {change.lost} "
                f"({change.era})",
                f"{change.why}; keep this run on a torchtitan {change.era}, or accept v0.2.2's "
                f"{spec.flavor} (a checkpoint of the old model does not load as the same "
                f"model); {again}",
                Severity.ERROR,
            )
            plan.todo("model_spec", f"{spec.flavor} of {day} cannot be built: {change.lost}")
            booked = plan.outcomes.get(KEY)
            if booked is not None:
                plan.outcomes[KEY] = KeyOutcome(KEY, "changed", booked.paths, change.lost)
            continue
        said = [f"`{p} = {toml_value(v)}`" for p, v in change.sets.items() if p in found.sets]
        if said:
            _report(
                plan,
                "era-flavor",
                f"{shown} is written as torchtitan built it on {day}: " + ", ".join(said),
                f"{change.why} ({change.era}); {again}",
                Severity.INFO,
            )
    for path in found.tokenizer:
        change = found.change_of(path)
        value = flavor_eras.v022_value(spec.family, spec.flavor, path)
        said = (
            f"{shown} of {day} took `{path}` from the tokenizer the run loaded; the migrated "
            f"config has the flavor's {toml_value(value)}"
        )
        hint = (
            f"if the run's tokenizer had another size, set model_spec.model.{path} to it in the "
            f"registry function ({change.why}; {change.era})"
        )
        usual = change.sets[path].usual
        if usual is not None and same(usual, value):  # the family's own tokenizer: the same
            _report(plan, "era-flavor-tokenizer", said, hint, Severity.INFO)
            continue
        _report(plan, "era-flavor-tokenizer", said, hint, Severity.WARNING)
        plan.todo(
            "model_spec",
            f"set model_spec.model.{path} to the size of the tokenizer the {day} run used",
        )


def comment(change: flavor_eras.FlavorChange, flavor: str) -> str:
    """The comment above an edited field: which era's flavor it is, and why."""
    text = f"{flavor} as torchtitan built it {change.era}: {change.why}"
    return "\n".join(textwrap.wrap(text, width=84))


def record(found: flavor_eras.EraFlavor) -> dict[str, Any]:
    """The era's flavor as the report's JSON holds it."""
    return {
        "family": found.family,
        "flavor": found.flavor,
        "sets": dict(found.sets),
        "tokenizer": list(found.tokenizer),
        "changes": [
            {"commit": c.commit, "pr": c.pr, "until": c.until, "why": c.why, "lost": c.lost}
            for c in found.changes
        ],
    }


def measure(plan: Plan) -> None:
    """Compare the model config the plan builds with the era's flavor, field by field: a field
    whose era value the built config does not hold is an error and the flavor's outcome is
    ``changed`` (a target that cannot carry it, or an edit lost on the way)."""
    wanted = plan.era.get("flavor") if plan.root is not None else None
    if not wanted or not wanted["sets"]:
        return
    built = _built_edits(plan)
    missing = {p: v for p, v in wanted["sets"].items() if not same(built.get(p, _NONE), v)}
    if not missing:
        return
    said = ", ".join(f"`{p} = {toml_value(v)}`" for p, v in missing.items())
    plan.diagnostics = [d for d in plan.diagnostics if d.code != "era-flavor"]  # not written
    _report(
        plan,
        "era-flavor-changed",
        f"the migrated config builds v0.2.2's {wanted['flavor']}, not the file's era's: it does "
        f"not set {said}",
        "migrate for titan's trainer (its registry function sets these fields on the model "
        "config), or set them on the model config by hand",
        Severity.ERROR,
    )
    plan.todo("model_spec", f"the model is not the file's era's: set {said}")
    booked = plan.outcomes.get(KEY)
    if booked is not None:
        plan.outcomes[KEY] = KeyOutcome(KEY, "changed", booked.paths, f"not set: {said}")


_NONE: Any = object()


def _built_edits(plan: Plan) -> dict[str, Any]:
    """Path -> value of the fields the final plan sets on its model config."""
    for value in (plan.root.fields.get("model_spec"), plan.locals.get("model_spec")):
        if isinstance(value, RegistryCall):
            return {edit.means: edit.value for edit in value.edits}
    return {}


def _report(plan: Plan, code: str, message: str, hint: str, severity: Severity) -> None:
    """A finding on ``model.flavor``, at its line (else the [model] table's, else line 1)."""
    span = plan.spans.get(KEY) or plan.spans.get("model") or Span(file=plan.source, line=1, col=1)
    plan.diagnostics.append(
        Diagnostic(code=code, severity=severity, path=KEY, message=message, hint=hint, span=span)
    )
