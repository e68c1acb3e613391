"""The torch layers of the flux transformer: multi-axis rope, timestep embedding, modulation,
the double-stream and single-stream blocks, and the final adaLN layer.

Parameter names are torchtitan v0.2.2's (which are Black Forest Labs' FLUX.1 names), so
checkpoints and the Hugging Face adapter address the same keys. Initialisation follows v0.2.2's
``init_weights``: xavier-uniform linears with zero biases, zero modulations and output layer.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import nn

# Width of the sinusoidal embedding of timesteps and guidance strengths, and the factor that
# maps a timestep in [0, 1] onto the [0, 1000] range the frequencies were chosen for (FLUX.1's).
TIMESTEP_EMBED_DIM = 256
TIME_FACTOR = 1000.0
MAX_PERIOD = 10000
# Every LayerNorm of FLUX.1 normalises without affine weights; the modulation supplies them.
LAYER_NORM_EPS = 1e-6
# std of the embedders' linears in v0.2.2's init_weights.
EMBEDDER_INIT_STD = 0.02


def rope_rotations(positions: torch.Tensor, *, dim: int, theta: float) -> torch.Tensor:
    """``[..., n, dim // 2, 2, 2]`` rotation matrices of the positions ``[..., n]`` on one axis.

    Computed in float32 whatever the positions' dtype: a bfloat16 frequency table would rotate
    distant positions visibly wrong.
    """
    if dim % 2:
        raise ValueError(f"every rope axis needs an even width, got {dim}")
    positions = positions.float()
    exponents = torch.arange(0, dim, 2, dtype=torch.float32, device=positions.device) / dim
    frequencies = 1.0 / (theta**exponents)
    angles = positions[..., None] * frequencies
    cos, sin = torch.cos(angles), torch.sin(angles)
    rows = torch.stack([cos, -sin, sin, cos], dim=-1)
    return rows.view(*angles.shape, 2, 2)


def apply_rope(
    xq: torch.Tensor, xk: torch.Tensor, rotations: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate ``[bs, heads, seq, head_dim]`` queries and keys, adjacent pairs of each head by the
    ``[bs, 1, seq, head_dim // 2, 2, 2]`` ``rotations`` (float32 math, inputs' dtype out)."""
    xq_ = xq.float().reshape(*xq.shape[:-1], -1, 1, 2)
    xk_ = xk.float().reshape(*xk.shape[:-1], -1, 1, 2)
    xq_out = rotations[..., 0] * xq_[..., 0] + rotations[..., 1] * xq_[..., 1]
    xk_out = rotations[..., 0] * xk_[..., 0] + rotations[..., 1] * xk_[..., 1]
    return xq_out.reshape(*xq.shape).type_as(xq), xk_out.reshape(*xk.shape).type_as(xk)


def timestep_embedding(t: torch.Tensor, dim: int = TIMESTEP_EMBED_DIM) -> torch.Tensor:
    """``[n, dim]`` sinusoidal embedding (cosines, then sines) of ``n`` timesteps in [0, 1]."""
    half = dim // 2
    exponents = torch.arange(half, dtype=torch.float32, device=t.device) / half
    frequencies = torch.exp(-math.log(MAX_PERIOD) * exponents)
    angles = (TIME_FACTOR * t)[:, None].float() * frequencies[None]
    embedding = torch.cat([torch.cos(angles), torch.sin(angles)], dim=-1)
    if dim % 2:
        embedding = torch.cat([embedding, torch.zeros_like(embedding[:, :1])], dim=-1)
    return embedding.to(t) if torch.is_floating_point(t) else embedding


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Every token attends to every token: ``[bs, heads, seq, d]`` in, ``[bs, seq, heads * d]``
    out.

    Not causal. v0.2.2's blocks called its SDPA wrapper whose ``is_causal`` defaults to True, so
    its text tokens never saw the image; FLUX.1's weights (and diffusers) attend fully.
    """
    out = F.scaled_dot_product_attention(q, k, v)
    bs, heads, seq, d = out.shape
    return out.transpose(1, 2).reshape(bs, seq, heads * d)


def split_heads(qkv: torch.Tensor, num_heads: int) -> tuple[torch.Tensor, ...]:
    """``[bs, seq, 3 * heads * d]`` fused projections -> q, k, v each ``[bs, heads, seq, d]``."""
    bs, seq, width = qkv.shape
    parts = qkv.view(bs, seq, 3, num_heads, width // (3 * num_heads)).permute(2, 0, 3, 1, 4)
    return parts[0], parts[1], parts[2]


def xavier_linear(linear: nn.Linear) -> None:
    """Xavier-uniform weight and zero bias (v0.2.2's init of the transformer's linears)."""
    nn.init.xavier_uniform_(linear.weight)
    if linear.bias is not None:
        nn.init.zeros_(linear.bias)


def zero_linear(linear: nn.Linear) -> None:
    """Zero weight and bias: the layer starts as the identity of its residual (adaLN-zero)."""
    nn.init.zeros_(linear.weight)
    nn.init.zeros_(linear.bias)


class MLPEmbedder(nn.Module):
    """``out_layer(silu(in_layer(x)))``: how timesteps, guidance and pooled text enter ``vec``."""

    def __init__(self, in_dim: int, *, hidden_dim: int):
        super().__init__()
        self.in_layer = nn.Linear(in_dim, hidden_dim, bias=True)
        self.out_layer = nn.Linear(hidden_dim, hidden_dim, bias=True)

    def init_weights(self) -> None:
        """Normal weights at std 0.02, zero biases."""
        for linear in (self.in_layer, self.out_layer):
            nn.init.normal_(linear.weight, std=EMBEDDER_INIT_STD)
            nn.init.zeros_(linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Embed ``x`` ``[bs, in_dim]`` into ``[bs, hidden_dim]``."""
        return self.out_layer(F.silu(self.in_layer(x)))


class QKNorm(nn.Module):
    """RMS norms of the queries and keys of each head (their dtype then follows the values)."""

    def __init__(self, head_dim: int):
        super().__init__()
        # eps None (the dtype's epsilon) as in v0.2.2; FLUX.1 and diffusers use 1e-6, which
        # differs by well under float32 noise at the norms' scale.
        self.query_norm = nn.RMSNorm(head_dim)
        self.key_norm = nn.RMSNorm(head_dim)

    def init_weights(self) -> None:
        """Unit weights."""
        self.query_norm.reset_parameters()
        self.key_norm.reset_parameters()

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalised ``q`` and ``k``, in ``v``'s dtype."""
        return self.query_norm(q).to(v), self.key_norm(k).to(v)


class SelfAttention(nn.Module):
    """One stream's fused q/k/v projection, q/k norms and output projection.

    The attention itself runs in the block, over the streams joined together.
    """

    def __init__(self, dim: int, *, num_heads: int, qkv_bias: bool):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.norm = QKNorm(dim // num_heads)
        self.proj = nn.Linear(dim, dim)

    def init_weights(self) -> None:
        """Xavier-uniform projections, unit norms."""
        xavier_linear(self.qkv)
        xavier_linear(self.proj)
        self.norm.init_weights()

    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Normalised q, k and v of ``x``, each ``[bs, heads, seq, head_dim]``."""
        q, k, v = split_heads(self.qkv(x), self.num_heads)
        q, k = self.norm(q, k, v)
        return q, k, v


@dataclasses.dataclass(frozen=True, slots=True)
class ModulationOut:
    """One adaLN modulation: ``(1 + scale) * norm(x) + shift``, residual gated by ``gate``."""

    shift: torch.Tensor
    """Added after scaling, ``[bs, 1, dim]``."""
    scale: torch.Tensor
    """Scale minus one, ``[bs, 1, dim]``."""
    gate: torch.Tensor
    """Factor of the sub-layer's output before the residual sum, ``[bs, 1, dim]``."""

    def modulate(self, normed: torch.Tensor) -> torch.Tensor:
        """``normed`` scaled and shifted."""
        return (1 + self.scale) * normed + self.shift


class Modulation(nn.Module):
    """The shift/scale/gate triples a block derives from ``vec``: two in a double-stream block
    (attention, MLP), one in a single-stream block."""

    def __init__(self, dim: int, *, triples: int):
        super().__init__()
        self.triples = triples
        self.lin = nn.Linear(dim, 3 * triples * dim, bias=True)

    def init_weights(self) -> None:
        """Zero: every block starts as the identity."""
        zero_linear(self.lin)

    def forward(self, vec: torch.Tensor) -> list[ModulationOut]:
        """The triples of ``vec`` ``[bs, dim]``, each tensor ``[bs, 1, dim]``."""
        chunks = self.lin(F.silu(vec))[:, None, :].chunk(3 * self.triples, dim=-1)
        return [ModulationOut(*chunks[i : i + 3]) for i in range(0, len(chunks), 3)]


def layer_norm(dim: int) -> nn.LayerNorm:
    """A LayerNorm without weights (the modulation scales and shifts instead)."""
    return nn.LayerNorm(dim, elementwise_affine=False, eps=LAYER_NORM_EPS)


def gelu_mlp(dim: int, hidden_dim: int) -> nn.Sequential:
    """``Linear, tanh-GELU, Linear`` (indices 0 and 2 hold the weights, as in FLUX.1)."""
    return nn.Sequential(
        nn.Linear(dim, hidden_dim, bias=True),
        nn.GELU(approximate="tanh"),
        nn.Linear(hidden_dim, dim, bias=True),
    )


class DoubleStreamBlock(nn.Module):
    """Image and text tokens with their own weights, attending jointly (text first)."""

    def __init__(self, hidden_size: int, *, num_heads: int, mlp_ratio: float, qkv_bias: bool):
        super().__init__()
        mlp_hidden = int(hidden_size * mlp_ratio)
        for stream in ("img", "txt"):
            self.add_module(f"{stream}_mod", Modulation(hidden_size, triples=2))
            self.add_module(f"{stream}_norm1", layer_norm(hidden_size))
            self.add_module(
                f"{stream}_attn",
                SelfAttention(hidden_size, num_heads=num_heads, qkv_bias=qkv_bias),
            )
            self.add_module(f"{stream}_norm2", layer_norm(hidden_size))
            self.add_module(f"{stream}_mlp", gelu_mlp(hidden_size, mlp_hidden))

    def init_weights(self) -> None:
        """Xavier MLPs and attention projections, zero modulations."""
        for mlp in (self.img_mlp, self.txt_mlp):
            xavier_linear(mlp[0])
            xavier_linear(mlp[2])
        for module in (self.img_attn, self.img_mod, self.txt_attn, self.txt_mod):
            module.init_weights()

    def forward(
        self, img: torch.Tensor, txt: torch.Tensor, *, vec: torch.Tensor, pe: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The block over ``img`` ``[bs, L_img, D]`` and ``txt`` ``[bs, L_txt, D]``; ``pe`` holds
        the rotations of the text positions, then the image's."""
        img_attn_mod, img_mlp_mod = self.img_mod(vec)
        txt_attn_mod, txt_mlp_mod = self.txt_mod(vec)
        img_q, img_k, img_v = self.img_attn.heads(img_attn_mod.modulate(self.img_norm1(img)))
        txt_q, txt_k, txt_v = self.txt_attn.heads(txt_attn_mod.modulate(self.txt_norm1(txt)))
        q, k = apply_rope(torch.cat((txt_q, img_q), dim=2), torch.cat((txt_k, img_k), dim=2), pe)
        joint = attention(q, k, torch.cat((txt_v, img_v), dim=2))
        txt_out, img_out = joint[:, : txt.shape[1]], joint[:, txt.shape[1] :]
        img = img + img_attn_mod.gate * self.img_attn.proj(img_out)
        img = img + img_mlp_mod.gate * self.img_mlp(img_mlp_mod.modulate(self.img_norm2(img)))
        txt = txt + txt_attn_mod.gate * self.txt_attn.proj(txt_out)
        txt = txt + txt_mlp_mod.gate * self.txt_mlp(txt_mlp_mod.modulate(self.txt_norm2(txt)))
        return img, txt


class SingleStreamBlock(nn.Module):
    """Text and image tokens as one sequence; attention and MLP in parallel from one fused
    input projection (``linear1``) into one fused output projection (``linear2``)."""

    def __init__(self, hidden_size: int, *, num_heads: int, mlp_ratio: float):
        super().__init__()
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.mlp_hidden_dim = int(hidden_size * mlp_ratio)
        self.linear1 = nn.Linear(hidden_size, hidden_size * 3 + self.mlp_hidden_dim)
        self.linear2 = nn.Linear(hidden_size + self.mlp_hidden_dim, hidden_size)
        self.norm = QKNorm(hidden_size // num_heads)
        self.pre_norm = layer_norm(hidden_size)
        self.modulation = Modulation(hidden_size, triples=1)

    def init_weights(self) -> None:
        """Xavier projections, unit q/k norms, zero modulation."""
        xavier_linear(self.linear1)
        xavier_linear(self.linear2)
        self.norm.init_weights()
        self.modulation.init_weights()

    def forward(self, x: torch.Tensor, *, vec: torch.Tensor, pe: torch.Tensor) -> torch.Tensor:
        """The block over the joined sequence ``x`` ``[bs, L_txt + L_img, D]``."""
        (mod,) = self.modulation(vec)
        qkv, mlp = torch.split(
            self.linear1(mod.modulate(self.pre_norm(x))),
            [3 * self.hidden_size, self.mlp_hidden_dim],
            dim=-1,
        )
        q, k, v = split_heads(qkv, self.num_heads)
        q, k = apply_rope(*self.norm(q, k, v), pe)
        out = self.linear2(torch.cat((attention(q, k, v), F.gelu(mlp, approximate="tanh")), 2))
        return x + mod.gate * out


class LastLayer(nn.Module):
    """Final adaLN (shift, then scale, from ``vec``) and the projection to latent patches."""

    def __init__(self, hidden_size: int, *, out_channels: int):
        super().__init__()
        self.norm_final = layer_norm(hidden_size)
        self.linear = nn.Linear(hidden_size, out_channels, bias=True)
        self.adaLN_modulation = nn.Sequential(
            nn.SiLU(), nn.Linear(hidden_size, 2 * hidden_size, bias=True)
        )

    def init_weights(self) -> None:
        """Zero: an untrained model predicts zero velocity."""
        zero_linear(self.adaLN_modulation[1])
        zero_linear(self.linear)

    def forward(self, x: torch.Tensor, vec: torch.Tensor) -> torch.Tensor:
        """Project the image tokens ``x`` ``[bs, L_img, D]`` to ``[bs, L_img, out_channels]``."""
        shift, scale = self.adaLN_modulation(vec).chunk(2, dim=1)
        return self.linear((1 + scale[:, None, :]) * self.norm_final(x) + shift[:, None, :])
