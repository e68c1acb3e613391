"""A pipeline stage initialised on its own device draws, after skipping the draws of the
modules before it, exactly the weights the whole model draws for its modules (checked here
with the CPU generator, which follows the same rule as an accelerator's)."""

from __future__ import annotations

import copy

import pytest
import torch

from titan.config.configs import ParallelismConfig
from titan.distributed.pipeline_parallel import layout_of, split_model
from titan.models import model_registry
from titan.training.stage_init import init_order, owned_units, skip_earlier_draws

CASES = [
    ("llama3", "debugmodel", 2, "1F1B"),
    ("llama3", "debugmodel", 2, "Interleaved1F1B"),
    ("llama3", "debugmodel", 3, "GPipe"),
    ("qwen3", "debugmodel_moe", 2, "Interleaved1F1B"),
    ("llama4", "debugmodel", 2, "1F1B"),
    ("deepseek_v3", "debugmodel", 2, "1F1B"),
    ("gpt_oss", "debugmodel", 2, "1F1B"),
]


def meta_model(family: str, flavor: str) -> torch.nn.Module:
    """The family's flavor, 5 layers over 256 tokens and rows of up to 64 (MoE layers of 4
    experts), on the meta device."""
    config = copy.deepcopy(model_registry(family, flavor).model)
    config.n_layers, config.vocab_size, config.max_seq_len = 5, 256, 64
    moe = getattr(config.layer, "moe", None)
    if moe is not None:  # 4 small experts: the draws are the same calls, far fewer numbers
        moe.num_experts, moe.top_k, moe.hidden_dim = 4, 2, 64
    with torch.device("meta"):
        return config.build()


@pytest.mark.parametrize(("family", "flavor", "pp", "schedule"), CASES)
def test_each_stage_draws_the_whole_models_weights_for_its_modules(family, flavor, pp, schedule):
    model = meta_model(family, flavor)
    whole = copy.deepcopy(model)
    whole.to_empty(device="cpu")
    torch.manual_seed(0)
    whole.init_weights()
    expected = whole.state_dict()
    layout = layout_of(
        ParallelismConfig(pipeline_parallel_degree=pp, pipeline_parallel_schedule=schedule),
        n_layers=5,
    )
    seen = set()
    for modules in layout.modules:
        stage = split_model(model, modules)
        assert sorted(owned_units(stage)) == sorted(modules)
        stage.to_empty(device="cpu")
        torch.manual_seed(0)
        skipped = skip_earlier_draws(stage, model, device=torch.device("cpu"))
        assert skipped == init_order(model)[: init_order(model).index(modules[0])]
        stage.init_weights()
        for key, value in stage.state_dict().items():
            assert torch.equal(value, expected[key]), key
            seen.add(key)
        # The meta model the stages are cut from is left whole and on meta.
        assert init_order(model) == ["tok_embeddings", *(f"layers.{i}" for i in range(5))] + [
            "norm",
            "output",
        ]
        assert all(p.is_meta for p in model.parameters())
    assert seen == set(expected)  # every tensor of the model, each drawn by its own stage


def test_without_skipping_a_later_stage_would_take_the_embeddings_numbers():
    model = meta_model("llama3", "debugmodel")
    layout = layout_of(ParallelismConfig(pipeline_parallel_degree=2), n_layers=5)
    draws = []
    for skip in (False, True):
        stage = split_model(model, layout.modules[1])
        stage.to_empty(device="cpu")
        torch.manual_seed(0)
        if skip:
            skip_earlier_draws(stage, model, device=torch.device("cpu"))
        stage.init_weights()
        draws.append(stage.state_dict()["layers.3.attention.wq.weight"])
    assert not torch.equal(draws[0], draws[1])
