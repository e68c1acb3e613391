"""Outcomes measured from the result: each legacy key read back out of the config the plan built.

A migration report that only wrote down what each step meant to do could call a file "lossless"
while the built config says something else (a value a step never reached, a default that differs
between the two worlds, a string list a step skipped). So once the plan is built, every v0.2.2
key is read back out of :attr:`Plan.root` through its home (``migrate/homes.py``) and compared
with :attr:`Plan.effective`, the value the legacy run used:

    legacy run's value (Plan.effective) ──┐
                                          ├── same? ── the step's outcome stands
    built config, read back (readback) ───┘      └──── ``changed``: an error finding

Keys the file wrote and keys it left out are both measured: a default that is not the legacy
run's default is as much a change as a value that was lost. A key whose home holds no value in
the built config (dropped, a converter that is not enabled, a field of a trainer subclass this
config does not use) cannot be read back; its step's outcome stands, and a dropped value that
equals the legacy default counts as the default, since the run is the same without it.

titan's own settings with no legacy key whose default differs from what a v0.2.2 run did are
listed too (:data:`BEHAVIOUR_CHANGES`), so the report names every difference from the legacy run.
"""

from __future__ import annotations

from typing import Any

from titan.migrate.plan import homes as homes_table
from titan.migrate.plan.model_keys import FAMILY_ALIASES
from titan.migrate.plan.trainers import IN_BACKWARD
from titan.migrate.targets.config_objects import Obj, RegistryCall, UnsupportedModel, same
from titan.schemas.diagnostics import Diagnostic, Severity, Span

UNREADABLE: Any = object()
"""Marks a key whose home holds no value in the built config."""


BEHAVIOUR_CHANGES: dict[str, tuple[Any, str]] = {
    "training.on_nonfinite_loss": (
        "stop",
        "a v0.2.2 run trained on through a NaN or infinite loss; titan stops at the first one "
        '(set training.on_nonfinite_loss = "warn" to train on, as the legacy run did)',
    ),
    "parallelism.pipeline_parallel_degree": (
        lambda degree: isinstance(degree, int) and not isinstance(degree, bool) and degree > 1,
        "a v0.2.2 pipeline ran backward on each microbatch's summed loss and divided only the "
        "reported loss by the token count, so its gradients, and the grad norms it logged, were "
        "not those of the same run without pipeline parallel; titan-train (like torchtitan "
        "0.3.0) scales each microbatch's loss by its share of the batch before backward, so "
        "its gradients and grad norms are the run's without pipeline parallel (expect other "
        "grad norms, and other clipping, than the legacy run's)",
    ),
}
"""titan settings -> (the value that behaves differently, or a test of the value; what
differs). Most have no legacy key; a pipeline degree keeps its key, but titan's pipeline
computes other gradients than v0.2.2's."""


def readback(plan: Any, key: str) -> Any:
    """The value the built config gives legacy ``key``, or :data:`UNREADABLE`."""
    reader = _READERS.get(key)
    if reader is not None:
        return reader(plan)
    found = homes_table.home(key, extension=plan.extension)
    if found is None or found.kind in ("dropped", "structural") or found.path is None:
        return UNREADABLE
    if found.kind == "converter":
        return _converter_field(plan.root, found.config_class, found.path)
    values = [_get(plan.root, path) for path in (found.path, *found.also)]
    if any(value is UNREADABLE for value in values):
        return UNREADABLE
    if not all(same(values[0], value) for value in values[1:]):
        return _Disagree(values)
    return values[0]


class _Disagree:
    """Two homes of one key that hold different values (Flux's copies): never the same as
    the legacy value."""

    __slots__ = ("values",)

    def __init__(self, values: list[Any]) -> None:
        self.values = values

    def __repr__(self) -> str:
        return " / ".join(repr(v) for v in self.values)


def legacy_values(plan: Any) -> dict[str, Any]:
    """What the legacy run used for each v0.2.2 key, after its loader's own post-processing:
    v0.2.2 copied a set ``model.tokenizer_path`` over ``model.hf_assets_path``."""
    values = dict(plan.effective)
    tokenizer = values.get("model.tokenizer_path")
    if isinstance(tokenizer, str) and tokenizer:
        values["model.hf_assets_path"] = tokenizer
    return values


