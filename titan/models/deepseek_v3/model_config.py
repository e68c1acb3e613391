"""deepseek_v3's model config: multi-head latent attention, YaRN rope, dense then MoE layers."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Literal

from titan.models.common.attention import BaseAttention
from titan.models.common.decoder import Decoder, TransformerBlock
from titan.models.common.moe import MoE
from titan.models.common.rope import RoPE
from titan.schemas.ranges import NON_NEGATIVE, POSITIVE, POSITIVE_NUMBER


class YaRNRoPE(RoPE):
    """Rotary position embedding stretched by YaRN beyond the pretraining context."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(RoPE.Config):
        """YaRN rope; the scaling applies only when max_seq_len exceeds original_seq_len."""

        _owner_path = "titan.models.deepseek_v3.model:YaRNRoPE"
        _ranges = {"original_seq_len": POSITIVE, "rope_factor": POSITIVE_NUMBER}

        original_seq_len: int = 4096
        """Context length of pretraining, beyond which the frequencies are interpolated."""
        rope_factor: float = 1.0
        """Context extension factor; 1 leaves the frequencies as they are."""
        beta_fast: float = 32
        """Rotation count above which a frequency band is left unscaled."""
        beta_slow: float = 1
        """Rotation count below which a frequency band is fully interpolated."""
        mscale: float = 1.0
        """Coefficient of YaRN's attention temperature, 0.1·mscale·ln(rope_factor) + 1."""


class MLAttention(BaseAttention):
    """Multi-head latent attention: keys and values go through a small shared latent."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(BaseAttention.Config):
        """Multi-head latent attention (MLA) with separate rope and no-rope query/key parts."""

        _owner_path = "titan.models.deepseek_v3.model:MLAttention"
        _ranges = {
            "q_lora_rank": NON_NEGATIVE,
            "kv_lora_rank": POSITIVE,
            "qk_nope_head_dim": POSITIVE,
            "qk_rope_head_dim": POSITIVE,
            "v_head_dim": POSITIVE,
        }

        q_lora_rank: int = 0
        """Rank of the query's low-rank projection; 0 projects queries directly."""
        kv_lora_rank: int = 64
        """Width of the compressed key/value latent."""
        qk_nope_head_dim: int = 32
        """Per-head width of the query/key part without rope."""
        qk_rope_head_dim: int = 16
        """Per-head width of the query/key part with rope (the rope's dimension)."""
        v_head_dim: int = 32
        """Per-head width of the values."""

        def flops_head_dims(self, dim: int) -> int | None:
            """Query/key plus value head width (torchtitan counts nope + rope + v per head)."""
            return self.qk_nope_head_dim + self.qk_rope_head_dim + self.v_head_dim

        def num_params(self, dim: int) -> int:
            """Parameters of the query, latent key/value and output projections and norms."""
            qk_head_dim = self.qk_nope_head_dim + self.qk_rope_head_dim
            if self.q_lora_rank == 0:
                query = dim * self.n_heads * qk_head_dim
            else:
                rank = self.q_lora_rank
                query = dim * rank + rank + rank * self.n_heads * qk_head_dim
            rank = self.kv_lora_rank
            key_value = (
                dim * (rank + self.qk_rope_head_dim)
                + rank
                + rank * self.n_heads * (self.qk_nope_head_dim + self.v_head_dim)
            )
            return query + key_value + self.n_heads * self.v_head_dim * dim


class DeepSeekV3TransformerBlock(TransformerBlock):
    """A deepseek_v3 block: the first n_dense_layers are dense, the rest run the MoE."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(TransformerBlock.Config):
        """deepseek_v3 block with MLA attention."""

        _owner_path = "titan.models.deepseek_v3.model:DeepSeekV3TransformerBlock"
        _ranges = {"n_dense_layers": NON_NEGATIVE}

        attention: BaseAttention.Config = field(default_factory=MLAttention.Config)
        """Multi-head latent attention of the block."""
        moe: MoE.Config | None = field(default_factory=MoE.Config)
        """Mixture of experts of the layers after the dense ones; None makes every layer dense."""
        n_dense_layers: int = 1
        """How many leading layers use the dense feed-forward instead of the MoE."""

        def uses_moe(self, layer_id: int) -> bool:
            """Whether layer ``layer_id`` is past the leading dense layers."""
            return self.moe is not None and layer_id >= self.n_dense_layers


class DeepSeekV3Model(Decoder):
    """DeepSeek V2/V3 style decoder: MLA attention, YaRN rope, shared plus routed experts."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Decoder.Config):
        """A deepseek_v3 model."""

        _owner_path = "titan.models.deepseek_v3.model:DeepSeekV3Model"

        rope: YaRNRoPE.Config = field(default_factory=YaRNRoPE.Config)
        """YaRN rotary embedding of the rope part of queries and keys."""
        layer: DeepSeekV3TransformerBlock.Config = field(
            default_factory=DeepSeekV3TransformerBlock.Config
        )
        """The block every layer is built from."""
        max_batch_size: int = 8
        """Batch size of v0.2.2's inference caches; unused in training, kept for migration."""
        expert_parallel_comm_backend: Literal["standard", "deepep"] = "standard"
        """Token dispatch of expert parallelism: all-to-all collectives, or DeepEP kernels."""
