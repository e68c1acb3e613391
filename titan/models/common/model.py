"""The torch modules behind titan's shared decoder configs: SwiGLU, block, decoder.

Each class here is the ``_owner_path`` target of the torch-free config of the same name in
``titan.models.common`` and is constructed by ``config.build(**runtime_kwargs)``; rope and
attention live in ``titan.models.common.attention_model``, the init constants in
``titan.models.common.weight_init``, and the families import all of them from here. Module and
parameter names are torchtitan's, so checkpoints, parallelization plans and the Hugging Face
adapter address the same keys. Initialization follows torchtitan v0.2.2's llama3 exactly.

Attention masks: each attention layer names its mask kind (``mask_spec``, see
``titan.models.common.attention_masks``); ``Decoder.attention_masks(tokens, eos_id=...)`` builds
one boolean mask per kind for a batch, ``Decoder.forward(tokens, attention_masks=...)`` hands each
layer its own, and a layer given none attends plainly causally. ``block_causal`` configs (the
flex and varlen flavors) thus run their per-document masks on SDPA, not on FlexAttention or
varlen kernels (the module docstring there says what that costs). Unlike torchtitan, whose
sdpa path ignores ``attn_mask_type``, titan honours ``block_causal`` whatever the ``attn_type``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from titan.models.common import decoder as decoder_config
from titan.models.common import feed_forward as feed_forward_config
from titan.models.common.attention_masks import AttentionMasks, MaskSpec, build_attention_masks
from titan.models.common.attention_model import (
    Attention,
    LlamaRoPE,
    RoPE,
    apply_rotary_emb,
    attention_mask_spec,
    llama_scaled_frequencies,
    masked_sdpa,
    repeat_kv,
)
from titan.models.common.cp_attention import local_batch
from titan.models.common.weight_init import BASE_INIT_STD, OUTPUT_CUTOFF_STDS, block_init_std


class FeedForward(nn.Module):
    """SwiGLU feed-forward: ``w2(silu(w1(x)) * w3(x))``."""

    Config = feed_forward_config.FeedForward.Config

    def __init__(self, *, config: feed_forward_config.FeedForward.Config, dim: int):
        super().__init__()
        hidden_dim = config.effective_hidden_dim(dim)
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def init_weights(self, init_std: float) -> None:
        """w1 at std 0.02, w2 and w3 at the block's ``init_std`` (torchtitan's choice)."""
        nn.init.trunc_normal_(self.w1.weight, mean=0.0, std=BASE_INIT_STD)
        for linear in (self.w2, self.w3):
            nn.init.trunc_normal_(linear.weight, mean=0.0, std=init_std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the feed-forward to every position of ``x``."""
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def norm_in_weight_dtype(norm: nn.RMSNorm, x: torch.Tensor) -> torch.Tensor:
    """``norm(x)`` computed in the dtype of the norm's weight, returned in ``x``'s dtype.

    Under autocast the projections give bfloat16 activations while the norm weights stay
    float32; ``rms_norm`` then warns about the mismatch and computes the same thing unfused
    (float32 math, bfloat16 result), which the explicit casts give without the warning, bit for
    bit (qwen3's q/k norms, deepseek_v3's latent norms).
    """
    return norm(x.to(norm.weight.dtype)).to(x.dtype)


