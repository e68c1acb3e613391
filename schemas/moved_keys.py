"""Every key older torchtitan configs had that v0.2.2 does not, and what it became.

This is the one researched table behind the validator's moved-key hints, ``titan-validate
--fix`` and ``titan-migrate``'s upgrade (``titan.schemas.eras`` applies it). It was built from the
history of ``torchtrain/config_manager.py`` (argparse, 2024-02 to 2024-04),
``torchtitan/config_manager.py`` (argparse to 2025-04, then dataclasses; the v0.1.0 wheel) and
``torchtitan/config/job_config.py`` (2025-07 to v0.2.2) on pytorch/torchtitan main: every key
any commit since 2024-02 declared, less the v0.2.2 keys, with the commit that removed it. Each
group cites its commits; release boundaries are the PyPI wheels 0.1.0 (built 2025-06-18), 0.2.0
(2025-10-18), 0.2.1 (2025-12-26) and 0.2.2 (2026-02-20).

A row says *how* the value changes (:data:`HOWS`), so a meaning that flipped or a value whose
spelling changed is carried exactly, and a value v0.2.2 has no way to express is reported as
unportable instead of guessed. Pure data: nothing is imported beyond ``titan.schemas._frozen``.
"""

from __future__ import annotations

from titan.schemas._frozen import Frozen, _set

CONVERTERS = ("model", "converters")
"""The one list-valued destination: a write to it appends the names it does not list yet."""

STALE_CONVERTER_NAMES = {
    "float8": "quantize.linear.float8",
    "mx": "quantize.linear.mx",
    "quantize.dense.float8": "quantize.linear.float8",
    "quantize.moe.float8": "quantize.grouped_mm.float8",
    "quantize.dense.mx": "quantize.linear.mx",
    "quantize.moe.mx": "quantize.grouped_mm.mx",
}
"""Converter names used by older torchtitan releases, with today's equivalent."""

HOWS = (
    "move",
    "invert",
    "values",
    "spelling",
    "converter",
    "moe",
    "same",
    "ignored",
    "never",
    "table",
    "compile",
    "folder",
    "extension",
    "warmup_pct",
    "dp_degree",
    "dp_type",
    "microbatches",
    "config_folder",
)
"""How a value becomes v0.2.2 settings:

- ``move``: the value as is, at ``to`` (and at every extra key in ``values``);
- ``invert``: a boolean whose meaning flipped;
- ``values``: a value map ``(old, new)``; with ``to`` None, ``new`` is a tuple of
  ``(dotted key, value)`` writes; any other value is unportable;
- ``spelling``: like ``values`` but unlisted values pass unchanged (a ``None`` new value is
  unportable);
- ``converter``: true (or any of ``values[1:]``) lists the converter ``values[0]``;
- ``moe``: the MoE FQN list, plus the grouped-mm converter ``values[0]`` when the file turned on
  one of the linear converters ``values[1]`` (the old MoE option applied only then);
- ``same``: ``values`` are what v0.2.2 does anyway (no-op); any other value is unportable;
- ``ignored``: training never read it, so any value is a no-op;
- ``never``: a key torchtitan never had (its loaders ignored it), reported with where the
  setting lives;
- ``table``: every key of an old table, same name under ``to``;
- ``ignored`` rows whose era says "upstream file" are keys torchtitan's own TOMLs carried that
  the loader of their time never read (a misplaced or misspelt key): no effect, safe to delete;
- ``extension``: the value at ``to``, with ``job.custom_config_module = values[0]``; a second
  value names the commit that changed the meaning of a non-zero value (flux's text dropout);
- the rest are one key each, documented where they are used in ``titan.schemas.eras``."""


class Split(Frozen):
    """A list key whose loader split a comma-separated TOML string into names."""

    __slots__ = ("key", "era")
    __match_args__ = ("key",)

    key: str
    """The dotted v0.2.2 key (the old key's destination for a moved key)."""
    era: str
    """When the loader split a TOML string for it, and the commits."""

    def __init__(self, key: str, era: str) -> None:
        _set(self, "key", key)
        _set(self, "era", era)


_DATACLASS = (
    "from #767 (c1c2f55d, 2025-04-18) the dataclass loader kept a TOML string whole and the "
    "run iterated its characters"
)

SPLITS: tuple[Split, ...] = (
    Split(
        "model.converters",
        "torchtitan 2025-02 to 2025-04 (torchtitan/config_manager.py: every string_list option "
        f"was split from TOML since #823, 57387af0); {_DATACLASS}",
    ),
    Split(
        "checkpoint.exclude_from_loading",
        "torchtitan 2025-02 to 2025-04 (torchtitan/config_manager.py: split from TOML since "
        f"#819, 49c6d6fc); {_DATACLASS}",
    ),
    Split(
        "quantize.linear.float8.filter_fqns",
        "torchtitan 2025-04 (float8.filter_fqns in torchtitan/config_manager.py: a string_list "
        f"option from #1063, a6524d8a, 2025-04-07); {_DATACLASS}",
    ),
)
"""Every list key an era's loader split from a TOML string (``string_list``: split at commas,
each name stripped, empty names dropped). ``pipeline_parallel_split_points`` was split too
(53d0f699, 2024-10-30, to 2025-04-18) but v0.2.2 has no split points to carry it to."""


