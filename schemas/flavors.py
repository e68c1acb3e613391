"""The model hyperparameters of every flavor torchtitan v0.2.2 ships, as plain data.

``model.flavor`` is only a key into a TrainSpec's ``model_args`` dict, and torchtitan finds out a
key is wrong (or that TP does not divide the head count, or that EP was asked of a dense model)
only after it has imported torch and started building. Copying those dicts here lets the
validator make the same checks without torch, and gives the config builder the exact numbers to
rebuild a model from. Every ``args`` dict is the flavor's constructor call as torchtitan writes it,
filled up with the dataclass defaults of the fields it leaves out; nested dataclasses (MoE,
RoPE-scaling, autoencoder arguments) become nested dicts. The inherited ``BaseModelArgs._enforced``
sentinel string is left out: it only forces every field to have a default and carries no value.

Source: the ``torchtitan==0.2.2`` wheel on PyPI, the release of tag ``v0.2.2`` (commit
``73a0e6979dd10b6b1904098eb3c8f62c18ab87ce``), wheel sha256
``c95ccaaa89238085ed7d3d4befb20a298cc3fcc666b9573a1f5ba92ec8c3ca60``. Paths in the comments below
are inside its ``torchtitan/models/``. The dicts are shared: treat them as read-only.
"""

from __future__ import annotations

from typing import Any

from schemas._frozen import Frozen, _set


class Flavor(Frozen):
    """One entry of a TrainSpec's ``model_args`` dict."""

    __slots__ = ("family", "name", "n_heads", "n_kv_heads", "moe", "args")
    __match_args__ = ()

    family: str
    """TrainSpec name the flavor belongs to, e.g. ``"llama3"`` (aliases already resolved)."""
    name: str
    """Flavor key as written in ``model.flavor``, e.g. ``"8B"``."""
    n_heads: int | None
    """Attention (query) heads; ``None`` where a family has no such notion."""
    n_kv_heads: int | None
    """Key/value heads after torchtitan's defaulting; equal to ``n_heads`` without GQA."""
    moe: bool
    """Whether at least one layer is a mixture-of-experts layer, so expert parallelism applies."""
    args: dict[str, Any]
    """Every constructor argument of the family's model-args dataclass, defaults filled in."""

    def __init__(
        self,
        *,
        family: str,
        name: str,
        n_heads: int | None,
        n_kv_heads: int | None,
        moe: bool,
        args: dict[str, Any],
    ) -> None:
        _set(self, "family", family)
        _set(self, "name", name)
        _set(self, "n_heads", n_heads)
        _set(self, "n_kv_heads", n_kv_heads)
        _set(self, "moe", moe)
        _set(self, "args", args)


def _copy(value: Any) -> Any:
    """A deep copy of these tables: new dicts and lists, the same immutable leaves and tuples.

    Equivalent to ``copy.deepcopy`` for this data (every leaf is a number, string, bool, None or a
    tuple of those) and much cheaper: the validator builds every flavor at startup."""
    if isinstance(value, dict):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item) for item in value]
    return value


def _with(base: dict[str, Any], **written: Any) -> dict[str, Any]:
    """``base`` (a dataclass's defaults) overridden by the keyword arguments a flavor writes."""
    unknown = written.keys() - base.keys()
    if unknown:  # a typo here would silently add a field torchtitan does not have
        raise KeyError(f"not a field of this args dataclass: {sorted(unknown)}")
    return _copy(base) | _copy(written)


# models/moe/moe.py: MoEArgs, shared by llama4, qwen3, deepseek_v3 and gpt_oss.
_MOE_DEFAULTS: dict[str, Any] = {
    "num_experts": 8,
    "num_shared_experts": 1,
    "score_func": "sigmoid",
    "route_norm": False,
    "route_scale": 1.0,
    "gate_bias": False,
    "score_before_experts": True,
    "top_k": 1,
    "num_expert_groups": None,
    "num_limited_groups": None,
    "use_grouped_mm": True,
    "load_balance_coeff": 1e-3,
    "_debug_force_load_balance": False,  # overwritten from debug.moe_force_load_balance
}


