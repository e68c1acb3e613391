"""What the cross-field rules read: a small neutral view of a config that both forms build.

The TOML validator (``titan.schemas.legacy_facts``) builds :class:`ConfigFacts` from a legacy document,
the registry check (``titan.config.registry_facts``) from a ``Trainer.Config``; the rules in
``titan.schemas.rules`` read only these facts, so they cannot tell the two forms apart. Each fact is a
:class:`Setting`: the effective value and where the user sets it.
"""

from __future__ import annotations

from typing import Any

from titan.schemas._frozen import Frozen, _set
from titan.schemas.diagnostics import Span


class Setting(Frozen):
    """One effective value, with where the user sets it (the default when they did not)."""

    __slots__ = ("value", "path", "span", "written")
    __match_args__ = ("value", "path", "span")

    value: Any
    """The effective value (the default when not written)."""
    path: str
    """Dotted path in the form being checked."""
    span: Span | None
    """Where it is written; ``None`` when it is a default (or, in a registry function, the
    place that stands for it: the nearest written parent, or the ``def`` line)."""
    written: bool
    """Whether the user wrote this value (by default: whether it has a span)."""

    def __init__(
        self, value: Any, path: str, span: Span | None = None, *, written: bool | None = None
    ) -> None:
        _set(self, "value", value)
        _set(self, "path", path)
        _set(self, "span", span)
        _set(self, "written", span is not None if written is None else written)


class ExpertRouting(Frozen):
    """How one mixture of experts routes tokens, as the model will build it: a registry config's
    MoE fields (with their spans), or a TOML flavor's routing (at ``model.flavor``)."""

    __slots__ = ("num_experts", "top_k", "num_expert_groups", "num_limited_groups")
    __match_args__ = ()

    num_experts: Setting
    """Routed experts."""
    top_k: Setting
    """Routed experts each token goes to."""
    num_expert_groups: Setting
    """Expert groups of group-limited routing (``None``: routing over all experts)."""
    num_limited_groups: Setting
    """Groups a token may use under group-limited routing."""

    def __init__(self, **settings: Setting) -> None:
        for name in self.__slots__:
            _set(self, name, settings[name])

    @classmethod
    def of_flavor(cls, routing: dict[str, Any], *, at: Setting) -> ExpertRouting:
        """The routing of a flavor (``titan.schemas.flavors.Flavor.routing``), every field
        standing at ``at``."""
        return cls(**{name: Setting(routing.get(name), at.path, at.span) for name in cls.__slots__})


SHARED_FACT_PATHS: dict[str, str] = {
    "dp_replicate": "parallelism.data_parallel_replicate_degree",
    "dp_shard": "parallelism.data_parallel_shard_degree",
    "tp": "parallelism.tensor_parallel_degree",
    "pp": "parallelism.pipeline_parallel_degree",
    "cp": "parallelism.context_parallel_degree",
    "ep": "parallelism.expert_parallel_degree",
    "etp": "parallelism.expert_tensor_parallel_degree",
    "local_batch_size": "training.local_batch_size",
    "global_batch_size": "training.global_batch_size",
    "seq_len": "training.seq_len",
    "keep_latest_k": "checkpoint.keep_latest_k",
    "checkpoint_enable": "checkpoint.enable",
    "initial_load_path": "checkpoint.initial_load_path",
    "initial_load_in_hf": "checkpoint.initial_load_in_hf",
    "initial_load_model_only": "checkpoint.initial_load_model_only",
    "initial_load_in_hf_quantized": "checkpoint.initial_load_in_hf_quantized",
    "last_save_in_hf": "checkpoint.last_save_in_hf",
    "last_save_model_only": "checkpoint.last_save_model_only",
    "ac_mode": "activation_checkpoint.mode",
    "selective_ac_option": "activation_checkpoint.selective_ac_option",
    "compile_enable": "compile.enable",
    "compile_components": "compile.components",
    "cpu_offload": "training.enable_cpu_offload",
    "async_tp": "parallelism.enable_async_tensor_parallel",
    "cp_load_balancer": "parallelism.context_parallel_load_balancer",
    "cp_rotate_method": "parallelism.context_parallel_rotate_method",
    "pp_schedule": "parallelism.pipeline_parallel_schedule",
    "pp_schedule_csv": "parallelism.pipeline_parallel_schedule_csv",
    "pp_layers_per_stage": "parallelism.pipeline_parallel_layers_per_stage",
    "pp_first_less": "parallelism.pipeline_parallel_first_stage_less_layers",
    "pp_last_less": "parallelism.pipeline_parallel_last_stage_less_layers",
    "pp_module_fqns": "parallelism.module_fqns_per_model_part",
    "pp_microbatch_size": "parallelism.pipeline_parallel_microbatch_size",
    "optimizer_name": "optimizer.name",
}
"""Facts read from the same dotted path in a legacy TOML and in a ``Trainer.Config``; each side
builds the remaining facts (converters, optimizer, validation, model) in its own words."""


