"""Where every legacy v0.2.2 key lives in upstream torchtitan 0.3.0: the data of that target.

One :class:`UpstreamHome` per base-schema key (the 149 of v0.2.2), with its status as
torchtitan 0.3.0 sees it:

- ``same``: the same field at the same path (inside the section's config object);
- ``moved``: the same meaning at another path or class (``profiling`` is ``profiler``);
- ``changed``: the value must be rewritten to say the same thing (the optimizer's flat fields
  become a ``param_groups`` entry, the activation-checkpointing mode becomes a policy class);
  ``migrate/targets/upstream.py`` has a transform for each;
- ``gone``: 0.3.0 has no home; the migration reports the key whenever its value makes a run
  differ from what 0.3.0 does.

Most keys keep titan's home (``migrate/plan/homes.py``), so the table lists only the rows that
differ and derives the rest. ``tests/upstream/`` builds every migrated config in a real torchtitan
0.3.0 and compares each key at the path given here.

Source: ``reference/upstream_030_keys.md``, checked against the installed package.
"""

from __future__ import annotations

import functools
from typing import Literal

from titan.migrate.plan import homes as titan_homes
from titan.migrate.targets import upstream_spec_030 as spec
from titan.schemas import flavors

Status = Literal["same", "moved", "changed", "gone"]


class UpstreamHome:
    """Where one legacy key's value goes in torchtitan 0.3.0."""

    __slots__ = ("legacy", "status", "path", "note")

    def __init__(self, legacy: str, status: Status, path: str | None, note: str = "") -> None:
        self.legacy = legacy
        self.status = status
        self.path = path
        """Attribute path from the trainer config, ``model_spec:<argument>`` for an argument
        of the family's ``model_registry``; ``None`` where there is none."""
        self.note = note

    def __repr__(self) -> str:
        return f"UpstreamHome({self.legacy!r}, {self.status!r}, {self.path!r})"


_OPTIMIZER = "flat fields become one ParamGroupConfig(pattern='.*') of optimizer.param_groups"
_AC = "the mode is the policy class: SelectiveAC / FullAC / MemoryBudgetAC .Config, or None"
_FT_CKPT = (
    "only TorchFTCheckpointManager.Config of the torchft experiment has it; the base checkpoint "
    "config does not"
)

