"""torchtitan's weight initialization constants, shared by the decoder families' modules.

Kept apart from the modules so that every family initializes with the same numbers (llama3's, as
torchtitan v0.2.2 writes them), whichever of titan's shared modules it builds on.
"""

from __future__ import annotations

# torchtitan's init constants: the std of the input projections, and the cutoff (in stds) of
# the final output projection's truncated normal.
BASE_INIT_STD = 0.02
OUTPUT_CUTOFF_STDS = 3


def block_init_std(init_std: str, *, layer_id: int, n_layers: int) -> float:
    """The std of a block's output projections: scaled down by depth or by the layer count."""
    depth = layer_id + 1 if init_std == "by_layer" else n_layers
    return BASE_INIT_STD / (2 * depth) ** 0.5