class ConfigFacts(Frozen):
    """What the cross-field rules need to know about a config, in either form."""

    __slots__ = (
        "ngpu",
        "dp_replicate",
        "dp_shard",
        "tp",
        "pp",
        "cp",
        "ep",
        "etp",
        "local_batch_size",
        "global_batch_size",
        "seq_len",
        "keep_latest_k",
        "checkpoint_enable",
        "optimizer_name",
        "initial_load_path",
        "initial_load_in_hf",
        "initial_load_model_only",
        "initial_load_in_hf_quantized",
        "last_save_in_hf",
        "last_save_model_only",
        "converters",
        "quantize_tables",
        "early_step_in_backward",
        "fault_tolerance",
        "ac_mode",
        "selective_ac_option",
        "compile_enable",
        "compile_components",
        "cpu_offload",
        "async_tp",
        "cp_load_balancer",
        "cp_rotate_method",
        "validation_steps",
        "validation_enable",
        "validation_seq_len",
        "validation_batch_size",
        "pp_microbatch_size",
        "float8_recipe",
        "float8_all_gather",
        "float8_precompute",
        "model_name",
        "flavor",
        "n_heads",
        "n_kv_heads",
        "moe",
        "experts",
        "fork",
        "dataset",
        "validation_dataset",
        "datasets",
        "pp_schedule",
        "pp_schedule_csv",
        "pp_layers_per_stage",
        "pp_first_less",
        "pp_last_less",
        "pp_module_fqns",
        "n_layers",
        "max_seq_len",
        "asset_paths",
    )
    __match_args__ = ()

    ngpu: int | None
    """World size to check against (``--ngpu``); ``None`` skips world-size rules."""
    dp_replicate: Setting
    dp_shard: Setting
    tp: Setting
    pp: Setting
    cp: Setting
    ep: Setting
    etp: Setting
    local_batch_size: Setting
    global_batch_size: Setting
    seq_len: Setting
    keep_latest_k: Setting
    checkpoint_enable: Setting | None
    """Whether checkpointing is on (which the initial load needs); ``None`` skips that rule."""
    optimizer_name: Setting | None
    """The optimizer class the trainer is asked to build (``None``: unknown, which skips that
    rule)."""
    initial_load_path: Setting | None
    """The initial load's folder (``None``: unknown, which skips that rule)."""
    initial_load_in_hf: Setting
    initial_load_model_only: Setting
    initial_load_in_hf_quantized: Setting
    last_save_in_hf: Setting
    last_save_model_only: Setting
    converters: Setting
    """Converter names in legacy spelling (the registry side maps classes to names)."""
    quantize_tables: tuple[Setting, ...]
    """Converter option tables the user wrote (value: the converter name they configure)."""
    early_step_in_backward: Setting
    fault_tolerance: Setting
    ac_mode: Setting
    selective_ac_option: Setting
    compile_enable: Setting
    compile_components: Setting
    """What compile.enable compiles ("model", "loss")."""
    cpu_offload: Setting
    """FSDP's CPU offload of parameters, gradients and optimizer states."""
    async_tp: Setting
    cp_load_balancer: Setting
    cp_rotate_method: Setting
    """How v0.2.2's ring attention passed keys and values around (titan gathers them)."""
    validation_steps: Setting
    validation_enable: Setting
    """Whether the run validates (the validation section's switch)."""
    validation_seq_len: Setting
    validation_batch_size: Setting
    """The validation batch's rows per data-parallel rank; None follows local_batch_size
    (registry form only)."""
    pp_microbatch_size: Setting
    """Rows per pipeline microbatch."""
    """The validation sequence length; None follows training.seq_len (registry form only)."""
    float8_recipe: Setting
    float8_all_gather: Setting
    float8_precompute: Setting
    model_name: Setting
    flavor: Setting
    n_heads: int | None
    """Attention heads of the chosen flavor, when known."""
    n_kv_heads: int | None
    """Key/value heads of the chosen flavor, when known."""
    moe: bool | None
    """Whether the chosen flavor has experts, when known."""
    experts: tuple[ExpertRouting, ...]
    """The routing of each distinct mixture of experts the model builds (empty when unknown)."""
    fork: Any
    """The flavors and converters the project declares (``titan.schemas.fork_names.ForkNames``)."""
    dataset: Setting | None
    """The training dataset's name (``None`` when the data loader reads no named dataset)."""
    validation_dataset: Setting | None
    """The validation dataset's name, when validation is on."""
    datasets: Any
    """The names the run can load (``titan.schemas.dataset_names.DatasetFacts``); ``None`` skips the
    check (a model whose loader titan does not know)."""
    pp_schedule: Setting | None
    """The pipeline schedule's name; ``None`` (with the other ``pp_`` facts) skips the pipeline
    layout rule."""
    pp_schedule_csv: Setting | None
    pp_layers_per_stage: Setting | None
    pp_first_less: Setting | None
    pp_last_less: Setting | None
    pp_module_fqns: Setting | None
    n_layers: int | None
    """Transformer blocks of the model as it will be built, when known."""
    max_seq_len: int | None
    """The longest sequence the model as it will be built runs (the length of its rotary
    tables, which titan's decoders take from training.seq_len), when known."""
    asset_paths: tuple[Setting, ...]
    """The folders the run reads weights and tokenizer files from (hf_assets_path, the initial
    load's path), each as its form spells it."""

    def __init__(
        self,
        *,
        ngpu: int | None,
        dp_replicate: Setting,
        dp_shard: Setting,
        tp: Setting,
        pp: Setting,
        cp: Setting,
        ep: Setting,
        etp: Setting,
        local_batch_size: Setting,
        global_batch_size: Setting,
        seq_len: Setting,
        keep_latest_k: Setting,
        checkpoint_enable: Setting | None = None,
        initial_load_path: Setting | None = None,
        initial_load_in_hf: Setting,
        initial_load_model_only: Setting,
        initial_load_in_hf_quantized: Setting,
        last_save_in_hf: Setting,
        last_save_model_only: Setting,
        converters: Setting,
        quantize_tables: tuple[Setting, ...] = (),
        early_step_in_backward: Setting,
        fault_tolerance: Setting,
        ac_mode: Setting,
        selective_ac_option: Setting,
        compile_enable: Setting,
        compile_components: Setting,
        cpu_offload: Setting,
        async_tp: Setting,
        cp_load_balancer: Setting,
        cp_rotate_method: Setting,
        validation_steps: Setting,
        validation_enable: Setting,
        validation_seq_len: Setting,
        validation_batch_size: Setting,
        pp_microbatch_size: Setting,
        float8_recipe: Setting,
        float8_all_gather: Setting,
        float8_precompute: Setting,
        model_name: Setting,
        flavor: Setting,
        n_heads: int | None = None,
        n_kv_heads: int | None = None,
        moe: bool | None = None,
        experts: tuple[ExpertRouting, ...] = (),
        fork: Any = None,
        dataset: Setting | None = None,
        validation_dataset: Setting | None = None,
        datasets: Any = None,
        pp_schedule: Setting | None = None,
        pp_schedule_csv: Setting | None = None,
        pp_layers_per_stage: Setting | None = None,
        pp_first_less: Setting | None = None,
        pp_last_less: Setting | None = None,
        pp_module_fqns: Setting | None = None,
        n_layers: int | None = None,
        max_seq_len: int | None = None,
        asset_paths: tuple[Setting, ...] = (),
        optimizer_name: Setting | None = None,
    ) -> None:
        _set(self, "ngpu", ngpu)
        _set(self, "dp_replicate", dp_replicate)
        _set(self, "dp_shard", dp_shard)
        _set(self, "tp", tp)
        _set(self, "pp", pp)
        _set(self, "cp", cp)
        _set(self, "ep", ep)
        _set(self, "etp", etp)
        _set(self, "local_batch_size", local_batch_size)
        _set(self, "global_batch_size", global_batch_size)
        _set(self, "seq_len", seq_len)
        _set(self, "keep_latest_k", keep_latest_k)
        _set(self, "checkpoint_enable", checkpoint_enable)
        _set(self, "optimizer_name", optimizer_name)
        _set(self, "initial_load_path", initial_load_path)
        _set(self, "initial_load_in_hf", initial_load_in_hf)
        _set(self, "initial_load_model_only", initial_load_model_only)
        _set(self, "initial_load_in_hf_quantized", initial_load_in_hf_quantized)
        _set(self, "last_save_in_hf", last_save_in_hf)
        _set(self, "last_save_model_only", last_save_model_only)
        _set(self, "converters", converters)
        _set(self, "quantize_tables", quantize_tables)
        _set(self, "early_step_in_backward", early_step_in_backward)
        _set(self, "fault_tolerance", fault_tolerance)
        _set(self, "ac_mode", ac_mode)
        _set(self, "selective_ac_option", selective_ac_option)
        _set(self, "compile_enable", compile_enable)
        _set(self, "compile_components", compile_components)
        _set(self, "cpu_offload", cpu_offload)
        _set(self, "async_tp", async_tp)
        _set(self, "cp_load_balancer", cp_load_balancer)
        _set(self, "cp_rotate_method", cp_rotate_method)
        _set(self, "validation_steps", validation_steps)
        _set(self, "validation_enable", validation_enable)
        _set(self, "validation_seq_len", validation_seq_len)
        _set(self, "validation_batch_size", validation_batch_size)
        _set(self, "pp_microbatch_size", pp_microbatch_size)
        _set(self, "float8_recipe", float8_recipe)
        _set(self, "float8_all_gather", float8_all_gather)
        _set(self, "float8_precompute", float8_precompute)
        _set(self, "model_name", model_name)
        _set(self, "flavor", flavor)
        _set(self, "n_heads", n_heads)
        _set(self, "n_kv_heads", n_kv_heads)
        _set(self, "moe", moe)
        _set(self, "experts", experts)
        _set(self, "fork", fork)
        _set(self, "dataset", dataset)
        _set(self, "validation_dataset", validation_dataset)
        _set(self, "datasets", datasets)
        for name, value in (
            ("pp_schedule", pp_schedule),
            ("pp_schedule_csv", pp_schedule_csv),
            ("pp_layers_per_stage", pp_layers_per_stage),
            ("pp_first_less", pp_first_less),
            ("pp_last_less", pp_last_less),
            ("pp_module_fqns", pp_module_fqns),
            ("n_layers", n_layers),
            ("max_seq_len", max_seq_len),
            ("asset_paths", asset_paths),
        ):
            _set(self, name, value)
