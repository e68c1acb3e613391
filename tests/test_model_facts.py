"""Facts a model config tree states about itself (heads, experts, FLOPs), and the cross-field
rules of ``titan-validate --config`` fed from the tree rather than from the flavor's name."""

from __future__ import annotations

import io
import json
import textwrap

import pytest
from titan.schemas.flavors import flavor

from tests import v022_flavors
from titan.cli import validate
from titan.models import model_registry
from titan.models.common.moe import MoE
from titan.protocols.module import AttentionHeads


def findings(*argv: str) -> list[dict]:
    """The diagnostics ``titan-validate`` reports for ``argv``, as JSON objects."""
    out, err = io.StringIO(), io.StringIO()
    validate.run([*argv, "--format", "json"], stdout=out, stderr=err)
    assert err.getvalue() == ""
    return json.loads(out.getvalue())["diagnostics"]


@pytest.fixture
def registry(tmp_path, monkeypatch):
    """Write ``body`` (functions) into a config_registry.py in the working folder."""
    monkeypatch.chdir(tmp_path)

    def write(body: str) -> None:
        header = (
            "from titan.config import ParallelismConfig\n"
            "from titan.models.common.moe import MoE\n"
            "from titan.models.llama3 import model_registry as llama3\n"
            "from titan.models.qwen3 import model_registry as qwen3\n"
            "from titan.trainer import Trainer\n\n\n"
        )
        (tmp_path / "config_registry.py").write_text(header + textwrap.dedent(body))

    return write


def codes(found: list[dict], code: str) -> list[dict]:
    return [d for d in found if d["code"] == code]


# ----------------------------------------------------------------------------- the tree's facts


@pytest.mark.parametrize("family", v022_flavors.families())
def test_every_flavor_states_the_heads_and_experts_its_args_say(family):
    for name in v022_flavors.flavor_names(family):
        model = model_registry(family, name).model
        found = flavor(family, name)
        heads = model.attention_heads()
        if family == "flux":
            assert heads == AttentionHeads(n_heads=found.n_heads, n_kv_heads=found.n_heads)
            assert not model.has_moe()
            continue
        args = v022_flavors.args(family, name)
        n_kv = args.get("n_kv_heads") or args["n_heads"]  # MLA and MHA: one kv head per head
        assert heads == AttentionHeads(n_heads=args["n_heads"], n_kv_heads=n_kv)
        assert model.has_moe() == found.moe


def test_an_edited_tree_states_its_own_facts():
    dense = model_registry("llama3", "debugmodel").model
    assert dense.has_moe() is False
    dense.layer.moe = MoE.Config(hidden_dim=64)
    assert dense.has_moe() is True
    moe = model_registry("qwen3", "debugmodel_moe").model
    assert moe.has_moe() is True
    moe.layer.moe = None
    assert moe.has_moe() is False
    moe.layer.attention.n_kv_heads = 1
    assert moe.attention_heads().n_kv_heads == 1


# ----------------------------------------------------------------------------- FLOPs


def test_dense_flops_are_six_per_non_embedding_parameter_plus_attention():
    model = model_registry("llama3", "debugmodel").model
    heads, head_dim = model.layer.attention.n_heads, model.dim // model.layer.attention.n_heads
    non_embedding = model.num_params() - model.vocab_size * model.dim
    attention = 12 * model.n_layers * heads * head_dim * 64
    assert model.flops_per_token(64) == 6 * non_embedding + attention


def test_moe_flops_count_only_the_experts_a_token_runs_through():
    model = model_registry("qwen3", "debugmodel_moe").model
    moe, dim = model.layer.moe, model.dim
    hidden = model.layer.moe_hidden_dim(dim)
    dense_twin = model_registry("qwen3", "debugmodel_moe").model
    dense_twin.layer.moe.num_experts = moe.top_k  # the same model with only the active experts
    # The router still scores every expert, in every layer.
    router_gap = dim * (moe.num_experts - moe.top_k) * model.n_layers
    assert moe.num_experts > moe.top_k
    assert model.flops_per_token(64) == dense_twin.flops_per_token(64) + 6 * router_gap
    every_expert = 6 * 3 * dim * hidden * (moe.num_experts - moe.top_k) * model.n_layers
    assert (
        model.flops_per_token(64) + every_expert
        == 6 * (model.num_params() - model.vocab_size * dim)
        + 6
        * model.n_layers
        * model.layer.attention.n_heads
        * 2
        * model.layer.attention.head_dim
        * 64
    )


