"""The trainer config class a plan is built on, and which keys choose it.

titan's base trainer holds every v0.2.2 section; the fault-tolerant and Flux experiments have their
own subclasses, chosen by ``model.name``, by the built-in custom module, or by a key that lives only
on them. Keys that need two different trainers are an error.
"""

from __future__ import annotations

from titan.migrate.plan import homes as homes_table
from titan.migrate.plan.draft import PlanDraft
from titan.migrate.plan.legacy_values import schema_default
from titan.migrate.targets.config_objects import same
from titan.schemas import flavors
from titan.schemas.diagnostics import Severity

TRAINER = homes_table.TRAINER
FT_TRAINER = "titan.experiments.ft.trainer:FaultTolerantTrainer.Config"
FLUX_TRAINER = "titan.models.flux.trainer:FluxTrainer.Config"
IN_BACKWARD = "titan.components.optimizer:OptimizersInBackwardContainer.Config"

MODEL_TRAINERS = flavors.MODEL_TRAINERS
"""``model.name`` values that need a trainer subclass even when none of their keys is written
(each family's record names them)."""

EXTENSION_TRAINERS = {"ft": FT_TRAINER, "flux": FLUX_TRAINER}
"""Built-in custom config modules whose sections live on a trainer subclass."""


def trainer_class(draft: PlanDraft) -> str:
    """The trainer config class the keys need (base, fault-tolerant or Flux)."""
    wanted: dict[str, str] = {}
    model_name = draft.leaves.get("model.name")
    if isinstance(model_name, str) and model_name in MODEL_TRAINERS:
        wanted[MODEL_TRAINERS[model_name]] = "model.name"
    if draft.extension in EXTENSION_TRAINERS:
        wanted.setdefault(EXTENSION_TRAINERS[draft.extension], "job.custom_config_module")
    for key, value in draft.leaves.items():
        found = homes_table.home(key, extension=draft.extension)
        if found is None or found.trainer == TRAINER or draft.is_blocked(key):
            continue
        if found.kind != "dropped" and not same(value, schema_default(draft.schema, key)):
            wanted.setdefault(found.trainer, key)
    if len(wanted) > 1:
        names = ", ".join(f"{cls.rpartition(':')[2]} (for {key})" for cls, key in wanted.items())
        first = next(iter(wanted))
        draft.report(
            "trainer-conflict",
            next(iter(wanted.values())),
            f"the keys need different trainers: {names}; using the first",
            "split the file in two, one TOML per trainer, or delete the keys of the trainer "
            "you do not mean",
            severity=Severity.ERROR,
        )
        draft.plan.todo("", f"the keys need different trainers: {names}")
        return first
    return next(iter(wanted), TRAINER)
