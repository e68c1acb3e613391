"""A legacy run's pipeline stage lists (``parallelism.module_fqns_per_model_part``) in
torchtitan 0.3.0's module names.

v0.2.2 called the output projection ``output``; 0.3.0 calls it ``lm_head``. 0.3.0 keeps only
the modules a stage lists and silently drops a name it does not know, so a list carried as it
is would leave the last stage without its head. Names are rewritten here; a name that is no
module of the model (checked against its layer count, with the same module list the pipeline
split uses) is reported as an error and the list is not carried: 0.3.0 then splits the model
evenly, and the generated function carries a TODO. ``builder`` is
:class:`titan.migrate.targets.upstream._Upstream`.
"""

from __future__ import annotations

from typing import Any

from titan.migrate.targets.config_objects import RegistryCall
from titan.schemas.diagnostics import Severity
from titan.schemas.flavor_table import FLAVOR_TABLE
from titan.schemas.pipeline_split import model_modules

KEY = "parallelism.module_fqns_per_model_part"

MODULE_RENAMES = {"output": "lm_head"}
"""v0.2.2 top-level module names that 0.3.0's decoder models spell otherwise."""


def convert_module_fqns(builder: Any) -> None:
    """Rewrites the carried stage lists into 0.3.0's names, or reports the names that are no
    module of the model (an error when pipeline parallel is on, a warning otherwise)."""
    parts = builder.value(KEY)
    n_layers = _layer_count(builder)
    if not isinstance(parts, list) or n_layers is None:
        return  # unset, malformed (reported by the plan), or a model whose modules are unknown
    known = set(model_modules(n_layers, head="output"))
    names = [name for part in parts if isinstance(part, list) for name in part]
    unknown = list(dict.fromkeys(n for n in names if n not in known))
    if unknown:
        used = (builder.value("parallelism.pipeline_parallel_degree") or 1) > 1
        builder.set(KEY, None)
        builder.gone(
            KEY,
            f"{', '.join(repr(n) for n in unknown)} "
            f"{'is' if len(unknown) == 1 else 'are'} no module of this {n_layers}-layer model "
            f"(its modules are tok_embeddings, layers.0-{n_layers - 1}, norm and output, "
            "which 0.3.0 calls lm_head); 0.3.0 would silently leave "
            f"{'it' if len(unknown) == 1 else 'them'} out of every stage, so the list is not "
            "carried and 0.3.0 splits the model evenly",
            "parallelism",
            hint="name the model's modules in module_fqns_per_model_part (each layer as "
            "layers.<i>), or leave it unset to split evenly",
            numerics=used,
        )
        return
    translated = [[MODULE_RENAMES.get(name, name) for name in part] for part in parts]
    if translated == parts:
        return
    builder.set(KEY, translated)
    renamed = ", ".join(
        f"{old!r} is {new!r}" for old, new in MODULE_RENAMES.items() if old in names
    )
    builder.outcome(KEY, "carried", (KEY,), f"in 0.3.0's module names ({renamed})")
    builder.changed(
        KEY,
        f"module_fqns_per_model_part is written in 0.3.0's module names ({renamed}): 0.3.0 "
        "would silently leave a v0.2.2 name out of its stage",
        "nothing to do; write 0.3.0's names when editing the list",
        Severity.INFO,
    )


def _layer_count(builder: Any) -> int | None:
    """The transformer layer count of the legacy run's model, ``None`` for a model whose
    module names titan does not know (a project's own family, a model without layers)."""
    call = builder.old.root.fields.get("model_spec")
    if not isinstance(call, RegistryCall) or call.module is not None:
        return None
    flavor = FLAVOR_TABLE.get(call.family, {}).get(call.flavor)
    count = (flavor or {}).get("n_layers")
    return count if isinstance(count, int) and count > 0 else None
