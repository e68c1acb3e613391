"""Legacy torchtitan config keys that were renamed, moved or removed before v0.2.2.

torchtitan's ``JobConfig`` changed shape many times (argparse ``torchtrain/config_manager.py``
in early 2024, argparse ``torchtitan/config_manager.py`` through early 2025, dataclasses from
spring 2025, ``torchtitan/config/job_config.py`` from mid 2025). A TOML written for an older
era fails at v0.2.2 with "Invalid field names", which tells the user nothing about where the
setting went. This table lets the validator answer "``training.compile`` is now
``compile.enable``". Every row was checked against a real older source (cited per group below)
and every ``new`` against the v0.2.2 schema; release boundaries come from the PyPI wheels
0.1.0 (built 2025-06-18), 0.2.0 (2025-10-18), 0.2.1 (2025-12-26) and 0.2.2 (2026-02-20).
"""


class MovedKey:
    """One row of the table: where a legacy key went, since when, and what a user must know.

    Immutable like the frozen dataclass it used to be, but written out: this module is imported
    whenever a file has an unknown key, and ``import dataclasses`` would cost more than the whole
    check. It stays pure stdlib (``dataclasses`` is imported only to raise its error)."""

    __slots__ = ("old", "new", "era", "note", "inverted")
    __match_args__ = ("old", "new", "era", "note", "inverted")

    old: str  # dotted legacy path; a section name alone ("float8") means the whole table
    new: str | None  # dotted v0.2.2 path (or section); None = removed with no replacement
    era: str  # e.g. "before v0.1.0", "removed in #1234 (2025-03)"
    note: str  # one sentence a user needs: inverted meaning, value must change, how to enable
    inverted: bool  # True when the boolean meaning flipped (enable_x -> disable_x)

    def __init__(
        self, old: str, new: str | None, era: str, note: str = "", inverted: bool = False
    ) -> None:
        _set = object.__setattr__
        _set(self, "old", old)
        _set(self, "new", new)
        _set(self, "era", era)
        _set(self, "note", note)
        _set(self, "inverted", inverted)

    def _values(self) -> tuple:
        return (self.old, self.new, self.era, self.note, self.inverted)

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"MovedKey({fields})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._values() == other._values()  # type: ignore[attr-defined]
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._values())

    def __setattr__(self, name: str, value: object) -> None:
        import dataclasses

        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        import dataclasses

        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    def __getstate__(self) -> tuple:
        return self._values()

    def __setstate__(self, state: tuple) -> None:
        for name, value in zip(self.__slots__, state, strict=True):
            object.__setattr__(self, name, value)


_M = MovedKey
_PAR = "moved to [parallelism] in early 2025 (before v0.1.0)"
_FP8_ON = 'list "quantize.linear.float8" in model.converters (the old converter name "float8" is not registered at v0.2.2)'