def split_names(raw: str) -> list[str]:
    """A comma-separated string as the era loaders read it (their ``string_list``)."""
    return [name.strip() for name in raw.split(",") if name.strip()]


class Refusal(Frozen):
    """A value that an era's run used and v0.2.2 cannot express: the run would compute
    something else, so it is an error with what to do, never a silent drop."""

    __slots__ = ("key", "values", "era", "why", "hint", "suffix")
    __match_args__ = ("key", "values")

    key: str
    """The dotted key as the file writes it (an old key, or a v0.2.2 key)."""
    values: tuple
    """The values refused."""
    era: str
    """When the value was accepted, and what it did."""
    why: str
    """What the run did with it, and what v0.2.2 has instead."""
    hint: str
    """What to do: the choices there are, truthfully."""
    suffix: str
    """Also refused: any string value that ends with it (a file type v0.2.2 cannot read)."""

    def __init__(
        self, key: str, values: tuple, era: str, why: str, hint: str, *, suffix: str = ""
    ) -> None:
        _set(self, "key", key)
        _set(self, "values", values)
        _set(self, "era", era)
        _set(self, "why", why)
        _set(self, "hint", hint)
        _set(self, "suffix", suffix)


_UNCHECKED = (
    "argparse's choices and the dataclass Literal checked command-line flags only: every loader "
    "from 5c69c02e (2024-05-20) through v0.2.2 took a TOML value unchecked"
)

REFUSALS: tuple[Refusal, ...] = (
    Refusal(
        "model.norm_type",
        ("layernorm", "np_layernorm", "LayerNorm", "NP_LayerNorm"),
        "torchtitan 2024-04 to 2025-04 (build_norm in torchtitan/models/norms.py, from #181, "
        "34711655, until #1115, 5078e92e, 2025-04-17; it lowercased the name)",
        'the run normalised with LayerNorm (nn.LayerNorm without bias; "np_layernorm" without a '
        "learnable weight either); v0.2.2 models normalise with RMSNorm only, a different model",
        "keep this run on a torchtitan before 5078e92e (2025-04-17), or accept RMSNorm: delete "
        'the key or set it to "rmsnorm" (a checkpoint of the LayerNorm model does not load into '
        "it as the same model)",
    ),
    Refusal(
        "training.mixed_precision_reduce",
        ("bfloat16", "float16"),
        f"torchtitan 2024-05 to v0.2.2 ({_UNCHECKED})",
        "the run reduced FSDP gradients in that dtype; titan reduces them in float32 only",
        'set "float32" to reduce in full precision (the numbers differ from the run), or keep '
        "this run on torchtitan",
    ),
    Refusal(
        "training.mixed_precision_param",
        ("float16",),
        f"torchtitan 2024-05 to v0.2.2 ({_UNCHECKED})",
        "the run computed with float16 parameters (FSDP's param_dtype, or autocast); titan "
        'computes in "bfloat16" or "float32" only',
        'set "bfloat16" (the same width, another number format) or "float32", or keep this run '
        "on torchtitan",
    ),
    Refusal(
        "model.tokenizer_path",
        (),
        "torchtitan 2024-01 to 2025-07 (a sentencepiece, then tiktoken tokenizer.model file, "
        "until #1476, 8dd5a7e9, read Hugging Face tokenizer folders; v0.2.2 copied the key into "
        "hf_assets_path and refused a path ending in tokenizer.model)",
        "the run tokenized with that sentencepiece or tiktoken file; v0.2.2 and titan read a "
        "Hugging Face tokenizer folder (tokenizer.json), so the file cannot be carried",
        "set `model.hf_assets_path` to the Hugging Face folder of the same tokenizer and delete "
        "`model.tokenizer_path` (the ids must match the ones the run trained with)",
        suffix=".model",
    ),
)
"""Values an era ran with that no v0.2.2 setting reproduces."""


class Rule(Frozen):
    """One old key (or old table) and how its value becomes v0.2.2 settings."""

    __slots__ = ("old", "to", "how", "era", "why", "values")
    __match_args__ = ("old", "to", "how")

    old: str
    """Dotted old key; for ``how == "table"`` an old table whose keys keep their names."""
    to: str | None
    """Dotted v0.2.2 key (a table for ``table``), ``None`` where no single key takes it."""
    how: str
    """The value transform, one of :data:`HOWS`."""
    era: str
    """Where and when the key lived, and the commit or PR that changed it."""
    why: str
    """One sentence: what changed, or why a value cannot be carried."""
    values: tuple
    """The transform's data (see :data:`HOWS`)."""

    def __init__(
        self, old: str, to: str | None, how: str, era: str, why: str, values: tuple = ()
    ) -> None:
        assert how in HOWS, how
        _set(self, "old", old)
        _set(self, "to", to)
        _set(self, "how", how)
        _set(self, "era", era)
        _set(self, "why", why)
        _set(self, "values", values)


def _era(since: str, until: str, change: str) -> str:
    """``torchtitan 2024-02 to 2025-05 (torchtitan/config_manager.py; renamed in #1238)``: the
    months the key was on main, the file that declared it last, and what ended it."""
    if until < "2024-04-11":
        file = "torchtrain/config_manager.py"
    elif until < "2025-07-22":
        file = "torchtitan/config_manager.py"
    else:
        file = "torchtitan/config/job_config.py"
    return f"torchtitan {since} to {until} ({file}; {change})"


