"""Model FLOPs per token and accelerator peak FLOPs: the two halves of MFU.

Pure functions over configs and device names, so they can be checked without torch.
"""

from __future__ import annotations

from typing import Any

PEAK_BF16_FLOPS: tuple[tuple[tuple[str, ...], float], ...] = (
    # (fragments that must all appear in the device name, dense bf16 FLOP/s); first match wins,
    # so the specific H100 variants come before the plain (SXM) H100. torchtitan's table.
    (("A100",), 312e12),
    (("H100", "NVL"), 835e12),
    (("H100", "PCIe"), 756e12),
    (("H100",), 989e12),
    (("H200",), 989e12),
    (("B200",), 2.25e15),
)


def peak_flops(device_name: str | None) -> float | None:
    """Dense bf16 peak FLOP/s of an accelerator named like ``torch.cuda.get_device_name()``.

    None for a CPU or an accelerator not in the table: MFU is then not reported.
    """
    if not device_name:
        return None
    for fragments, flops in PEAK_BF16_FLOPS:
        if all(fragment in device_name for fragment in fragments):
            return flops
    return None


def transformer_flops_per_token(
    *,
    num_params: int,
    num_embedding_params: int,
    n_layers: int,
    n_heads: int,
    head_dim: int,
    seq_len: int,
) -> int:
    """Training FLOPs per token of a dense transformer (torchtitan's formula, PaLM appendix B).

    6 per non-embedding parameter (2 forward + 4 backward); attention adds 12·l·h·q·t: per layer
    2 matmuls forward and 4 backward, 2 FLOPs per multiply-add, no causal-mask discount, and the
    flash-attention recomputation is not counted.
    """
    attention = 12 * n_layers * n_heads * head_dim * seq_len
    return 6 * (num_params - num_embedding_params) + attention


def dense_flops_per_token(model_config: Any, *, seq_len: int) -> int | None:
    """``transformer_flops_per_token`` of a decoder config; None when it is not a dense model.

    Only the token embedding counts as embedding (it is a lookup); the output projection is a
    matmul and counts, as in torchtitan.
    """
    layer = getattr(model_config, "layer", None)
    attention = getattr(layer, "attention", None)
    if layer is None or getattr(layer, "moe", None) is not None:
        return None
    if not hasattr(attention, "head_dim_for"):
        return None
    num_params = model_config.num_params()
    if num_params is None:
        return None
    return transformer_flops_per_token(
        num_params=num_params,
        num_embedding_params=model_config.vocab_size * model_config.dim,
        n_layers=model_config.n_layers,
        n_heads=attention.n_heads,
        head_dim=attention.head_dim_for(model_config.dim),
        seq_len=seq_len,
    )