MOVED_KEYS: tuple[MovedKey, ...] = (
    # --- torchtrain era: pytorch/torchtitan@00560676 torchtrain/config_manager.py (2024-03) ---
    _M("profiling.run_profiler", "profiling.enable_profiling", "renamed in #230 (2024-04)"),
    _M("profiling.profile_every_x_iter", "profiling.profile_freq", "renamed by mid-2024"),
    _M(
        "training.sequence_parallel_degree",
        "parallelism.tensor_parallel_degree",
        "renamed in #162 (2024-03), later moved to [parallelism]",
    ),
    _M(
        "training.checkpoint_folder",
        "checkpoint.folder",
        "moved to [checkpoint] 2024-04",
        "an empty folder no longer disables checkpointing: set checkpoint.enable = true to turn it on",
    ),
    _M("training.checkpoint_interval", "checkpoint.interval", "moved to [checkpoint] 2024-04"),
    _M(
        "training.checkpoint_interval_type",
        None,
        "moved to [checkpoint] 2024-04, removed early 2025",
        "checkpoint.interval is always counted in steps",
    ),
    _M(
        "training.fp8_linear",
        "model.converters",
        "replaced by [float8] in 2024, then by converters",
        _FP8_ON,
    ),
    # --- 2024 argparse: torchtrain@00560676, tianyu-l/torchtitan_intern24@8f627008,
    #     pytorch/torchtitan@0011fb90 torchtitan/config_manager.py (2024-08/09),
    #     mori360/torchtitan@1d59b935 (2024-11), NousResearch/torchtitan@0a285783 (2025-01) ---
    _M(
        "training.data_parallel_degree",
        "parallelism.data_parallel_shard_degree",
        "renamed in #518 (HSDP, 2024-09), later moved to [parallelism]",
        "-1 still means all remaining ranks",
    ),
    _M(
        "training.pipeline_parallel_degree",
        "parallelism.pipeline_parallel_degree",
        "moved to [experimental] in 2024, then to [parallelism] early 2025",
    ),
    _M(
        "training.enable_loss_parallel",
        "parallelism.disable_loss_parallel",
        "inverted around 2025-01",
        "meaning flipped: enable_loss_parallel = true is disable_loss_parallel = false",
        inverted=True,
    ),
    _M("training.disable_loss_parallel", "parallelism.disable_loss_parallel", _PAR),
    _M(
        "training.data_parallel_replicate_degree",
        "parallelism.data_parallel_replicate_degree",
        _PAR,
    ),
    _M("training.data_parallel_shard_degree", "parallelism.data_parallel_shard_degree", _PAR),
    _M("training.tensor_parallel_degree", "parallelism.tensor_parallel_degree", _PAR),
    _M("training.fsdp_reshard_after_forward", "parallelism.fsdp_reshard_after_forward", _PAR),
    _M(
        "experimental.enable_async_tensor_parallel",
        "parallelism.enable_async_tensor_parallel",
        _PAR,
    ),
    _M("experimental.pipeline_parallel_degree", "parallelism.pipeline_parallel_degree", _PAR),
    _M(
        "experimental.pipeline_parallel_schedule",
        "parallelism.pipeline_parallel_schedule",
        _PAR,
        'values are torch.distributed.pipelining schedule names ("1F1B", "Interleaved1F1B"); '
        '2024 spellings such as "interleaved_1f1b" must change',
    ),
    _M(
        "experimental.pipeline_parallel_schedule_csv",
        "parallelism.pipeline_parallel_schedule_csv",
        _PAR,
    ),
    _M(
        "experimental.pipeline_parallel_split_points",
        "parallelism.module_fqns_per_model_part",
        _PAR + "; split points removed before v0.2.0",
        "no direct translation: list the module FQNs of each stage, or use pipeline_parallel_layers_per_stage",
    ),
    _M(
        "experimental.pipeline_parallel_microbatches",
        "parallelism.pipeline_parallel_microbatch_size",
        _PAR + "; replaced in #1073 (2025-04)",
        "was a number of microbatches, now a size: microbatches = local_batch_size / microbatch_size",
    ),
    _M("experimental.pipeline_parallel_split_mode", None, "removed 2024 (tracer frontend dropped)"),
    _M("experimental.context_parallel_degree", "parallelism.context_parallel_degree", _PAR),
    _M(
        "experimental.context_parallel_rotate_method",
        "parallelism.context_parallel_rotate_method",
        _PAR,
    ),
    _M(
        "experimental.enable_compiled_autograd",
        None,
        "moved to [parallelism] early 2025, removed in v0.2.1",
    ),
    _M(
        "experimental.custom_model_path",
        "experimental.custom_import",
        "renamed 2025-03 (after #983)",
        "must be a dotted import path; filesystem paths are no longer accepted",
    ),
    _M(
        "training.enable_optimizer_in_backward",
        "optimizer.early_step_in_backward",
        "renamed between 2024-11 and 2025-01",
    ),
    _M(
        "training.batch_size",
        "training.local_batch_size",
        "renamed in #1238 (2025-06, before v0.1.0)",
        "per-device batch; the new training.global_batch_size enables gradient accumulation",
    ),
    _M(
        "training.warmup_steps",
        "lr_scheduler.warmup_steps",
        "moved to [lr_scheduler] early 2025 (before v0.1.0)",
    ),
    _M(
        "metrics.rank_0_only",
        "metrics.save_for_all_ranks",
        "inverted early 2025 (before v0.1.0)",
        "meaning flipped: rank_0_only = true is save_for_all_ranks = false",
        inverted=True,
    ),
    _M(
        "metrics.enable_color_printing",
        "metrics.disable_color_printing",
        "inverted between 2024-09 and 2025-01",
        "meaning flipped: enable_color_printing = true is disable_color_printing = false",
        inverted=True,
    ),
    _M(
        "optimizer.fused",
        "optimizer.implementation",
        "replaced in #881 (2025-02)",
        'value changes: fused = true -> "fused", fused = false -> "foreach"',
    ),
    _M(
        "model.norm_type",
        None,
        "removed before v0.1.0",
        "the norm is fixed by the model and flavor",
    ),
    _M(
        "checkpoint.interval_type",
        None,
        "removed early 2025",
        "checkpoint.interval is always counted in steps",
    ),
    _M(
        "checkpoint.model_weights_only",
        "checkpoint.last_save_model_only",
        "renamed last_save_model_weights_only before v0.1.0, then last_save_model_only before v0.2.0",
        "the default became true in #1336 (2025-06)",
    ),
    _M(
        "float8.enable_float8_linear",
        "model.converters",
        "replaced by model.converters early 2025",
        _FP8_ON,
    ),
    _M(
        "float8.scaling_type_input",
        None,
        "removed around 2025-01",
        "use quantize.linear.float8.recipe_name",
    ),
    _M(
        "float8.scaling_type_weight",
        None,
        "removed around 2025-01",
        "use quantize.linear.float8.recipe_name",
    ),
    _M(
        "float8.scaling_type_grad_output",
        None,
        "removed around 2025-01",
        "use quantize.linear.float8.recipe_name",
    ),
    # --- v0.1.0 wheel (torchtitan/config_manager.py) and pytorch/torchtitan@000204a4
    #     torchtitan/config/job_config.py (main, 2025-07) -> v0.2.0 wheel ---
    _M(
        "float8",
        "quantize.linear.float8",
        "[quantize.dense.float8] in #1701 (2025-09), renamed in #1763 (2025-09-30)",
        "the table only takes effect when " + _FP8_ON,
    ),
    _M(
        "mx",
        "quantize.linear.mx",
        "[quantize.dense.mx] in #1701 (2025-09), renamed in #1763 (2025-09-30)",
        'the table only takes effect when model.converters lists "quantize.linear.mx" (old name "mx")',
    ),
    _M("float8.force_recompute_fp8_weight_in_bwd", None, "removed between v0.1.0 and v0.2.0"),
    _M(
        "float8.moe_fqns_prototype",
        "quantize.grouped_mm.float8.fqns",
        "main only (2025-07), replaced by the quantize MoE table in #1701 (2025-09)",
        'also list "quantize.grouped_mm.float8" in model.converters',
    ),
    _M(
        "mx.use_fp8_dim1_cast_triton_kernel",
        "quantize.linear.mx.mxfp8_dim1_cast_kernel_choice",
        "v0.1.0, replaced on main by 2025-07",
        'was a bool (true = triton kernel); now "triton", "cuda" or "torch"',
    ),
    _M(
        "quantize.dense.float8",
        "quantize.linear.float8",
        "main only: #1701 (2025-09-12) to #1763 (2025-09-30)",
    ),
    _M(
        "quantize.moe.float8",
        "quantize.grouped_mm.float8",
        "main only: #1701 (2025-09-12) to #1763 (2025-09-30)",
    ),
    _M(
        "quantize.dense.mx",
        "quantize.linear.mx",
        "main only: #1701 (2025-09-12) to #1763 (2025-09-30)",
    ),
    _M(
        "quantize.moe.mx",
        "quantize.grouped_mm.mx",
        "main only: #1701 (2025-09-12) to #1763 (2025-09-30)",
    ),
    _M(
        "checkpoint.enable_checkpoint",
        "checkpoint.enable",
        "renamed between v0.1.0 and v0.2.0 (#1607, 2025-08)",
    ),
    _M(
        "checkpoint.last_save_model_weights_only",
        "checkpoint.last_save_model_only",
        "renamed before v0.2.0",
        "the default became true in #1336 (2025-06)",
    ),
    _M(
        "checkpoint.initial_load_model_weights_only",
        "checkpoint.initial_load_model_only",
        "renamed before v0.2.0",
    ),
    _M(
        "training.compile",
        "compile.enable",
        "moved in #1608 (2025-08, before v0.2.0)",
        'compile.components (default ["model", "loss"]) selects what is compiled',
    ),
    _M(
        "lr_scheduler.lr_min",
        "lr_scheduler.min_lr_factor",
        "renamed between v0.1.0 and v0.2.0 (issue #1457)",
        "same meaning: a fraction of optimizer.lr",
    ),
    _M("job.print_args", "job.print_config", "renamed between v0.1.0 and v0.2.0"),
    _M("job.use_for_integration_test", None, "removed between v0.1.0 and v0.2.0"),
    _M(
        "memory_estimation.enabled", "memory_estimation.enable", "renamed between v0.1.0 and v0.2.0"
    ),
    _M("validation.enabled", "validation.enable", "main only (2025-07), renamed before v0.2.0"),
    _M(
        "parallelism.pipeline_parallel_split_points",
        "parallelism.module_fqns_per_model_part",
        "removed between v0.1.0 and v0.2.0 (PP splitting refactor #1416)",
        "no direct translation: list the module FQNs of each stage, or use pipeline_parallel_layers_per_stage",
    ),
    _M(
        "parallelism.pipeline_parallel_microbatches",
        "parallelism.pipeline_parallel_microbatch_size",
        "replaced in #1073 (2025-04)",
        "was a number of microbatches, now a size: microbatches = local_batch_size / microbatch_size",
    ),
    _M("parallelism.enable_compiled_autograd", None, "removed between v0.2.0 and v0.2.1"),
    _M("training.seed", "debug.seed", "moved to [debug] between v0.2.0 and v0.2.1"),
    _M(
        "training.deterministic",
        "debug.deterministic",
        "moved to [debug] between v0.2.0 and v0.2.1",
    ),
    _M(
        "training.debug_moe_force_load_balance",
        "debug.moe_force_load_balance",
        "v0.2.0 only, moved to [debug] in v0.2.1",
    ),
    *(
        _M(
            f"fault_tolerance.{k}",
            f"fault_tolerance.{k}",
            "base key in v0.1.0, moved to the ft module before v0.2.0",
            'only valid with job.custom_config_module = "torchtitan.components.ft.config"',
        )
        for k in ("sync_steps", "should_quantize", "fragment_sync_delay", "fragment_update_alpha")
    ),
    # --- [training] spellings that teams wrote by analogy with the rows above; torchtitan never
    #     read them there, but the intent is unambiguous, so say where the setting lives ---
    _M(
        "training.context_parallel_degree",
        "parallelism.context_parallel_degree",
        "context parallel lives in [parallelism] (it started in [experimental])",
    ),
    _M(
        "training.expert_parallel_degree",
        "parallelism.expert_parallel_degree",
        "expert parallel lives in [parallelism]",
    ),
    _M("training.enable_checkpoint", "checkpoint.enable", "checkpointing lives in [checkpoint]"),
    _M("training.enable_async_tensor_parallel", "parallelism.enable_async_tensor_parallel", _PAR),
    # --- deprecated but still accepted at v0.2.2 (see DEPRECATED_BUT_VALID) ---
    _M(
        "model.tokenizer_path",
        "model.hf_assets_path",
        "deprecated in #1526 (2025-08), still accepted at v0.2.2",
        "deprecated: copied into hf_assets_path with a warning; it must name a directory, not tokenizer.model",
    ),
    _M(
        "experimental.custom_args_module",
        "job.custom_config_module",
        "deprecated in #1871 (2025-10), still accepted at v0.2.2",
        "deprecated: it is copied only after parsing, so the custom module's sections are rejected",
    ),
)