_R = Rule
_FP8 = "quantize.linear.float8"
_MX = "quantize.linear.mx"
_FP8_MOE = "quantize.grouped_mm.float8"
_MX_MOE = "quantize.grouped_mm.mx"
_PAR_980 = "moved to [parallelism] in #980 (785c34c9)"
_SCALING = (
    "delayed and static float8 scaling were deleted in #812 (2271b638); v0.2.2 scales dynamically"
)
_FT_MODULE = "torchtitan.components.ft.config"
_FLUX_MODULE = "torchtitan.models.flux.job_config"

OLD_MODULES: dict[str, tuple[str, str]] = {
    "torchtitan.experiments.flux.flux_argparser": (
        _FLUX_MODULE,
        "flux's config module 2025-04-04 to 2025-05-23 (#1024, d2b57cfa; an argparse function "
        "until #1153, 00b4a47c, then a JobConfig dataclass; renamed job_config.py in #1173, "
        "c1e796b9)",
    ),
    "torchtitan.experiments.flux.job_config": (
        _FLUX_MODULE,
        "flux's config module 2025-05-23 to 2025-10-27 (moved to torchtitan/models/flux in "
        "#1858, 7f126cbd)",
    ),
}
"""Earlier module paths of a built-in extension (``titan.schemas.builtin_extensions``): path -> (the
module today, its era). Their old keys ([eval], classifer_*) are rows below."""


def current_module(module: str) -> str:
    """The module path a built-in extension has today, for one of its earlier paths."""
    found = OLD_MODULES.get(module)
    return found[0] if found is not None else module


