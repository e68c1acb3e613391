"""What a pipeline stage needs besides its input, in one process: per-document masks built by
every stage from the microbatch's token ids (``input_batch``), and the Hugging Face tensors of
its own stages read on import, the files checked as without pipeline parallel."""

from __future__ import annotations

import copy

import pytest
import torch
from safetensors.torch import save_file

from titan.components.checkpoint.errors import CheckpointError
from titan.components.checkpoint.hf_stages import StageKeys, _read_own
from titan.components.checkpoint.state import ModelState
from titan.config.configs import ParallelismConfig
from titan.distributed.pipeline_masks import (
    INPUT_BATCH,
    build_masks_from_input_batch,
    needs_input_batch,
)
from titan.distributed.pipeline_parallel import layout_of, split_model
from titan.models.llama3 import model_registry
from titan.models.llama3.state_dict_adapter import Llama3StateDictAdapter

SEQ, VOCAB, LAYERS, EOS = 16, 256, 5, 0
LAYOUTS = [(2, "1F1B"), (2, "Interleaved1F1B"), (3, "GPipe")]


def small_config(flavor: str):
    """llama3's ``flavor`` shrunk to 5 layers of width 64 over 256 tokens."""
    config = copy.deepcopy(model_registry(flavor).model)
    config.n_layers, config.max_seq_len, config.dim, config.vocab_size = LAYERS, SEQ, 64, VOCAB
    return config


def small_model(flavor: str = "debugmodel") -> torch.nn.Module:
    """``small_config(flavor)`` with real fp32 weights on CPU."""
    with torch.device("meta"):
        model = small_config(flavor).build()
    model.to_empty(device="cpu")
    torch.manual_seed(0)
    model.init_weights()
    return model


def packed_tokens() -> torch.Tensor:
    """Four rows of 16 token ids: EOS in the middle, twice, first, last, and not at all."""
    rows = torch.randint(1, VOCAB, (4, SEQ), generator=torch.Generator().manual_seed(1))
    rows[0, 5] = EOS
    rows[1, [3, 9]] = EOS
    rows[2, [0, SEQ - 1]] = EOS
    return rows


def stages(model: torch.nn.Module, pp: int, schedule: str) -> list[torch.nn.Module]:
    """``model`` cut as ``pp`` ranks running ``schedule`` cut it, stages in order."""
    layout = layout_of(
        ParallelismConfig(pipeline_parallel_degree=pp, pipeline_parallel_schedule=schedule),
        n_layers=LAYERS,
    )
    return [split_model(model, modules) for modules in layout.modules]


@pytest.mark.parametrize(("pp", "schedule"), LAYOUTS)
def test_every_stage_builds_the_block_causal_masks_from_the_input_batch(pp, schedule):
    model = small_model("debugmodel_flex_attn")
    assert needs_input_batch(model)
    tokens = packed_tokens()
    parts = stages(model, pp, schedule)
    for part in parts:
        build_masks_from_input_batch(part, eos_id=EOS)
    with torch.no_grad():
        whole = model(tokens, model.attention_masks(tokens, eos_id=EOS))
        h = tokens
        for part in parts:
            h = part(h, **{INPUT_BATCH: tokens})
        assert torch.equal(h, whole)
        # The masks matter here: attending across documents gives other logits.
        assert (model(tokens, {}) - whole).abs().max() > 1e-3
        # A microbatch's rows get the masks of their own token ids.
        h = tokens[2:]
        for part in parts:
            h = part(h, **{INPUT_BATCH: tokens[2:]})
        torch.testing.assert_close(h, whole[2:], rtol=0, atol=1e-5)
        # Without the token ids a later stage cannot tell documents apart, and says so.
        hidden = parts[0](tokens, **{INPUT_BATCH: tokens})
        with pytest.raises(ValueError, match="needs the id of the EOS token"):
            parts[1](hidden)


def test_only_per_document_masks_hand_the_token_ids_to_the_stages():
    with torch.device("meta"):
        assert not needs_input_batch(small_config("debugmodel").build())
        assert needs_input_batch(small_config("debugmodel_flex_attn").build())


def hf_folder(tmp_path, model: torch.nn.Module, *, edit=None):
    """``model`` exported as Hugging Face safetensors in two files under ``tmp_path/hf``;
    ``edit(hf)`` changes the tensors first."""
    adapter = Llama3StateDictAdapter(model_config=small_config("debugmodel"), hf_assets_path=None)
    hf = {key: value.contiguous() for key, value in adapter.to_hf(model.state_dict()).items()}
    if edit is not None:
        edit(hf)
    folder = tmp_path / "hf"
    folder.mkdir()
    keys = sorted(hf)
    for name, half in (("a", keys[::2]), ("b", keys[1::2])):
        save_file({key: hf[key] for key in half}, str(folder / f"model-{name}.safetensors"))
    return folder, adapter


def read_stages(folder, model, adapter, pp, schedule) -> list[dict]:
    """What each stage of the layout reads from ``folder``."""
    parts = stages(model, pp, schedule)
    ranks = [tuple(sorted(part.state_dict())) for part in parts]
    return [
        _read_own(
            str(folder),
            ModelState([part]),
            StageKeys(own=keys, ranks=ranks),
            sd_adapter=adapter,
        )
        for part, keys in zip(parts, ranks, strict=True)
    ]


@pytest.mark.parametrize(("pp", "schedule"), LAYOUTS)
def test_a_stage_reads_its_own_tensors_and_only_those(tmp_path, pp, schedule):
    model = small_model()
    folder, adapter = hf_folder(tmp_path, model)
    read = read_stages(folder, model, adapter, pp, schedule)
    whole = model.state_dict()
    for state, part in zip(read, stages(model, pp, schedule), strict=True):
        assert sorted(state) == sorted(part.state_dict())
        for key, value in state.items():
            assert torch.equal(value, whole[key]), key
    assert sorted(key for state in read for key in state) == sorted(whole)


def _drop(hf):
    del hf["model.layers.4.mlp.down_proj.weight"]


def _extra(hf):
    hf["model.layers.9.mlp.down_proj.weight"] = hf["model.layers.4.mlp.down_proj.weight"].clone()


def _narrow(hf):
    hf["model.norm.weight"] = hf["model.norm.weight"][:32].clone()


@pytest.mark.parametrize(
    ("edit", "text"),
    [
        (_drop, "tensors are missing, e.g. ['layers.4.feed_forward.w2.weight']"),
        (_extra, "has 1 tensors this model lacks, e.g. ['layers.9.feed_forward.w2.weight']"),
        (_narrow, "another shape (1 tensors differ, e.g. norm.weight: saved [32], model [64])"),
    ],
)
def test_files_that_do_not_hold_the_model_are_refused_by_the_stage_that_sees_it(
    tmp_path, edit, text
):
    model = small_model()
    folder, adapter = hf_folder(tmp_path, model, edit=edit)
    with pytest.raises(CheckpointError) as refused:
        read_stages(folder, model, adapter, 2, "1F1B")
    assert text in str(refused.value)


def test_a_folder_without_readable_safetensors_is_refused(tmp_path):
    model = small_model()
    adapter = Llama3StateDictAdapter(model_config=small_config("debugmodel"), hf_assets_path=None)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CheckpointError, match="holds no \\*.safetensors files"):
        read_stages(empty, model, adapter, 2, "1F1B")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(CheckpointError, match="is not a readable safetensors file"):
        read_stages(broken, model, adapter, 2, "1F1B")