def _moe(**written: Any) -> dict[str, Any]:
    return _with(_MOE_DEFAULTS, **written)


# --------------------------------------------------------------------------- llama3
# Defaults: llama3/model/args.py (TransformerModelArgs, RoPEScalingArgs).
_LLAMA3 = {
    "dim": 4096,
    "n_layers": 32,
    "n_heads": 32,
    "n_kv_heads": None,  # None means n_heads (no GQA)
    "vocab_size": 128256,
    "multiple_of": 256,
    "ffn_dim_multiplier": None,
    "norm_eps": 1e-5,
    "rope_theta": 10000,
    "rope_scaling_args": {
        "scaling_factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    "max_seq_len": 131072,
    "depth_init": True,
    "attn_type": "sdpa",
    "attn_mask_type": "causal",
    "eos_id": 0,
}
_LLAMA3_DEBUG = {"dim": 256, "n_layers": 6, "n_heads": 16, "vocab_size": 2048, "rope_theta": 500000}
_LLAMA3_8B = {
    "dim": 4096,
    "n_layers": 32,
    "n_heads": 32,
    "n_kv_heads": 8,
    "ffn_dim_multiplier": 1.3,
    "multiple_of": 1024,
    "rope_theta": 500000,
}
_FLEX = {"attn_type": "flex", "attn_mask_type": "block_causal"}
_VARLEN = {"attn_type": "varlen", "attn_mask_type": "block_causal"}

# Flavors: llama3/__init__.py, llama3_args.
_LLAMA3_ARGS = {
    "debugmodel": _with(_LLAMA3, **_LLAMA3_DEBUG),
    "debugmodel_flex_attn": _with(_LLAMA3, **_LLAMA3_DEBUG, **_FLEX),
    "debugmodel_varlen_attn": _with(_LLAMA3, **_LLAMA3_DEBUG, **_VARLEN),
    "8B": _with(_LLAMA3, **_LLAMA3_8B),
    "8B_flex": _with(_LLAMA3, **_LLAMA3_8B, **_FLEX),
    "8B_varlen": _with(_LLAMA3, **_LLAMA3_8B, **_VARLEN),
    "70B": _with(
        _LLAMA3,
        dim=8192,
        n_layers=80,
        n_heads=64,
        n_kv_heads=8,
        ffn_dim_multiplier=1.3,
        multiple_of=4096,
        rope_theta=500000,
    ),
    "405B": _with(
        _LLAMA3,
        dim=16384,
        n_layers=126,
        n_heads=128,
        n_kv_heads=8,
        ffn_dim_multiplier=1.2,
        multiple_of=4096,
        rope_theta=500000,
    ),
}

# --------------------------------------------------------------------------- llama4
# Defaults: llama4/model/args.py (TransformerModelArgs; its own RoPEScalingArgs, which differs
# from llama3's and is used only where a flavor writes ``rope_scaling_args=RoPEScalingArgs()``).
_LLAMA4_ROPE_SCALING = {
    "scaling_factor": 16.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 1.0,
    "original_max_position_embeddings": 8192,
}
_LLAMA4 = {
    "dim": 4096,
    "n_layers": 32,
    "n_heads": 32,
    "n_kv_heads": None,  # None means n_heads (no GQA)
    "vocab_size": 202048,
    "multiple_of": 256,
    "ffn_dim_multiplier": None,
    "norm_eps": 1e-5,
    "rope_theta": 10000,
    "rope_scaling_args": None,
    "max_seq_len": 1048576,
    "depth_init": True,
    "attn_type": "sdpa",
    "attn_mask_type": "causal",
    "every_n_layers_nope": None,
    "fixed_attn_block_size": 8192,
    "moe_args": _moe(),
    "auto_scale_hidden_dim": True,
    "interleave_moe_layer_step": 2,  # layer i is MoE when (i + 1) % step == 0
}
_LLAMA4_DEBUG = {
    "dim": 256,
    "n_layers": 6,
    "n_heads": 16,
    "vocab_size": 2048,
    "rope_theta": 500000,
    "rope_scaling_args": _LLAMA4_ROPE_SCALING,
}
_LLAMA4_17B = {
    "dim": 5120,
    "n_layers": 48,
    "n_heads": 40,
    "n_kv_heads": 8,
    "ffn_dim_multiplier": 1.2,
    "multiple_of": 2048,
    "rope_theta": 500000,
}
_LLAMA4_16E = {
    "rope_scaling_args": _LLAMA4_ROPE_SCALING,
    "max_seq_len": 10485760,
    "moe_args": _moe(num_experts=16),
    "interleave_moe_layer_step": 1,
}
_LLAMA4_128E = {"moe_args": _moe(num_experts=128)}
_IROPE = {"every_n_layers_nope": 4, **_FLEX}

# Flavors: llama4/__init__.py, llama4_args.
_LLAMA4_ARGS = {
    "debugmodel": _with(_LLAMA4, **_LLAMA4_DEBUG),
    "17bx16e": _with(_LLAMA4, **_LLAMA4_17B, **_LLAMA4_16E),
    "17bx128e": _with(_LLAMA4, **_LLAMA4_17B, **_LLAMA4_128E),
    "debugmodel_irope": _with(_LLAMA4, **_LLAMA4_DEBUG, fixed_attn_block_size=256, **_IROPE),
    "17bx16e_irope": _with(_LLAMA4, **_LLAMA4_17B, **_LLAMA4_16E, **_IROPE),
    "17bx128e_irope": _with(_LLAMA4, **_LLAMA4_17B, **_LLAMA4_128E, **_IROPE),
}

# --------------------------------------------------------------------------- qwen3
# Defaults: qwen3/model/args.py (Qwen3ModelArgs).
_QWEN3 = {
    "dim": 1024,
    "n_layers": 28,
    "n_heads": 16,
    "n_kv_heads": 8,
    "vocab_size": 151936,
    "head_dim": 128,
    "hidden_dim": 3072,
    "norm_eps": 1e-6,
    "rope_theta": 1000000,
    "qk_norm": True,
    "max_seq_len": 4096,
    "depth_init": True,
    "attn_type": "sdpa",
    "attn_mask_type": "causal",
    "eos_id": 151645,
    "enable_weight_tying": False,
    "moe_enabled": False,
    "moe_inter_dim": 768,
    "moe_args": _moe(),
}


def _qwen3(
    *,
    vocab_size: int,
    dim: int,
    n_layers: int,
    n_heads: int,
    n_kv_heads: int,
    hidden_dim: int,
    max_seq_len: int = 4096,
    rope_theta: int = 1000000,
    **rest: Any,
) -> dict[str, Any]:
    """Every qwen3 flavor also writes head_dim=128, qk_norm=True and, unless noted, the
    max_seq_len and rope_theta defaulted here, so only the numbers that vary are spelled out."""
    return _with(
        _QWEN3,
        vocab_size=vocab_size,
        max_seq_len=max_seq_len,
        head_dim=128,
        dim=dim,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        qk_norm=True,
        hidden_dim=hidden_dim,
        rope_theta=rope_theta,
        **rest,
    )


def _qwen3_moe(*, num_experts: int) -> dict[str, Any]:
    return _moe(
        num_experts=num_experts,
        num_shared_experts=0,
        top_k=8,
        score_func="softmax",
        route_norm=True,
        route_scale=1.0,
        score_before_experts=False,
    )


# Flavors: qwen3/__init__.py, qwen3_args.
_TIED = {"enable_weight_tying": True}
# fmt: off
_QWEN3_ARGS = {
    "debugmodel": _qwen3(vocab_size=2048, dim=256, n_layers=8, n_heads=16, n_kv_heads=8, hidden_dim=3072, **_TIED),
    "0.6B": _qwen3(vocab_size=151936, dim=1024, n_layers=28, n_heads=16, n_kv_heads=8, hidden_dim=3072, **_TIED),
    "1.7B": _qwen3(vocab_size=151936, dim=2048, n_layers=28, n_heads=16, n_kv_heads=8, hidden_dim=6144, **_TIED),
    "4B": _qwen3(vocab_size=151936, dim=2560, n_layers=36, n_heads=32, n_kv_heads=8, hidden_dim=9728, **_TIED),
    "8B": _qwen3(vocab_size=151936, dim=4096, n_layers=36, n_heads=32, n_kv_heads=8, hidden_dim=12288),
    "14B": _qwen3(vocab_size=151936, dim=5120, n_layers=40, n_heads=40, n_kv_heads=8, hidden_dim=17408),
    "32B": _qwen3(vocab_size=151936, dim=5120, n_layers=64, n_heads=64, n_kv_heads=8, hidden_dim=25600),
    "debugmodel_moe": _qwen3(
        vocab_size=2048, dim=256, n_layers=8, n_heads=16, n_kv_heads=8, hidden_dim=3072,
        moe_enabled=True, moe_inter_dim=768, moe_args=_qwen3_moe(num_experts=64),
    ),
    "30B-A3B": _qwen3(
        vocab_size=151936, max_seq_len=262144, dim=2048, n_layers=48, n_heads=32, n_kv_heads=4,
        hidden_dim=6144, moe_enabled=True, moe_inter_dim=768, moe_args=_qwen3_moe(num_experts=128),
    ),
    # torchtitan's own comments on this one say "need double check" for the MoE routing values.
    "235B-A22B": _qwen3(
        vocab_size=151936, dim=4096, n_layers=94, n_heads=64, n_kv_heads=4, hidden_dim=12288,
        rope_theta=5000000, moe_enabled=True, moe_inter_dim=1536,
        moe_args=_qwen3_moe(num_experts=128),
    ),
}
# fmt: on

# --------------------------------------------------------------------------- deepseek_v3
# Defaults: deepseek_v3/model/args.py (DeepSeekV3ModelArgs).
_DEEPSEEK_V3 = {
    "max_batch_size": 8,
    "max_seq_len": 16384,  # written as 4096 * 4
    "vocab_size": 102400,
    "dim": 2048,
    "inter_dim": 10944,
    "moe_inter_dim": 1408,
    "n_layers": 27,
    "n_dense_layers": 1,  # the first n_dense_layers layers are dense, the rest MoE
    "n_heads": 16,
    "norm_eps": 1e-5,
    "moe_args": _moe(),
    "expert_parallel_comm_backend": "standard",
    "q_lora_rank": 0,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "attn_type": "sdpa",
    "attn_mask_type": "causal",
    "original_seq_len": 4096,
    "rope_theta": 10000.0,
    "rope_factor": 40,
    "beta_fast": 32,
    "beta_slow": 1,
    "mscale": 1.0,
}
# Every flavor writes the same MLA head dims.
_MLA = {"kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128}
_DSV3_DEBUG = {
    "vocab_size": 2048,
    "dim": 256,
    "inter_dim": 1024,
    "moe_inter_dim": 256,
    "n_layers": 6,
    "n_dense_layers": 1,
    "n_heads": 16,
    "moe_args": _moe(
        num_experts=8,
        num_shared_experts=2,
        top_k=3,
        score_func="softmax",
        route_norm=False,
        score_before_experts=False,
    ),
    "q_lora_rank": 0,
    **_MLA,
    "mscale": 0.70,
}

# Flavors: deepseek_v3/__init__.py, deepseekv3_args.
_DEEPSEEK_V3_ARGS = {
    "debugmodel": _with(_DEEPSEEK_V3, **_DSV3_DEBUG),
    "debugmodel_flex_attn": _with(_DEEPSEEK_V3, **_DSV3_DEBUG, **_FLEX),
    "16B": _with(
        _DEEPSEEK_V3,
        vocab_size=102400,
        dim=2048,
        inter_dim=10944,
        moe_inter_dim=1408,
        n_layers=27,
        n_dense_layers=1,
        n_heads=16,
        moe_args=_moe(
            num_experts=64,
            num_shared_experts=2,
            top_k=6,
            score_func="softmax",
            route_norm=False,
            score_before_experts=False,
        ),
        q_lora_rank=0,
        **_MLA,
        mscale=0.70,
        **_FLEX,
    ),
    "236B": _with(
        _DEEPSEEK_V3,
        vocab_size=102400,
        dim=5120,
        inter_dim=12288,
        moe_inter_dim=1536,
        n_layers=60,
        n_dense_layers=1,
        n_heads=128,
        moe_args=_moe(
            num_experts=160,
            num_shared_experts=2,
            top_k=6,
            num_expert_groups=8,
            num_limited_groups=3,
            score_func="softmax",
            route_norm=False,
            route_scale=16.0,
            score_before_experts=False,
        ),
        q_lora_rank=1536,
        **_MLA,
        **_FLEX,
    ),
    "671B": _with(
        _DEEPSEEK_V3,
        vocab_size=129280,
        dim=7168,
        inter_dim=18432,
        moe_inter_dim=2048,
        n_layers=61,
        n_dense_layers=3,
        n_heads=128,
        moe_args=_moe(
            num_experts=256,
            num_shared_experts=1,
            top_k=8,
            num_expert_groups=8,
            num_limited_groups=4,
            score_func="sigmoid",
            route_norm=True,
            route_scale=2.5,
            score_before_experts=False,
        ),
        q_lora_rank=1536,
        **_MLA,
        **_FLEX,
    ),
}

# --------------------------------------------------------------------------- gpt_oss
# Defaults: gpt_oss/model/args.py (GptOssModelArgs). Note the 20b/120b flavors write only
# n_layers and moe_args, so dim, heads and the rest are these defaults.
_GPT_OSS = {
    "max_batch_size": 8,
    "max_seq_len": 131072,
    "dtype": "bf16",
    "vocab_size": 201088,
    "dim": 2880,
    "moe_inter_dim": 2880,
    "n_layers": 24,
    "norm_eps": 1e-5,
    "moe_args": _moe(),
    "swiglu_limit": 7.0,
    "head_dim": 64,
    "n_heads": 64,
    "n_kv_heads": 8,
    "sliding_window_size": 128,
    "attn_mask_type": "causal",
    "attn_type": "flex",  # gpt-oss supports FlexAttention only
    "original_seq_len": 4096,
    "rope_theta": 150000.0,
    "rope_factor": 32,
    "ntk_alpha": 1.0,
    "ntk_beta": 32.0,
}


def _gpt_oss_moe(*, num_experts: int) -> dict[str, Any]:
    return _moe(
        num_experts=num_experts,
        num_shared_experts=0,
        score_func="softmax",
        route_norm=True,
        route_scale=1.0,
        gate_bias=True,
        score_before_experts=False,
        top_k=4,
        use_grouped_mm=True,
        load_balance_coeff=1e-3,
    )


# Flavors: gpt_oss/__init__.py, where the dict is named gptoss_configs (not *_args).
_GPT_OSS_ARGS = {
    "debugmodel": _with(
        _GPT_OSS,
        dim=256,
        n_layers=4,
        moe_args=_gpt_oss_moe(num_experts=8),
        attn_mask_type="causal",
    ),
    "20b": _with(_GPT_OSS, n_layers=24, moe_args=_gpt_oss_moe(num_experts=32)),
    "120b": _with(_GPT_OSS, n_layers=36, moe_args=_gpt_oss_moe(num_experts=128)),
}

# --------------------------------------------------------------------------- flux
# Defaults: flux/model/args.py (FluxModelArgs) and flux/model/autoencoder.py (AutoEncoderParams).
_FLUX_AUTOENCODER = {
    "resolution": 256,
    "in_channels": 3,
    "ch": 128,
    "out_ch": 3,
    "ch_mult": (1, 2, 4, 4),
    "num_res_blocks": 2,
    "z_channels": 16,
    "scale_factor": 0.3611,
    "shift_factor": 0.1159,
}
_FLUX = {
    "in_channels": 64,
    "out_channels": 64,
    "vec_in_dim": 768,
    "context_in_dim": 512,
    "hidden_size": 3072,
    "mlp_ratio": 4.0,
    "num_heads": 24,
    "depth": 19,
    "depth_single_blocks": 38,
    "axes_dim": (16, 56, 56),
    "theta": 10000,
    "qkv_bias": True,
    "autoencoder_params": _FLUX_AUTOENCODER,
}
# Every flavor writes all of these (context_in_dim=4096 differs from the 512 default).
_FLUX_COMMON = {
    "in_channels": 64,
    "out_channels": 64,
    "vec_in_dim": 768,
    "context_in_dim": 4096,
    "mlp_ratio": 4.0,
    "axes_dim": (16, 56, 56),
    "theta": 10000,
    "qkv_bias": True,
    "autoencoder_params": _FLUX_AUTOENCODER,
}
_FLUX_FULL = {"hidden_size": 3072, "num_heads": 24, "depth": 19, "depth_single_blocks": 38}

# Flavors: flux/__init__.py, flux_args.
_FLUX_ARGS = {
    "flux-dev": _with(_FLUX, **_FLUX_COMMON, **_FLUX_FULL),
    "flux-schnell": _with(_FLUX, **_FLUX_COMMON, **_FLUX_FULL),
    "flux-debug": _with(
        _FLUX, **_FLUX_COMMON, hidden_size=1536, num_heads=12, depth=2, depth_single_blocks=2
    ),
}

# --------------------------------------------------------------------------- registry


def _gqa_heads(args: dict[str, Any]) -> tuple[int, int]:
    # TransformerModelArgs defaults n_kv_heads=None to n_heads in the attention module.
    n_kv = args["n_kv_heads"]
    return args["n_heads"], args["n_heads"] if n_kv is None else n_kv


def _mla_heads(args: dict[str, Any]) -> tuple[int, int]:
    # MLA up-projects the latent KV to one K/V per query head, so TP shards n_heads for both.
    return args["n_heads"], args["n_heads"]


def _flux_heads(args: dict[str, Any]) -> tuple[int, int]:
    return args["num_heads"], args["num_heads"]


def _llama4_moe(args: dict[str, Any]) -> bool:
    step = args["interleave_moe_layer_step"]
    return any((layer + 1) % step == 0 for layer in range(args["n_layers"]))


# family -> (flavor args, head counts, has MoE layers)
_FAMILIES = {
    "llama3": (_LLAMA3_ARGS, _gqa_heads, lambda a: False),
    "llama4": (_LLAMA4_ARGS, _gqa_heads, _llama4_moe),
    "qwen3": (_QWEN3_ARGS, _gqa_heads, lambda a: a["moe_enabled"]),
    "deepseek_v3": (_DEEPSEEK_V3_ARGS, _mla_heads, lambda a: a["n_dense_layers"] < a["n_layers"]),
    "gpt_oss": (_GPT_OSS_ARGS, _gqa_heads, lambda a: True),  # every block is an MoE block
    "flux": (_FLUX_ARGS, _flux_heads, lambda a: False),
}


def _flavor(family: str, name: str, args: dict[str, Any], heads, has_moe) -> Flavor:
    n_heads, n_kv_heads = heads(args)
    return Flavor(
        family=family,
        name=name,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        moe=has_moe(args),
        args=args,
    )


FLAVORS: dict[str, dict[str, Flavor]] = {
    family: {name: _flavor(family, name, args, heads, has_moe) for name, args in table.items()}
    for family, (table, heads, has_moe) in _FAMILIES.items()
}
"""family -> flavor name -> Flavor, in torchtitan's own order."""

FAMILY_ALIASES: dict[str, str] = {"llama3_ft": "llama3"}
"""``model.name`` values whose TrainSpec reuses another family's ``model_args`` dict."""


def flavor(family: str, name: str) -> Flavor | None:
    """The flavor ``name`` of ``family`` (aliases resolved), or ``None`` if either is unknown."""
    return FLAVORS.get(FAMILY_ALIASES.get(family, family), {}).get(name)


def flavor_names(family: str) -> tuple[str, ...] | None:
    """The flavor names of ``family`` (aliases resolved), or ``None`` for an unknown family."""
    table = FLAVORS.get(FAMILY_ALIASES.get(family, family))
    return None if table is None else tuple(table)