RULES: tuple[Rule, ...] = (
    # --- torchtrain/config_manager.py, the first TOML loader (bec909be, #76, 2024-02-23) ---
    _R(
        "profiling.run_profiler",
        "profiling.enable_profiling",
        "move",
        _era("2024-02", "2024-04", "renamed in #231 (a0a7ff73)"),
        "renamed",
    ),
    _R(
        "profiling.profile_every_x_iter",
        "profiling.profile_freq",
        "move",
        _era("2024-02", "2024-04", "renamed in the cleanup c7d58659"),
        "renamed",
    ),
    _R(
        "training.warmup_pct",
        "lr_scheduler.warmup_steps",
        "warmup_pct",
        _era("2024-02", "2024-02", "replaced by warmup steps in #99 (7acab70a)"),
        "a fraction of training.steps became a number of steps: max(int(steps * pct), 2)",
    ),
    _R(
        "training.sequence_parallel_degree",
        "parallelism.tensor_parallel_degree",
        "move",
        _era("2024-02", "2024-03", "renamed tensor_parallel_degree in #162 (e28832e7)"),
        "sequence parallel became tensor parallel, later moved to [parallelism]",
    ),
    _R(
        "training.pipeline_parallel_degree",
        "parallelism.pipeline_parallel_degree",
        "same",
        _era("2024-02", "2024-05", "moved to [experimental] with the first PP support, aafe0e87"),
        "pipeline parallel was not implemented in this era (a degree above 1 raised "
        "NotImplementedError), so only 1 means what it meant",
        (1,),
    ),
    _R(
        "training.checkpoint_interval",
        "checkpoint.interval",
        "move",
        _era("2024-02", "2024-04", "moved to [checkpoint] in bb3919d2"),
        "moved to [checkpoint]",
    ),
    _R(
        "training.checkpoint_interval_type",
        "checkpoint.interval",
        "same",
        _era("2024-02", "2024-04", "moved to [checkpoint] in bb3919d2"),
        "checkpoint.interval is always counted in steps at v0.2.2",
        ("steps",),
    ),
    _R(
        "training.checkpoint_folder",
        "checkpoint.folder",
        "folder",
        _era("2024-02", "2024-04", "moved to [checkpoint] in bb3919d2"),
        "a non-empty folder turned checkpointing on; v0.2.2 needs checkpoint.enable = true",
    ),
    _R(
        "training.enable_selective_ac",
        None,
        "values",
        _era("2024-02", "2024-03", "replaced by [activation_checkpoint] in #125 (0d415d78)"),
        "true was per-op selective checkpointing, false full checkpointing of every block "
        "(then applied only under data parallel)",
        (
            (
                True,
                (("activation_checkpoint.mode", "selective"),)
                + (("activation_checkpoint.selective_ac_option", "op"),),
            ),
            (False, (("activation_checkpoint.mode", "full"),)),
        ),
    ),
    _R(
        "comm.timeout_seconds",
        "comm.init_timeout_seconds",
        "move",
        _era("2024-03", "2024-03", "split into init and train timeouts in #149 (9eb6a216)"),
        "one timeout for every collective became an init and a training timeout; both get it",
        ("comm.train_timeout_seconds",),
    ),
    # --- torchtitan/config_manager.py, argparse (2024-04 to 2025-04) ---
    _R(
        "training.batch_size",
        "training.local_batch_size",
        "move",
        _era("2024-02", "2025-05", "renamed in #1238 (8570415c, gradient accumulation)"),
        "the per-device batch; training.global_batch_size now enables gradient accumulation",
    ),
    _R(
        "training.data_parallel_degree",
        "parallelism.data_parallel_shard_degree",
        "dp_degree",
        _era("2024-02", "2024-09", "replaced by the HSDP degrees in #518 (db6b39ac)"),
        "the data parallel degree became the FSDP shard degree (-1 still means every rank "
        'left); with training.data_parallel_type = "ddp" it is the replicate degree',
    ),
    _R(
        "training.data_parallel_type",
        None,
        "dp_type",
        _era("2024-07", "2024-09", "replaced by the HSDP degrees in #518 (db6b39ac)"),
        "v0.2.2 runs DDP when data_parallel_replicate_degree > 1 and data_parallel_shard_degree "
        "= 1, so DDP needs an explicit training.data_parallel_degree",
    ),
    _R(
        "training.data_parallel_replicate_degree",
        "parallelism.data_parallel_replicate_degree",
        "move",
        _era("2024-09", "2025-03", _PAR_980),
        "moved to [parallelism]",
    ),
    _R(
        "training.data_parallel_shard_degree",
        "parallelism.data_parallel_shard_degree",
        "move",
        _era("2024-09", "2025-03", _PAR_980),
        "moved to [parallelism]",
    ),
    _R(
        "training.tensor_parallel_degree",
        "parallelism.tensor_parallel_degree",
        "move",
        _era("2024-03", "2025-03", _PAR_980),
        "moved to [parallelism]",
    ),
    _R(
        "training.enable_loss_parallel",
        "parallelism.disable_loss_parallel",
        "invert",
        _era("2024-03", "2024-12", "inverted in the argparser rework f6a9daa1"),
        "the meaning flipped: enable_loss_parallel = true is disable_loss_parallel = false",
    ),
    _R(
        "training.disable_loss_parallel",
        "parallelism.disable_loss_parallel",
        "move",
        _era("2024-12", "2025-03", _PAR_980),
        "moved to [parallelism]",
    ),
    _R(
        "training.fsdp_reshard_after_forward",
        "parallelism.fsdp_reshard_after_forward",
        "move",
        _era("2025-02", "2025-03", _PAR_980),
        "moved to [parallelism]",
    ),
    _R(
        "training.warmup_steps",
        "lr_scheduler.warmup_steps",
        "move",
        _era("2024-02", "2025-03", "moved to [lr_scheduler] in #938 (0da8901b)"),
        "moved to [lr_scheduler]",
    ),
    _R(
        "training.compile",
        "compile.enable",
        "compile",
        _era("2024-02", "2025-08", "became [compile] in #1608 (08b8b244)"),
        "compile.components names what is compiled: the loss too since e10cb949 (2024-10-22), "
        "the model alone before",
        (("model",), ("model", "loss"), "2024-10-22"),
    ),
    _R(
        "training.seed",
        "debug.seed",
        "move",
        _era("2024-10", "2025-10", "moved to [debug] in #1807 (e61f2cce)"),
        "moved to [debug]",
    ),
    _R(
        "training.deterministic",
        "debug.deterministic",
        "move",
        _era("2024-12", "2025-10", "moved to [debug] in #1807 (e61f2cce)"),
        "moved to [debug]",
    ),
    _R(
        "training.debug_moe_force_load_balance",
        "debug.moe_force_load_balance",
        "move",
        _era("2025-10", "2025-10", "moved to [debug] in #1807 (e61f2cce)"),
        "moved to [debug]",
    ),
    _R(
        "job.use_for_integration_test",
        None,
        "ignored",
        _era("2024-03", "2025-08", "removed with the test framework rework #1431 (accc7027)"),
        "it only marked a config for torchtitan's own integration tests; training ignored it",
    ),
    _R(
        "job.print_args",
        "job.print_config",
        "move",
        _era("2024-12", "2025-10", "renamed in #1871 (7c104807)"),
        "renamed",
    ),
    _R(
        "job.save_config_folder",
        "job.save_config_file",
        "config_folder",
        _era("2025-10", "2025-10", "replaced by a file name in #1921 (7b96efc8)"),
        "a folder that received job_config.json became the file's path under job.dump_folder",
    ),
    _R(
        "checkpoint.interval_type",
        "checkpoint.interval",
        "same",
        _era("2024-04", "2025-02", "removed in the checkpointer refactor #899 (031f73f8)"),
        "checkpoint.interval is always counted in steps at v0.2.2",
        ("steps",),
    ),
    _R(
        "checkpoint.model_weights_only",
        "checkpoint.last_save_model_only",
        "move",
        _era("2024-04", "2025-06", "renamed last_save_model_weights_only in #1236 (cddd7dc8)"),
        "renamed twice; the default became true in #1336, so the value is written out",
    ),
    _R(
        "checkpoint.last_save_model_weights_only",
        "checkpoint.last_save_model_only",
        "move",
        _era("2025-06", "2025-07", "renamed in #1404 (beb29a1c)"),
        "renamed",
    ),
    _R(
        "checkpoint.initial_load_model_weights_only",
        "checkpoint.initial_load_model_only",
        "move",
        _era("2025-06", "2025-07", "renamed in #1404 (beb29a1c)"),
        "renamed",
    ),
    _R(
        "checkpoint.last_save_in_safetensors_format",
        "checkpoint.last_save_in_hf",
        "move",
        _era("2025-07", "2025-07", "renamed in #1404 (beb29a1c)"),
        "renamed: the last save in Hugging Face safetensors format",
    ),
    _R(
        "checkpoint.enable_checkpoint",
        "checkpoint.enable",
        "move",
        _era("2024-04", "2025-08", "renamed in #1607 (cd337db6)"),
        "renamed",
    ),
    _R(
        "validation.enabled",
        "validation.enable",
        "move",
        _era("2025-07", "2025-08", "renamed in #1607 (cd337db6)"),
        "renamed",
    ),
    _R(
        "memory_estimation.enabled",
        "memory_estimation.enable",
        "move",
        _era("2024-07", "2025-08", "renamed in #1608 (08b8b244)"),
        "renamed",
    ),
    _R(
        "estimate.memory",
        "memory_estimation.enable",
        "move",
        _era("2024-06", "2024-06", "became [memory_estimation] in 64d47fda"),
        "the table was renamed [memory_estimation]",
    ),
    _R(
        "estimate.mode",
        "memory_estimation.disable_fake_mode",
        "values",
        _era("2024-06", "2024-06", "became [memory_estimation] in 64d47fda"),
        'mode "fake" or "real" became the boolean disable_fake_mode',
        (("fake", False), ("real", True)),
    ),
    _R(
        "model.norm_type",
        None,
        "same",
        _era("2024-04", "2025-04", "removed in #1131 (9cf88aa1)"),
        "v0.2.2 models use RMSNorm (its fused and compiled variants computed the same norm)",
        ("rmsnorm", "fused_rmsnorm", "compiled_rmsnorm"),
    ),
    _R(
        "model.use_flex_attn",
        "model.flavor",
        "same",
        _era("2025-03", "2025-04", "moved into the model flavors in #1111 (8c6bf93e)"),
        'flex attention is chosen by the flavor at v0.2.2 (e.g. "debugmodel_flex_attn", "8B_flex")',
        (False,),
    ),
    _R(
        "model.attn_mask_type",
        "model.flavor",
        "same",
        _era("2025-04", "2025-04", "moved into the model flavors in #1111 (8c6bf93e)"),
        'the mask is part of the flavor at v0.2.2 (the "*_flex" flavors are block causal)',
        ("causal",),
    ),
    _R(
        "metrics.enable_color_printing",
        "metrics.disable_color_printing",
        "invert",
        _era("2024-04", "2024-12", "inverted in the argparser rework f6a9daa1"),
        "the meaning flipped: enable_color_printing = true is disable_color_printing = false",
    ),
    _R(
        "metrics.rank_0_only",
        "metrics.save_for_all_ranks",
        "invert",
        _era("2024-05", "2025-03", "inverted in #981 (7fe3620a)"),
        "the meaning flipped: rank_0_only = true is save_for_all_ranks = false",
    ),
    _R(
        "metrics.disable_logging_from_checkpoint",
        None,
        "same",
        _era("2025-03", "2025-03", "removed when metrics became a component, #945 (99f73969)"),
        "v0.2.2 has no switch for logging metrics from a checkpoint load",
        (False,),
    ),
    _R(
        "optimizer.fused",
        "optimizer.implementation",
        "values",
        _era("2024-06", "2025-02", "replaced by optimizer.implementation in #881 (6e498855)"),
        'fused = true is "fused"; false was torch\'s default, the "foreach" kernels',
        ((True, "fused"), (False, "foreach")),
    ),
    _R(
        "lr_scheduler.lr_min",
        "lr_scheduler.min_lr_factor",
        "move",
        _era("2025-03", "2025-07", "renamed in #1471 (881f0ca4)"),
        "renamed; the same fraction of optimizer.lr",
    ),
    # --- [experimental]: pipeline, context and async TP (2024-05 to 2025-03) ---
    _R(
        "experimental.pipeline_parallel_degree",
        "parallelism.pipeline_parallel_degree",
        "move",
        _era("2024-05", "2025-03", _PAR_980),
        "moved to [parallelism]",
    ),
    _R(
        "experimental.pipeline_parallel_schedule",
        "parallelism.pipeline_parallel_schedule",
        "spelling",
        _era("2024-05", "2025-03", _PAR_980),
        "moved to [parallelism]; the 2024 spellings became torch's schedule class names in "
        "2024-10, and FlexibleInterleaved1F1B was folded into Interleaved1F1B",
        (
            ("1f1b", "1F1B"),
            ("gpipe", "GPipe"),
            ("interleaved_1f1b", "Interleaved1F1B"),
            ("flexible_interleaved_1f1b", "Interleaved1F1B"),
            ("FlexibleInterleaved1F1B", "Interleaved1F1B"),
        ),
    ),
    _R(
        "experimental.pipeline_parallel_schedule_csv",
        "parallelism.pipeline_parallel_schedule_csv",
        "move",
        _era("2024-11", "2025-03", _PAR_980),
        "moved to [parallelism]",
    ),
    _R(
        "experimental.pipeline_parallel_split_points",
        "parallelism.module_fqns_per_model_part",
        "same",
        _era("2024-05", "2025-03", _PAR_980),
        "split points named layer boundaries; v0.2.2 takes the module names of each stage "
        "(module_fqns_per_model_part) or pipeline_parallel_layers_per_stage",
        ([],),
    ),
    _R(
        "parallelism.pipeline_parallel_split_points",
        "parallelism.module_fqns_per_model_part",
        "same",
        _era("2025-03", "2025-10", "removed in #1868 (6e06a49c)"),
        "split points named layer boundaries; v0.2.2 takes the module names of each stage "
        "(module_fqns_per_model_part) or pipeline_parallel_layers_per_stage",
        ([],),
    ),
    _R(
        "experimental.pipeline_parallel_split_mode",
        None,
        "same",
        _era("2024-05", "2024-08", "the tracer frontend was removed in b029b739"),
        'v0.2.2 always splits the model by hand ("manual"); the tracer is gone',
        ("manual",),
    ),
    _R(
        "experimental.pipeline_parallel_microbatches",
        "parallelism.pipeline_parallel_microbatch_size",
        "microbatches",
        _era("2024-05", "2025-03", _PAR_980),
        "a number of microbatches became a microbatch size: local_batch_size / microbatches",
    ),
    _R(
        "parallelism.pipeline_parallel_microbatches",
        "parallelism.pipeline_parallel_microbatch_size",
        "microbatches",
        _era("2025-03", "2025-04", "replaced by a microbatch size in #1072 (8b737fe3)"),
        "a number of microbatches became a microbatch size: local_batch_size / microbatches",
    ),
    _R(
        "experimental.context_parallel_degree",
        "parallelism.context_parallel_degree",
        "move",
        _era("2024-10", "2025-03", _PAR_980),
        "moved to [parallelism]",
    ),
    _R(
        "experimental.context_parallel_rotate_method",
        "parallelism.context_parallel_rotate_method",
        "move",
        _era("2024-12", "2025-03", _PAR_980),
        "moved to [parallelism]",
    ),
    _R(
        "experimental.enable_async_tensor_parallel",
        "parallelism.enable_async_tensor_parallel",
        "move",
        _era("2024-06", "2025-03", _PAR_980),
        "moved to [parallelism]",
    ),
    _R(
        "experimental.enable_compiled_autograd",
        None,
        "same",
        _era("2024-07", "2025-03", _PAR_980 + ", removed as unused in #1939 (8228c084)"),
        "compiled autograd was removed before v0.2.1; v0.2.2 never uses it",
        (False,),
    ),
    _R(
        "parallelism.enable_compiled_autograd",
        None,
        "same",
        _era("2025-03", "2025-10", "removed as unused in #1939 (8228c084)"),
        "compiled autograd was removed before v0.2.1; v0.2.2 never uses it",
        (False,),
    ),
    _R(
        "experimental.torch_spmd",
        None,
        "same",
        _era("2024-09", "2024-09", "reverted in #570 (1923ce4d)"),
        "the torch_spmd parallelism never stayed on main",
        (False,),
    ),
    _R(
        "experimental.custom_model_path",
        "experimental.custom_import",
        "same",
        _era("2025-02", "2025-03", "filesystem-path imports were removed in #983 (b315517d)"),
        "it was a filesystem path; v0.2.2 imports experimental.custom_import by dotted module name",
        ("",),
    ),
    # --- float8 in [training] (2024-03 to 2024-07, float8_experimental) ---
    _R(
        "training.fp8_linear",
        _FP8,
        "converter",
        _era("2024-03", "2024-07", "became training.enable_fp8_linear in #413 (a4b2ee3c)"),
        'it swapped nn.Linear for dynamically scaled Float8Linear, as the "quantize.linear.float8" '
        'converter does ("dynamic" in its first months, then true)',
        (_FP8, "dynamic"),
    ),
    _R(
        "training.enable_fp8_linear",
        _FP8,
        "converter",
        _era("2024-07", "2024-07", "renamed enable_float8_linear in #466 (69fe8def)"),
        "float8 linear layers are a model converter at v0.2.2",
        (_FP8,),
    ),
    _R(
        "training.enable_float8_linear",
        _FP8,
        "converter",
        _era("2024-07", "2024-07", "moved to [float8] in #492 (239d56fc)"),
        "float8 linear layers are a model converter at v0.2.2",
        (_FP8,),
    ),
    _R(
        "training.enable_fsdp_fp8_all_gather",
        _FP8 + ".enable_fsdp_float8_all_gather",
        "move",
        _era("2024-07", "2024-07", "renamed in #466 (69fe8def)"),
        "renamed and moved to the float8 converter's table",
    ),
    _R(
        "training.enable_fsdp_float8_all_gather",
        _FP8 + ".enable_fsdp_float8_all_gather",
        "move",
        _era("2024-07", "2024-07", "moved to [float8] in #492 (239d56fc)"),
        "moved to the float8 converter's table",
    ),
    _R(
        "training.precompute_float8_dynamic_scale_for_fsdp",
        _FP8 + ".precompute_float8_dynamic_scale_for_fsdp",
        "move",
        _era("2024-07", "2024-07", "moved to [float8] in #492 (239d56fc)"),
        "moved to the float8 converter's table",
    ),
    *(
        _R(
            f"training.float8_scaling_type_{kind}",
            _FP8 + ".recipe_name",
            "same",
            _era("2024-07", "2024-07", "moved to [float8] in #492 (239d56fc)"),
            _SCALING,
            ("dynamic",),
        )
        for kind in ("input", "weight", "grad_output")
    ),
    # --- [float8] (2024-07 to 2025-09) and [mx] (2025-05 to 2025-09) ---
    _R(
        "float8.enable_float8_linear",
        _FP8,
        "converter",
        _era("2024-07", "2025-02", "replaced by model.converters in #823 (57387af0)"),
        'float8 linear layers are the "quantize.linear.float8" converter at v0.2.2',
        (_FP8,),
    ),
    *(
        _R(
            f"float8.scaling_type_{kind}",
            _FP8 + ".recipe_name",
            "same",
            _era("2024-07", "2025-01", "removed in #812 (2271b638)"),
            _SCALING,
            ("dynamic",),
        )
        for kind in ("input", "weight", "grad_output")
    ),
    *(
        _R(
            f"float8.{key}",
            f"{_FP8}.{key}",
            "move",
            _era(since, "2025-09", "[quantize.dense.float8] in #1701, renamed in #1763 (8a2686c4)"),
            'moved to the "quantize.linear.float8" converter\'s table',
        )
        for key, since in (
            ("enable_fsdp_float8_all_gather", "2024-07"),
            ("precompute_float8_dynamic_scale_for_fsdp", "2024-07"),
            ("filter_fqns", "2025-04"),
            ("emulate", "2025-05"),
        )
    ),
    _R(
        "float8.recipe_name",
        _FP8 + ".recipe_name",
        "spelling",
        _era("2025-02", "2025-09", "[quantize.dense.float8] in #1701, renamed in #1763 (8a2686c4)"),
        'moved to the "quantize.linear.float8" converter\'s table; its short-lived "mxfp8" '
        'recipe is the "quantize.linear.mx" converter now',
        (("mxfp8", None),),
    ),
    _R(
        "float8.force_recompute_fp8_weight_in_bwd",
        None,
        "same",
        _era("2025-02", "2025-07", "removed in #1452 (1fefaee0) after torchao deprecated it"),
        "v0.2.2 has no switch to force recomputing float8 weights in backward",
        (False,),
    ),
    _R(
        "float8.moe_fqns_prototype",
        _FP8_MOE + ".fqns",
        "moe",
        _era("2025-06", "2025-09", "[quantize.moe.float8] in #1701, renamed in #1763 (8a2686c4)"),
        "float8 MoE layers are their own converter now; it is listed when the file listed the "
        "float8 linear converter, the only case the old option applied",
        (_FP8_MOE, ("float8", _FP8)),
    ),
    _R(
        "mx.moe_fqns_prototype",
        _MX_MOE + ".fqns",
        "moe",
        _era("2025-07", "2025-09", "[quantize.moe.mx] in #1701, renamed in #1763 (8a2686c4)"),
        "MX MoE layers are their own converter now; it is listed when the file listed the MX "
        "linear converter, the only case the old option applied",
        (_MX_MOE, ("mx", _MX)),
    ),
    *(
        _R(
            f"mx.{key}",
            f"{_MX}.{key}",
            "move",
            _era(since, "2025-09", "[quantize.dense.mx] in #1701, renamed in #1763 (8a2686c4)"),
            'moved to the "quantize.linear.mx" converter\'s table',
        )
        for key, since in (
            ("filter_fqns", "2025-05"),
            ("mxfp8_dim1_cast_kernel_choice", "2025-07"),
        )
    ),
    _R(
        "mx.recipe_name",
        _MX + ".recipe_name",
        "spelling",
        _era("2025-05", "2025-09", "[quantize.dense.mx] in #1701, renamed in #1763 (8a2686c4)"),
        'moved to the "quantize.linear.mx" converter\'s table; its "mxfp8", the only name '
        'until #1512 (48d8dcde, 2025-08-01), was torchao\'s "mxfp8_cublas" recipe, and later '
        "names went to torchao as they are",
        (("mxfp8", "mxfp8_cublas"),),
    ),
    _R(
        "mx.use_fp8_dim1_cast_triton_kernel",
        _MX + ".mxfp8_dim1_cast_kernel_choice",
        "values",
        _era("2025-05", "2025-07", "replaced by a kernel choice in #1427 (f3e2a75e)"),
        'true (the Triton kernel) is "triton", false (plain torch) is "torch"',
        ((True, "triton"), (False, "torch")),
    ),
    # --- [quantize.dense.*] / [quantize.moe.*]: main only, #1701 (2025-09-26) to #1763 ---
    *(
        _R(
            old,
            new,
            "table",
            _era("2025-09", "2025-09", "renamed in #1763 (8a2686c4)"),
            f"[{old}] was renamed [{new}]",
        )
        for old, new in (
            ("quantize.dense.float8", _FP8),
            ("quantize.dense.mx", _MX),
            ("quantize.moe.float8", _FP8_MOE),
            ("quantize.moe.mx", _MX_MOE),
        )
    ),
    # --- base keys in v0.1.0 that moved to the fault-tolerance config module (#1516) ---
    *(
        _R(
            f"fault_tolerance.{key}",
            f"fault_tolerance.{key}",
            "extension",
            _era(since, "2025-08", "moved to torchtitan.components.ft.config in #1516 (be211c82)"),
            f"v0.2.2 reads it only with job.custom_config_module = {_FT_MODULE!r}",
            (_FT_MODULE,),
        )
        for key, since in (
            ("sync_steps", "2025-04"),
            ("should_quantize", "2025-06"),
            ("fragment_sync_delay", "2025-06"),
            ("fragment_update_alpha", "2025-06"),
            ("module_fqns_per_model_fragment", "2025-08"),
            ("num_fragments", "2025-08"),
        )
    ),
    _R(
        "float8.moe_fqns",
        _FP8_MOE + ".fqns",
        "never",
        "never a torchtitan key: shipped deepseek_v3 and llama4 TOMLs wrote it from #1373 "
        "(2025-07) until #1659 (4256f756, 2025-08-29) renamed it moe_fqns_prototype",
        f"the setting is `{_FP8_MOE}.fqns` with {_FP8_MOE!r} in model.converters",
    ),
    # --- the first configs: torchtrain/train_config.toml, read as a plain dict by
    #     torchtrain/profiling.py and metrics.py before the config manager (61eaa472, 2024-01-18) ---
    _R(
        "global.dump_folder",
        "job.dump_folder",
        "move",
        "torchtitan 2024-01 to 2024-02 (torchtrain/train_config.toml, read by "
        "torchtrain/profiling.py and metrics.py; became [job] in #76, bec909be)",
        "the [global] table was renamed [job]",
    ),
    # --- keys upstream's own TOMLs carried that the loader of their time never read ---
    _R(
        "metrics.use_for_integration_test",
        None,
        "ignored",
        "torchtitan 2024-03 to 2024-03 (an upstream file's key: train_configs/debug_model_2d.toml "
        "wrote it in [metrics] from #171, ab5d9182, for a day; the loader declared "
        "job.use_for_integration_test)",
        "its loader ignored it, so it had no effect: safe to delete",
    ),
    _R(
        "eval.classifer_free_guidance_scale",
        None,
        "ignored",
        "torchtitan 2025-04 to 2025-07 (an upstream file's key: flux's TOMLs misspelt it from "
        "#1099, 738000f9, to #1377, 85183069; flux declared eval.classifier_free_guidance_scale)",
        "its loader ignored it, so sampling used the default scale 5.0: safe to delete",
    ),
    _R(
        "encoder.auto_encoder_path",
        None,
        "ignored",
        "torchtitan 2025-04 to 2025-04 (an upstream file's key: flux's TOMLs wrote it from "
        "#1024, d2b57cfa, until #1099, 738000f9; nothing declared or read it, "
        "encoder.autoencoder_path came in #1120)",
        "its loader ignored it, so it had no effect: safe to delete",
    ),
    _R(
        "training.guidance",
        None,
        "ignored",
        "torchtitan 2025-04 to 2025-04 (torchtitan/experiments/flux/flux_argparser.py, #1024, "
        "d2b57cfa; removed with guidance distillation in #1099, 738000f9)",
        "flux's argparser declared it but no code read it: no effect",
    ),
    # --- flux's [eval] (2025-04-16 to 2025-08-05) became its [validation] in #1518 (a204e318) ---
    *(
        _R(
            f"eval.{old}",
            f"validation.{new}",
            "extension",
            f"torchtitan {since} to 2025-08 (torchtitan/experiments/flux; [eval] became "
            "[validation] in #1518, a204e318)",
            f"v0.2.2 reads it only with job.custom_config_module = {_FLUX_MODULE!r}",
            (_FLUX_MODULE,),
        )
        for old, new, since in (
            ("enable_classifer_free_guidance", "enable_classifier_free_guidance", "2025-04"),
            ("enable_classifier_free_guidance", "enable_classifier_free_guidance", "2025-07"),
            ("classifier_free_guidance_scale", "classifier_free_guidance_scale", "2025-04"),
            ("denoising_steps", "denoising_steps", "2025-04"),
            ("save_img_folder", "save_img_folder", "2025-04"),
        )
    ),
    _R(
        "eval.eval_freq",
        "validation.freq",
        "same",
        "torchtitan 2025-04 to 2025-08 (torchtitan/experiments/flux; [eval] became [validation] "
        "in #1518, a204e318)",
        "flux generated an image every eval_freq steps and at the last step; v0.2.2 generates "
        "them inside validation (validation.enable, every validation.freq steps, with a "
        "validation loss), and its validation.eval_freq is read by nothing",
    ),
    _R(
        "training.classifer_free_guidance_prob",
        "training.classifier_free_guidance_prob",
        "extension",
        "torchtitan 2025-04 to 2025-07 (torchtitan/experiments/flux; renamed in #1377, "
        "85183069, 2025-07-10)",
        "renamed; until #1259 (744189f0, 2025-06-04) one draw dropped both text encodings, "
        "since then each is dropped on its own draw",
        (_FLUX_MODULE, "744189f0"),
    ),
    # --- [training] spellings torchtitan never had (until #1644, eadca483, 2025-08-28, its
    #     loaders ignored undeclared TOML keys, so these ran with the default): say where the
    #     setting lives, carry nothing ---
    *(
        _R(f"training.{key}", to, "never", "never a torchtitan key", f"the setting is `{to}`")
        for key, to in (
            ("context_parallel_degree", "parallelism.context_parallel_degree"),
            ("expert_parallel_degree", "parallelism.expert_parallel_degree"),
            ("enable_checkpoint", "checkpoint.enable"),
            ("enable_async_tensor_parallel", "parallelism.enable_async_tensor_parallel"),
        )
    ),
)
"""Every row, grouped by era; :func:`titan.schemas.eras.rule_for` looks them up."""
