"""What every decoder family's Hugging Face state-dict adapter shares: the names outside the
blocks, the block-key patterns, name lookup with a clear error, the export's shard layout and the
safetensors reader.

Importing this module does not import torch: the reader is imported when one is asked for.
"""

from __future__ import annotations

import json
import logging
import os
import re
from typing import Any

logger = logging.getLogger(__name__)

# titan name -> Hugging Face name, for the keys outside the blocks (every decoder family's).
TOP_LEVEL_KEYS = {
    "tok_embeddings.weight": "model.embed_tokens.weight",
    "norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
# A block key, capturing the layer index and the name inside the block: titan's, Hugging Face's.
TITAN_LAYER = re.compile(r"layers\.(\d+)\.(.+)")
HF_LAYER = re.compile(r"model\.layers\.(\d+)\.(.+)")


def inverted(table: dict[str, str]) -> dict[str, str]:
    """The Hugging Face -> titan table of a titan -> Hugging Face ``table``."""
    return {hf: titan for titan, hf in table.items()}


def lookup(name: str, *, table: dict[str, str], key: str, family: str) -> str:
    """``table[name]``, or a ``ValueError`` naming the full ``key`` that is not a ``family``
    state-dict key."""
    try:
        return table[name]
    except KeyError:
        raise ValueError(f"{key!r} is not a {family} state-dict key") from None


def read_shard_index(hf_assets_path: str | None) -> dict[str, int] | None:
    """Hugging Face key -> safetensors shard number, from the folder's index file if it has one."""
    if not hf_assets_path:
        return None
    index_path = os.path.join(hf_assets_path, "model.safetensors.index.json")
    try:
        with open(index_path) as f:
            weight_map = json.load(f)["weight_map"]
    except FileNotFoundError:
        logger.debug("%s not found: an HF export is saved as one safetensors file", index_path)
        return None
    # Shard files are named like model-00001-of-00004.safetensors; the first number is the index.
    return {key: int(re.search(r"\d+", file).group(0)) for key, file in weight_map.items()}


def hf_storage_reader(path: str, *, from_quantized: bool, family: str) -> Any:
    """A DCP reader of the Hugging Face safetensors checkpoint in folder ``path``; a
    ``ValueError`` for a quantized one, which ``family`` cannot load."""
    if from_quantized:
        raise ValueError(f"{family} cannot load a quantized Hugging Face checkpoint")
    from torch.distributed.checkpoint import HuggingFaceStorageReader

    return HuggingFaceStorageReader(path)


__all__ = [
    "HF_LAYER",
    "TITAN_LAYER",
    "TOP_LEVEL_KEYS",
    "hf_storage_reader",
    "inverted",
    "lookup",
    "read_shard_index",
]