def settle(plan: Any, *, outcome: type) -> None:
    """Compare every key's legacy value with the built config and correct the outcomes.

    ``outcome`` is the plan's outcome class (``KeyOutcome``), passed in so that this module
    does not import the plan."""
    if plan.root is None:
        return
    legacy = legacy_values(plan)
    for key, value in legacy.items():
        built = readback(plan, key)
        booked = plan.outcomes.get(key)
        if built is UNREADABLE:
            if booked is not None and booked.status == "dropped" and _is_default(plan, key):
                note = booked.note if "default" in booked.note else f"{booked.note} (the default)"
                plan.outcomes[key] = outcome(key, "default", booked.paths, note, booked.era)
            continue
        if same(value, built) or not _read(legacy, key):
            continue
        if booked is not None and booked.status not in outcome.KEPT:
            continue  # already reported as not carried, with its reason
        paths = booked.paths if booked is not None else ()
        era = booked.era if booked is not None else ""
        note = f"the legacy run used {_show(value)}; the built config has {_show(built)}"
        plan.outcomes[key] = outcome(key, "changed", paths, note, era)
        if booked is not None and booked.status != "era-default" or key in plan.spans:
            message = f"`{key}`: the migrated config does not hold the file's value: {note}"
            hint = (
                "set the value in the registry function by hand, and report the file to titan: "
                "the migration should have carried it"
            )
        else:
            message = (
                f"`{key}` is not in the file: the legacy run used its default {_show(value)}, "
                f"the migrated config has titan's default {_show(built)}"
            )
            hint = f"write `{key}` in the TOML with the value the run should use"
        plan.diagnostics.append(
            Diagnostic(
                code="value-changed",
                severity=Severity.ERROR,
                path=key,
                message=message,
                hint=hint,
                span=plan.spans.get(key) or Span(file=plan.source, line=1, col=1),
            )
        )


READ_ONLY_IF: dict[str, tuple[str, Any]] = {"validation": ("validation.enable", True)}
"""Sections the legacy run read only when a switch was on: their values cannot differ then."""


def _read(legacy: dict[str, Any], key: str) -> bool:
    """Whether the legacy run read ``key`` at all (its section's switch was on)."""
    switch = READ_ONLY_IF.get(key.partition(".")[0])
    if switch is None or key == switch[0]:
        return True
    return same(legacy.get(switch[0]), switch[1])


def behaviour_changes(plan: Any) -> list[tuple[str, str]]:
    """``(titan setting, what differs)`` for each titan-only setting whose value in the built
    config behaves differently from the legacy run."""
    if plan.root is None:
        return []
    found = []
    for path, (value, why) in BEHAVIOUR_CHANGES.items():
        built = _get(plan.root, path)
        if value(built) if callable(value) else same(built, value):
            found.append((path, why))
    return found


# --------------------------------------------------------------------------- readers


def _get(root: Obj, path: str) -> Any:
    try:
        return root.get(path)
    except (KeyError, AttributeError):
        return UNREADABLE


def _converter_field(root: Obj, config_class: str | None, field: str) -> Any:
    converters = _get(root, "model_converters.converters")
    if not isinstance(converters, list):
        return UNREADABLE
    for converter in converters:
        if isinstance(converter, Obj) and converter.cls == config_class:
            return converter.fields.get(field, UNREADABLE)
    return UNREADABLE  # not enabled: the legacy run never read the key either


def _model_name(plan: Any) -> Any:
    spec = _get(plan.root, "model_spec")
    if isinstance(spec, UnsupportedModel):
        return spec.name
    if not isinstance(spec, RegistryCall):
        return UNREADABLE
    wanted = plan.effective.get("model.name")
    if not isinstance(wanted, str):
        return spec.family
    if FAMILY_ALIASES.get(wanted) == spec.family and spec.module is None:
        return wanted  # llama3_ft: the llama3 family on the fault-tolerant trainer
    return spec.family


def _model_flavor(plan: Any) -> Any:
    spec = _get(plan.root, "model_spec")
    if isinstance(spec, RegistryCall | UnsupportedModel):
        return spec.flavor
    return UNREADABLE


def _converters(plan: Any) -> Any:
    built = _get(plan.root, "model_converters.converters")
    if not isinstance(built, list):
        return UNREADABLE
    from titan.migrate.plan.converters import converter_name  # titan's and the fork's declared

    return [converter_name(c.cls) if isinstance(c, Obj) else c for c in built]


def _in_backward(plan: Any) -> Any:
    optimizer = _get(plan.root, "optimizer")
    return isinstance(optimizer, Obj) and optimizer.cls == IN_BACKWARD


def _validation(key: str, training: str):
    def read(plan: Any) -> Any:
        found = homes_table.home(key, extension=plan.extension)
        value = _get(plan.root, found.path)
        if value is None:  # titan's validator follows the training value
            return readback(plan, training)
        return value

    return read


def _no_value(plan: Any) -> Any:
    return UNREADABLE


_READERS = {
    "model.name": _model_name,
    "model.flavor": _model_flavor,
    "model.converters": _converters,
    "model.tokenizer_path": _no_value,  # measured where v0.2.2 put it: model.hf_assets_path
    "optimizer.early_step_in_backward": _in_backward,
    "job.custom_config_module": _no_value,  # the trainer class it chose
    "validation.local_batch_size": _validation(
        "validation.local_batch_size", "training.local_batch_size"
    ),
    "validation.seq_len": _validation("validation.seq_len", "training.seq_len"),
}
"""Keys whose value decides an object rather than sitting in a field."""


def _is_default(plan: Any, key: str) -> bool:
    """Whether the legacy run's value of ``key`` is its legacy default."""
    return key in plan.defaults and same(plan.effective.get(key), plan.defaults[key])


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