class TransformerBlock(nn.Module):
    """Pre-norm block: ``h = x + attention(norm(x))``, ``out = h + ffn(norm(h))``.

    ``ffn`` is the block's ``moe`` on the layers its config marks as MoE layers, else its dense
    ``feed_forward`` (torchtitan's attribute names; a block has exactly one of the two).
    """

    Config = decoder_config.TransformerBlock.Config

    def __init__(
        self,
        *,
        config: decoder_config.TransformerBlock.Config,
        layer_id: int,
        dim: int,
        n_layers: int,
        norm_eps: float,
    ):
        super().__init__()
        self.layer_id = layer_id
        self.moe_enabled = config.uses_moe(layer_id)
        self.attention = config.attention.build(dim=dim)
        if self.moe_enabled:
            assert config.moe is not None
            self.moe = config.moe.build(dim=dim, hidden_dim=config.moe_hidden_dim(dim))
        elif config.feed_forward is None:
            raise ValueError(f"layer {layer_id} is dense but the block has no feed_forward")
        else:
            self.feed_forward = config.feed_forward.build(dim=dim)
        self.attention_norm = nn.RMSNorm(dim, eps=norm_eps)
        self.ffn_norm = nn.RMSNorm(dim, eps=norm_eps)
        self.weight_init_std = block_init_std(config.init_std, layer_id=layer_id, n_layers=n_layers)

    def init_weights(self, buffer_device: torch.device | str | None = None) -> None:
        """Reset both norms to ones and initialize attention and the feed-forward or MoE.

        ``buffer_device`` is where the MoE's buffers (expert bias, token counts) are made.
        """
        for norm in (self.attention_norm, self.ffn_norm):
            norm.reset_parameters()
        self.attention.init_weights(self.weight_init_std)
        if self.moe_enabled:
            self.moe.init_weights(self.weight_init_std, buffer_device)
        else:
            self.feed_forward.init_weights(self.weight_init_std)

    def forward(
        self,
        x: torch.Tensor,
        freqs_cis: torch.Tensor,
        *,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Run the block over ``x`` of shape ``[bs, seq, dim]`` (``attention_mask``: its
        attention's mask for this batch, None for plain causal)."""
        h = x + self.attention(self.attention_norm(x), freqs_cis, attention_mask=attention_mask)
        ffn = self.moe if self.moe_enabled else self.feed_forward
        return h + ffn(self.ffn_norm(h))


class Decoder(nn.Module):
    """A decoder-only language model: embeddings, ``n_layers`` blocks, final norm, output.

    Built from a ``Decoder.Config`` subclass (each family's model config). The rotary table
    ``freqs_cis`` is a non-persistent buffer, recomputed by ``init_weights``; build on the meta
    device, ``to_empty(device=...)``, then call ``init_weights()`` to get a usable model.
    """

    def __init__(self, *, config: decoder_config.Decoder.Config):
        super().__init__()
        self.config = config
        layers = nn.ModuleDict()
        for layer_id in range(config.n_layers):
            layers[str(layer_id)] = config.layer.build(
                layer_id=layer_id,
                dim=config.dim,
                n_layers=config.n_layers,
                norm_eps=config.norm_eps,
            )
        # Plain list, not module state: each block's mask kind, in layer order (read before any
        # wrapper hides the attention modules).
        self.mask_specs: list[MaskSpec] = [layer.attention.mask_spec for layer in layers.values()]
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.dim)
        self.rope = config.rope.build(
            head_dim=config.layer.attention.head_dim_for(config.dim),
            max_seq_len=config.max_seq_len,
        )
        self.register_buffer("freqs_cis", self.rotary_table(), persistent=False)
        self.layers = layers
        self.norm = nn.RMSNorm(config.dim, eps=config.norm_eps)
        self.output = nn.Linear(config.dim, config.vocab_size, bias=False)

    def init_weights(self, buffer_device: torch.device | str | None = None) -> None:
        """Initialize every parameter as torchtitan v0.2.2 does and recompute ``freqs_cis``.

        ``buffer_device`` is where the rotary table is computed (default: where it is now),
        e.g. ``"cuda"`` when the parameters were moved to CPU for offloading.
        """
        self.init_buffers(buffer_device)
        # A pipeline stage holds only some of the modules; the others are None.
        if self.tok_embeddings is not None:
            nn.init.normal_(self.tok_embeddings.weight)
        for layer in self.layers.values():
            layer.init_weights(buffer_device or self.freqs_cis.device)
        if self.norm is not None:
            self.norm.reset_parameters()
        if self.output is not None:
            std = self.config.dim**-0.5
            bound = OUTPUT_CUTOFF_STDS * std
            nn.init.trunc_normal_(self.output.weight, mean=0.0, std=std, a=-bound, b=bound)

    def init_buffers(self, buffer_device: torch.device | str | None = None) -> None:
        """Recompute the rotary table and zero the MoE buffers (bias, token counts).

        The rotary table and the token counts are in no checkpoint; a sharded run that loads its
        weights instead of initializing them calls this, then loads the expert bias.
        """
        device = buffer_device or self.freqs_cis.device
        with torch.device(device):
            self.freqs_cis = self.rotary_table()
        for layer in self.layers.values():
            moe = getattr(layer, "moe", None)
            if moe is not None:
                moe.init_buffers(device)

    def rotary_table(self) -> torch.Tensor:
        """The table every block's attention rotates by: complex ``freqs_cis`` by default."""
        return self.rope.freqs_cis()

    def needs_documents(self) -> bool:
        """Whether some layer masks by document (``block_causal``): its masks need an EOS id."""
        return any(spec.documents for spec in self.mask_specs)

    def attention_masks(self, tokens: torch.Tensor, *, eos_id: int | None = None) -> AttentionMasks:
        """The boolean masks of the batch ``tokens`` ``[bs, seq]``, one per mask kind its layers
        use (none for plain causal layers); ``eos_id`` ends documents for ``block_causal``."""
        return build_attention_masks(self.mask_specs, tokens=tokens, eos_id=eos_id)

    def forward(
        self, tokens: torch.Tensor, attention_masks: AttentionMasks | None = None
    ) -> torch.Tensor:
        """Logits ``[bs, seq, vocab_size]`` of token ids ``[bs, seq]``.

        ``attention_masks`` are the batch's masks from ``attention_masks``; when left out they
        are built here, which a model with ``block_causal`` layers refuses (it needs the EOS id).
        Under context parallel they are the batch's ``ContextParallelBatch``: the model then
        runs this rank's ``seq / cp`` tokens and returns their logits only. A pipeline stage
        (``titan.distributed.pipeline_parallel``) holds some of the modules: without embeddings
        it takes the previous stage's hidden states ``[bs, seq, dim]``, without the output
        projection it returns its own, and the layers it holds keep their names, so
        ``mask_specs[int(name)]`` is each one's mask kind. Under both, every stage receives the
        batch's CP view, made for inputs cut before the schedule (``inputs_cut``).
        """
        if tokens.shape[1] > self.freqs_cis.shape[0]:
            raise ValueError(
                f"sequence length {tokens.shape[1]} exceeds max_seq_len {self.freqs_cis.shape[0]}"
            )
        if attention_masks is None:
            attention_masks = self.attention_masks(tokens)
        tokens, rotary_table = local_batch(tokens, self.freqs_cis, attention_masks)
        # A later pipeline stage receives hidden states in place of token ids.
        h = tokens if self.tok_embeddings is None else self.tok_embeddings(tokens)
        for name, layer in self.layers.items():
            spec = self.mask_specs[int(name)]
            h = layer(h, rotary_table, attention_mask=attention_masks.get(spec))
        if self.norm is not None:
            h = self.norm(h)
        return h if self.output is None else self.output(h)


# The attention modules and init constants are named here too: the families build on this
# module's parts as one set.
__all__ = [
    "Attention",
    "Decoder",
    "FeedForward",
    "LlamaRoPE",
    "attention_mask_spec",
    "RoPE",
    "TransformerBlock",
    "apply_rotary_emb",
    "block_init_std",
    "norm_in_weight_dtype",
    "llama_scaled_frequencies",
    "masked_sdpa",
    "repeat_kv",
]
