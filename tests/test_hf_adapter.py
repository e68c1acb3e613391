"""What the families' Hugging Face adapters share: shard layout of an export, name lookup with a
clear error, the safetensors reader's refusal of quantized checkpoints."""

from __future__ import annotations

import json

import pytest

from titan.models.common.hf_adapter import (
    HF_LAYER,
    TITAN_LAYER,
    TOP_LEVEL_KEYS,
    hf_storage_reader,
    inverted,
    lookup,
    read_shard_index,
)
from titan.models.qwen3.config_registry import qwen3_moe_debug
from titan.models.qwen3.state_dict_adapter import Qwen3StateDictAdapter


def test_shard_index_numbers_each_key_by_its_file(tmp_path):
    weight_map = {
        "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
        "lm_head.weight": "model-00002-of-00002.safetensors",
    }
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}), encoding="utf-8")
    assert read_shard_index(str(tmp_path)) == {"model.embed_tokens.weight": 1, "lm_head.weight": 2}


def test_no_index_means_one_file(tmp_path):
    assert read_shard_index(str(tmp_path)) is None
    assert read_shard_index(None) is None


def test_lookup_names_the_full_key_and_the_family():
    assert lookup("norm.weight", table=TOP_LEVEL_KEYS, key="norm.weight", family="x") == (
        "model.norm.weight"
    )
    with pytest.raises(ValueError, match=r"^'layers.0.bogus' is not a qwen3 state-dict key$"):
        lookup("bogus", table={}, key="layers.0.bogus", family="qwen3")


def test_tables_and_patterns_go_both_ways():
    assert inverted(TOP_LEVEL_KEYS)["lm_head.weight"] == "output.weight"
    assert TITAN_LAYER.fullmatch("layers.12.attention.wq.weight").groups() == (
        "12",
        "attention.wq.weight",
    )
    assert HF_LAYER.fullmatch("model.layers.3.mlp.gate.weight").groups() == ("3", "mlp.gate.weight")
    assert TITAN_LAYER.fullmatch("norm.weight") is None


def test_quantized_checkpoints_are_refused_by_family(tmp_path):
    with pytest.raises(ValueError, match="llama4 cannot load a quantized Hugging Face checkpoint"):
        hf_storage_reader(str(tmp_path), from_quantized=True, family="llama4")
    reader = hf_storage_reader(str(tmp_path), from_quantized=False, family="llama4")
    assert type(reader).__name__ == "HuggingFaceStorageReader"


def test_a_family_adapter_refuses_unknown_keys_with_its_name():
    config = qwen3_moe_debug().model_spec.model
    adapter = Qwen3StateDictAdapter(model_config=config, hf_assets_path=None)
    assert adapter.fqn_to_index_mapping is None
    with pytest.raises(ValueError, match="'model.bogus' is not a qwen3 state-dict key"):
        adapter.from_hf({"model.bogus": None})