_ROWS: tuple[UpstreamHome, ...] = (
    UpstreamHome("job.config_file", "gone", None, "the registry function replaces the TOML"),
    UpstreamHome("job.description", "gone", None, "kept as the function's docstring"),
    UpstreamHome(
        "job.custom_config_module",
        "changed",
        None,
        "its sections become fields of a Trainer.Config subclass",
    ),
    UpstreamHome("model.name", "changed", "model_spec", "model_spec = <family>.model_registry()"),
    UpstreamHome(
        "model.flavor",
        "changed",
        "model_spec:flavor",
        "*_flex_attn / *_varlen_attn flavors become attn_backend='flex' / 'varlen'",
    ),
    UpstreamHome(
        "model.tokenizer_path",
        "changed",
        "hf_assets_path",
        "folded into hf_assets_path, as v0.2.2 did",
    ),
    UpstreamHome(
        "model.converters",
        "changed",
        "model_spec:converters",
        "converters are arguments of model_registry(flavor, converters=[...])",
    ),
    UpstreamHome("model.print_after_conversion", "gone", None, "no such switch"),
    *(
        UpstreamHome(f"optimizer.{name}", "changed", "optimizer.param_groups", _OPTIMIZER)
        for name in ("name", "lr", "beta1", "beta2", "eps", "weight_decay")
    ),
    UpstreamHome(
        "optimizer.early_step_in_backward", "gone", None, "no optimizer-in-backward container"
    ),
    *(
        UpstreamHome(f"profiling.{name}", "moved", f"profiler.{name}", "profiling is profiler")
        for name in (
            "enable_profiling",
            "profile_freq",
            "profiler_active",
            "profiler_warmup",
            "enable_memory_snapshot",
        )
    ),
    *(
        UpstreamHome(
            f"profiling.{name}",
            "changed",
            f"profiler.{name}",
            f"the default moved to {folder!r}: the legacy folder is written explicitly",
        )
        for name, folder in (
            ("save_traces_folder", "profiling/traces"),
            ("save_memory_snapshot_folder", "profiling/memory_snapshot"),
        )
    ),
    UpstreamHome(
        "parallelism.disable_loss_parallel",
        "gone",
        None,
        "the loss is vocabulary-parallel whenever tensor parallel is on",
    ),
    UpstreamHome(
        "parallelism.enable_async_tensor_parallel",
        "moved",
        "compile.enable_async_tensor_parallel",
        "moved to the compile config",
    ),
    UpstreamHome(
        "parallelism.pipeline_parallel_expert_parallel_overlap",
        "gone",
        None,
        "no overlap of expert-parallel communication with pipeline stages",
    ),
    UpstreamHome("parallelism.context_parallel_rotate_method", "gone", None, "no such choice"),
    UpstreamHome(
        "parallelism.expert_tensor_parallel_degree",
        "gone",
        None,
        "no expert tensor parallel: experts borrow ranks from FSDP x CP x TP",
    ),
    UpstreamHome(
        "parallelism.expert_parallel_comm_backend",
        "changed",
        "model_spec:moe_comm_backend",
        "an argument of the MoE families' model_registry",
    ),
    UpstreamHome(
        "checkpoint.enable_ft_dataloader_checkpoints",
        "moved",
        "checkpoint.enable_ft_dataloader_checkpoints",
        _FT_CKPT,
    ),
    UpstreamHome("activation_checkpoint.mode", "changed", "activation_checkpoint", _AC),
    UpstreamHome(
        "activation_checkpoint.selective_ac_option",
        "gone",
        None,
        "selective AC is per operator only: 'op' is SelectiveAC.Config(); every-Nth-block "
        "selective AC has no equivalent",
    ),
    UpstreamHome(
        "activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns",
        "moved",
        "activation_checkpoint.force_recompute_mm_shapes_by_fqns",
        "SelectiveAC.Config only",
    ),
    UpstreamHome("activation_checkpoint.early_stop", "gone", None, "always off"),
    UpstreamHome(
        "activation_checkpoint.memory_budget",
        "moved",
        "activation_checkpoint.memory_budget",
        "MemoryBudgetAC.Config only",
    ),
    UpstreamHome(
        "activation_checkpoint.visualize_memory_budget_pareto",
        "moved",
        "activation_checkpoint.visualize_memory_budget_pareto",
        "MemoryBudgetAC.Config only",
    ),
    *(
        UpstreamHome(
            f"activation_checkpoint.{name}",
            "same",
            f"activation_checkpoint.{name}",
            "on every policy class; nowhere when AC is off",
        )
        for name in ("preserve_rng_state", "determinism_check", "debug")
    ),
    UpstreamHome(
        "quantize.linear.float8.enable_fsdp_float8_all_gather",
        "gone",
        None,
        "a tensorwise-only knob; float8 linears are rowwise",
    ),
    UpstreamHome(
        "quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp",
        "gone",
        None,
        "a tensorwise-only knob; float8 linears are rowwise",
    ),
    UpstreamHome(
        "quantize.linear.float8.recipe_name",
        "changed",
        "model_spec:converters[Float8LinearConverter].recipe_name",
        "'rowwise' or 'rowwise_with_gw_hp'; the legacy default (tensorwise) is gone",
    ),
    *(
        UpstreamHome(
            f"quantize.linear.float8.{name}",
            "same",
            f"model_spec:converters[Float8LinearConverter].{name}",
            "a field of the converter passed to model_registry",
        )
        for name in ("filter_fqns", "emulate")
    ),
    UpstreamHome(
        "quantize.linear.mx.mxfp8_dim1_cast_kernel_choice", "gone", None, "no kernel choice"
    ),
    UpstreamHome("quantize.linear.mx.recipe_name", "gone", None, "no recipe choice"),
    UpstreamHome(
        "quantize.linear.mx.filter_fqns",
        "changed",
        "model_spec:converters[MXFP8LinearConverter].fqns",
        "inverted: the modules to skip become the modules to convert",
    ),
    UpstreamHome("quantize.grouped_mm.float8.fqns", "gone", None, "every expert is converted"),
    UpstreamHome(
        "quantize.grouped_mm.mx.recipe_name",
        "changed",
        "model_spec:converters[MXFP8GroupedExpertsConverter].recipe_name",
        "'mxfp8' is now 'mxfp8_rceil'",
    ),
    UpstreamHome("quantize.grouped_mm.mx.fqns", "gone", None, "every expert is converted"),
    UpstreamHome("memory_estimation.enable", "gone", None, "no memory estimator"),
    UpstreamHome("memory_estimation.disable_fake_mode", "gone", None, "no memory estimator"),
    UpstreamHome("experimental.custom_import", "gone", None, "a registry function imports"),
    UpstreamHome("experimental.custom_args_module", "gone", None, "use a Trainer.Config subclass"),
    UpstreamHome(
        "validation.local_batch_size",
        "gone",
        None,
        "the validator uses training.local_batch_size",
    ),
    UpstreamHome("validation.seq_len", "gone", None, "the validator uses training.seq_len"),
)