def test_tied_output_weights_are_not_counted_twice():
    untied = model_registry("qwen3", "debugmodel").model
    tied = model_registry("qwen3", "debugmodel").model
    untied.enable_weight_tying, tied.enable_weight_tying = False, True
    gap = untied.flops_per_token(32) - tied.flops_per_token(32)
    assert gap == 6 * untied.vocab_size * untied.dim


# ----------------------------------------------------------------------------- the rules


def test_tp_that_does_not_divide_the_edited_heads_is_found(registry):
    registry(
        """\
        def six_heads():
            spec = llama3("debugmodel")
            spec.model.layer.attention.n_heads = spec.model.layer.attention.n_kv_heads = 6
            return Trainer.Config(
                model_spec=spec, parallelism=ParallelismConfig(tensor_parallel_degree=4)
            )
        """
    )
    (finding,) = codes(findings("--config", "six_heads"), "tp-heads")
    assert "does not divide the 6 attention heads" in finding["message"]
    assert finding["path"] == "parallelism.tensor_parallel_degree"


def test_tp_that_divides_the_query_heads_but_not_the_grouped_kv_heads_is_found(registry):
    registry(
        """\
        def grouped():
            spec = llama3("debugmodel")
            spec.model.layer.attention.n_heads, spec.model.layer.attention.n_kv_heads = 8, 2
            return Trainer.Config(
                model_spec=spec, parallelism=ParallelismConfig(tensor_parallel_degree=4)
            )


        def fits():
            spec = llama3("debugmodel")
            spec.model.layer.attention.n_heads, spec.model.layer.attention.n_kv_heads = 8, 4
            return Trainer.Config(
                model_spec=spec, parallelism=ParallelismConfig(tensor_parallel_degree=4)
            )
        """
    )
    (finding,) = codes(findings("--config", "grouped"), "tp-heads")
    assert "does not divide the 2 key/value heads" in finding["message"]
    assert codes(findings("--config", "fits"), "tp-heads") == []


def test_expert_parallel_needs_experts_in_the_tree_not_in_the_flavor_name(registry):
    registry(
        """\
        def dense_flavor():
            return Trainer.Config(
                model_spec=llama3("debugmodel"),
                parallelism=ParallelismConfig(expert_parallel_degree=2),
            )


        def dense_flavor_given_experts():
            spec = llama3("debugmodel")
            spec.model.layer.moe = MoE.Config(hidden_dim=64)
            return Trainer.Config(
                model_spec=spec, parallelism=ParallelismConfig(expert_parallel_degree=2)
            )


        def moe_flavor_without_experts():
            spec = qwen3("debugmodel_moe")
            spec.model.layer.moe = None
            return Trainer.Config(
                model_spec=spec, parallelism=ParallelismConfig(expert_parallel_degree=2)
            )


        def moe_flavor():
            return Trainer.Config(
                model_spec=qwen3("debugmodel_moe"),
                parallelism=ParallelismConfig(expert_parallel_degree=2),
            )
        """
    )
    for name, refused in (
        ("dense_flavor", True),
        ("dense_flavor_given_experts", False),
        ("moe_flavor_without_experts", True),
        ("moe_flavor", False),
    ):
        found = codes(findings("--config", name, "--ngpu", "8"), "expert-parallel")
        assert bool(found) == refused, (name, found)
        if refused:
            assert "which has no experts" in found[0]["message"]


def test_an_ep_layout_that_cannot_be_formed_is_found_alike_in_both_forms(registry, tmp_path):
    registry(
        """\
        def three_way_ep():
            return Trainer.Config(
                model_spec=qwen3("debugmodel_moe"),
                parallelism=ParallelismConfig(expert_parallel_degree=3),
            )
        """
    )
    (from_registry,) = codes(findings("--config", "three_way_ep", "--ngpu", "8"), "expert-parallel")
    (tmp_path / "job.toml").write_text(
        '[model]\nname = "qwen3"\nflavor = "debugmodel_moe"\n\n'
        "[parallelism]\nexpert_parallel_degree = 3\n"
    )
    (from_toml,) = codes(findings("job.toml", "--ngpu", "8"), "expert-parallel")
    assert from_registry["message"] == from_toml["message"]
    assert "must divide dp_shard × cp × tp = 8" in from_registry["message"]
