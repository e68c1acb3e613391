"""Accelerator peak FLOPs, the denominator of MFU (each family's model config counts the
numerator: ``BaseModel.Config.flops_per_token``).

A pure function over device names, so it can be checked without torch.
"""

from __future__ import annotations

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