SECTION_ROWS: frozenset[str] = frozenset(
    {
        "float8",
        "mx",
        "quantize.dense.float8",
        "quantize.moe.float8",
        "quantize.dense.mx",
        "quantize.moe.mx",
    }
)
"""Rows whose ``old`` is a whole legacy table; keys below it follow the table unless listed."""

DEPRECATED_BUT_VALID: frozenset[str] = frozenset(
    {"model.tokenizer_path", "experimental.custom_args_module"}
)
"""Legacy paths that still parse at v0.2.2 (with a warning): a deprecation, not an unknown key."""

_BY_OLD: dict[str, MovedKey] = {row.old: row for row in MOVED_KEYS}


def lookup(path: str) -> MovedKey | None:
    """Exact match on `path`, else the longest section-prefix row (so `float8.emulate` finds the
    `float8` row and maps to `quantize.linear.float8.emulate`)."""
    row = _BY_OLD.get(path)
    if row is not None:
        return row
    parts = path.split(".")
    for end in range(len(parts) - 1, 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in SECTION_ROWS:
            return _BY_OLD[prefix]
    return None


def new_location(path: str) -> str | None:
    """Where `path` lives now: for a section row, the suffix is appended to `new`."""
    row = lookup(path)
    if row is None or row.new is None:
        return None
    if row.old == path:
        return row.new
    return row.new + path[len(row.old) :]
