"""What every decoder family's Hugging Face state-dict adapter shares: the names outside the
blocks, the block-key patterns, name lookup with a clear error, the export's shard layout, the
safetensors reader, and the conversion itself (:class:`HFStateDictAdapter`).

A family's adapter is its tables of names (data) plus hooks for the tensors that are more than a
rename (a rotary layout, fused experts, tied weights); the walk over the keys is written once here.

Importing this module does not import torch: the reader is imported when one is asked for, and
the conversions only call tensor methods.
"""

from __future__ import annotations

import logging
import os
import re
from collections import defaultdict
from collections.abc import Mapping
from typing import Any, ClassVar

from titan.components import asset_files

logger = logging.getLogger(__name__)

# titan name -> Hugging Face name, for the keys outside the blocks (every decoder family's).
TOP_LEVEL_KEYS = {
    "tok_embeddings.weight": "model.embed_tokens.weight",
    "norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
# Old Hugging Face checkpoints store the rotary table; titan recomputes it, so it is dropped.
HF_ROTARY_TABLE = ("self_attn.rotary_emb.inv_freq",)
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


def read_shard_index(
    hf_assets_path: str | None, *, index_file: str = "model.safetensors.index.json"
) -> dict[str, int] | None:
    """Hugging Face key -> safetensors shard number, from the folder's index file
    ``index_file`` if it has one."""
    if not hf_assets_path:
        return None
    index_path = os.path.join(hf_assets_path, index_file)
    index = asset_files.read_json(index_path, what="the safetensors shard index")
    if index is None:
        logger.debug("%s not found: an HF export is saved as one safetensors file", index_path)
        return None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(
        isinstance(file, str) and re.search(r"\d+", file) for file in weight_map.values()
    ):
        raise asset_files.AssetFileError(
            f"{index_path} has no weight_map of keys to numbered shard files "
            "(model-00001-of-00004.safetensors)"
        )
    # Shard files are named like model-00001-of-00004.safetensors; the first number is the index.
    return {key: int(re.search(r"\d+", file).group(0)) for key, file in weight_map.items()}


def hf_storage_reader(path: str, *, from_quantized: bool, family: str) -> Any:
    """A DCP reader of the Hugging Face safetensors checkpoint in folder ``path``; a
    ``ValueError`` for a quantized one, which ``family`` cannot load."""
    if from_quantized:
        raise ValueError(f"{family} cannot load a quantized Hugging Face checkpoint")
    from torch.distributed.checkpoint import HuggingFaceStorageReader

    return HuggingFaceStorageReader(path)


HF_EXPERT = re.compile(r"(.+)\.(\d+)\.(\w+)\.weight")
"""A per-expert Hugging Face key inside a block: ``mlp.experts.{j}.gate_proj.weight`` (the
experts' prefix, the expert's number, its projection)."""

Parts = defaultdict[str, dict[Any, Any]]
"""Tensors one conversion collects before it can write them (experts to stack, gates and ups to
fuse): group name -> key -> tensor."""


class HFStateDictAdapter:
    """Maps a decoder family's state dict to Hugging Face names and back.

    A subclass declares its names as data (``family``, ``layer_keys``, and where it has them
    ``expert_keys``, ``titan_only_layer_keys``, ``hf_ignored_layer_keys``) and overrides a hook
    only for the tensors that are more than a rename; ``config_json`` is its own.

    ``hf_assets_path`` is the folder of a Hugging Face checkpoint (tokenizer, weights); when it
    holds ``model.safetensors.index.json``, ``fqn_to_index_mapping`` tells an exporter which
    shard file each Hugging Face key belongs to, so a saved checkpoint keeps the same layout.
    """

    family: ClassVar[str] = ""
    """The family's name, for error messages (``'x' is not a llama3 state-dict key``)."""
    layer_keys: ClassVar[Mapping[str, str]] = {}
    """titan name after ``layers.{i}.`` -> Hugging Face name after ``model.layers.{i}.``."""
    top_level_keys: ClassVar[Mapping[str, str]] = TOP_LEVEL_KEYS
    """titan -> Hugging Face names of the keys outside the blocks."""
    expert_keys: ClassVar[Mapping[str, str]] = {}
    """titan's stacked expert tensor (``moe.experts.w1``) -> the projection one Hugging Face
    expert has (``gate_proj``), for families whose checkpoints store one tensor per expert."""
    hf_experts: ClassVar[str] = "mlp.experts"
    """Where a block keeps its per-expert Hugging Face tensors."""
    titan_only_layer_keys: ClassVar[tuple[str, ...]] = ()
    """Block tensors Hugging Face has no place for: an export leaves them out."""
    hf_ignored_layer_keys: ClassVar[tuple[str, ...]] = ()
    """Hugging Face block tensors titan has no place for: an import skips them."""
    weights_file: ClassVar[str] = "model.safetensors"
    """The weights file an export writes (shards and the index are named after it): diffusers
    models use ``diffusion_pytorch_model.safetensors``."""
    zero_expert_bias: ClassVar[bool] = False
    """Whether an import starts ``moe.expert_bias`` at zero beside each router weight when the
    model balances load (Hugging Face's router has no such bias; zero routes the same)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Invert the subclass's tables once, for imports."""
        super().__init_subclass__(**kwargs)
        cls._top_level_of_hf = inverted(dict(cls.top_level_keys))
        cls._layer_of_hf = inverted(dict(cls.layer_keys))
        cls._expert_of_hf = inverted(dict(cls.expert_keys))

    def __init__(self, *, model_config: Any, hf_assets_path: str | None) -> None:
        self.check_model(model_config)
        self.model_config = model_config
        self.hf_assets_path = hf_assets_path
        self.fqn_to_index_mapping = read_shard_index(hf_assets_path)
        moe = getattr(getattr(model_config, "layer", None), "moe", None)
        self.num_experts = 0 if moe is None else moe.num_experts
        # Whether the MoE layers carry the expert_bias buffer an import must provide.
        self.balances_load = moe is not None and moe.load_balance_coeff is not None

    def check_model(self, model_config: Any) -> None:
        """Raise ``ValueError`` for a model config the family's Hugging Face model cannot hold."""

    def lookup(self, name: str, table: Mapping[str, str], *, key: str) -> str:
        """``table[name]``, or a ``ValueError`` naming the full ``key``."""
        return lookup(name, table=table, key=key, family=self.family)  # type: ignore[arg-type]

    # --------------------------------------------------------------------------- export

    def to_hf(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        """The Hugging Face state dict of titan ``state_dict``; ``ValueError`` on unknown keys."""
        hf: dict[str, Any] = {}
        parts: Parts = defaultdict(dict)
        for key, value in state_dict.items():
            layer = TITAN_LAYER.fullmatch(key)
            if layer is None:
                self.top_level_to_hf(key, value, hf)
                continue
            index, name = layer.groups()
            if name not in self.titan_only_layer_keys:
                self.layer_to_hf(index, name, value, hf, parts, key=key)
        self.finish_to_hf(hf, parts)
        return hf

    def top_level_to_hf(self, key: str, value: Any, hf: dict[str, Any]) -> None:
        """Write titan's ``key`` outside the blocks into ``hf``."""
        hf[self.lookup(key, self.top_level_keys, key=key)] = value

    def layer_to_hf(
        self, index: str, name: str, value: Any, hf: dict[str, Any], parts: Parts, *, key: str
    ) -> None:
        """Write block ``index``'s tensor ``name`` (titan's ``key``) into ``hf``."""
        prefix = f"model.layers.{index}"
        projection = self.expert_keys.get(name)
        if projection is not None:
            for expert in range(value.shape[0]):
                hf[f"{prefix}.{self.hf_experts}.{expert}.{projection}.weight"] = value[expert]
            return
        hf_name = self.lookup(name, self.layer_keys, key=key)
        hf[f"{prefix}.{hf_name}"] = self.relayout(name, value, to_hf=True)

    def finish_to_hf(self, hf: dict[str, Any], parts: Parts) -> None:
        """Write what ``layer_to_hf`` collected in ``parts`` into ``hf``."""

    # --------------------------------------------------------------------------- import

    def from_hf(self, hf_state_dict: dict[str, Any]) -> dict[str, Any]:
        """titan's state dict of Hugging Face ``hf_state_dict``; ``ValueError`` on unknown keys
        and on an incomplete set of experts."""
        state: dict[str, Any] = {}
        parts: Parts = defaultdict(dict)
        skipped = self.skipped_hf_layers(hf_state_dict)
        for hf_key, value in hf_state_dict.items():
            key = self.text_key(hf_key)
            if key is None:
                continue
            layer = HF_LAYER.fullmatch(key)
            if layer is None:
                state[self.lookup(key, self._top_level_of_hf, key=hf_key)] = value
                continue
            index, name = layer.groups()
            if name not in self.hf_ignored_layer_keys and index not in skipped:
                self.layer_from_hf(index, name, value, state, parts, key=hf_key)
        for stacked, by_number in parts["experts"].items():
            state[stacked] = self.stack_experts(by_number, key=stacked)
        self.finish_from_hf(state, hf_state_dict)
        return state

    def text_key(self, hf_key: str) -> str | None:
        """The key ``hf_key`` stands for in the text model, ``None`` to skip it."""
        return hf_key

    def skipped_hf_layers(self, hf_state_dict: dict[str, Any]) -> frozenset[str]:
        """Layer indices of ``hf_state_dict`` that titan's model has no place for."""
        return frozenset()

    def layer_from_hf(
        self, index: str, name: str, value: Any, state: dict[str, Any], parts: Parts, *, key: str
    ) -> None:
        """Write block ``index``'s Hugging Face tensor ``name`` (of ``key``) into ``state``."""
        prefix = f"layers.{index}"
        expert = HF_EXPERT.fullmatch(name) if self.expert_keys else None
        if expert is not None and expert.group(1) == self.hf_experts:
            _, number, projection = expert.groups()
            stacked = f"{prefix}.{self.lookup(projection, self._expert_of_hf, key=key)}"
            parts["experts"].setdefault(stacked, {})[int(number)] = value
            return
        titan_name = self.lookup(name, self._layer_of_hf, key=key)
        state[f"{prefix}.{titan_name}"] = self.relayout(titan_name, value, to_hf=False)
        if self.zero_expert_bias and titan_name == "moe.router.gate.weight":
            if self.balances_load:
                # One float32 zero per expert (the router's rows), made without importing torch.
                state[f"{prefix}.moe.expert_bias"] = value.new_zeros(value.shape[0]).float()

    def stack_experts(self, by_number: dict[int, Any], *, key: str) -> Any:
        """One ``[E, ...]`` tensor of the per-expert weights ``by_number`` of titan key ``key``."""
        if sorted(by_number) != list(range(self.num_experts)):
            raise ValueError(
                f"{key} needs experts 0..{self.num_experts - 1}, "
                f"the checkpoint has {sorted(by_number)}"
            )
        first = by_number[0]
        out = first.new_empty((self.num_experts, *first.shape))
        for number, weight in by_number.items():
            out[number].copy_(weight)
        return out

    def finish_from_hf(self, state: dict[str, Any], hf_state_dict: dict[str, Any]) -> None:
        """Complete ``state`` once every key of ``hf_state_dict`` is read."""

    # --------------------------------------------------------------------------- both ways

    def relayout(self, name: str, value: Any, *, to_hf: bool) -> Any:
        """Block tensor ``name`` (titan's name) in the target's layout; the same by default."""
        return value

    def config_json(self, *, torch_dtype: str = "float32") -> dict[str, Any]:
        """The Hugging Face config of this model, for an export folder's config.json."""
        raise NotImplementedError(f"{type(self).__name__} has no Hugging Face config")

    def get_hf_storage_reader(self, path: str, from_quantized: bool = False) -> Any:
        """A DCP reader of the Hugging Face safetensors checkpoint in folder ``path``."""
        return hf_storage_reader(path, from_quantized=from_quantized, family=self.family)


__all__ = [
    "HF_EXPERT",
    "HF_LAYER",
    "HF_ROTARY_TABLE",
    "HFStateDictAdapter",
    "TITAN_LAYER",
    "TOP_LEVEL_KEYS",
    "hf_storage_reader",
    "inverted",
    "lookup",
    "read_shard_index",
]