@functools.cache
def cls(qualname: str) -> str:
    """The class path of a 0.3.0 config class by its qualified name (``Trainer.Config``)."""
    found = [path for path in spec.CLASSES if path.rpartition(":")[2] == qualname]
    if len(found) != 1:
        raise KeyError(f"torchtitan {spec.VERSION} has {len(found)} classes named {qualname}")
    return found[0]


_PATH_RENAMES = {"profiling": "profiler"}
"""titan path prefixes that 0.3.0 names otherwise."""


def upstream_path(titan_path: str) -> str:
    """The 0.3.0 path of a titan config path whose key is ``same`` or ``moved``."""
    head, dot, rest = titan_path.partition(".")
    return f"{_PATH_RENAMES.get(head, head)}{dot}{rest}"


@functools.cache
def upstream_homes() -> dict[str, UpstreamHome]:
    """The 0.3.0 home of each of the 149 base-schema keys, in schema order."""
    listed = {row.legacy: row for row in _ROWS}
    found: dict[str, UpstreamHome] = {}
    for legacy, home in titan_homes.base_homes().items():
        if legacy in listed:
            found[legacy] = listed[legacy]
            continue
        if home.kind in ("dropped", "structural", "converter") or home.path is None:
            raise KeyError(f"no torchtitan 0.3.0 home for {legacy!r} ({home.kind} in titan)")
        found[legacy] = UpstreamHome(legacy, "same", upstream_path(home.path), home.note)
    return found


_SUFFIX_BACKENDS = (
    ("_flex_attn", "flex"),
    ("_varlen_attn", "varlen"),
    ("_flex", "flex"),
    ("_varlen", "varlen"),
)
"""v0.2.2 flavor suffixes that chose the attention; 0.3.0 passes ``attn_backend`` instead."""


def split_flavor(family: str, flavor: str) -> tuple[str, str]:
    """A v0.2.2 flavor as (0.3.0 flavor, the attention it ran: sdpa / flex / varlen)."""
    found = flavors.flavor(family, flavor)
    attention = found.attn_type if found is not None else "sdpa"
    for suffix, _backend in _SUFFIX_BACKENDS:
        if flavor.endswith(suffix):
            return flavor[: -len(suffix)], attention
    return flavor, attention
