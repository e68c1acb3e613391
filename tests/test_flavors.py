"""Tests for ``titan.schemas.flavors``: the flavor lists, head and MoE facts, and well-known numbers."""

from __future__ import annotations

import dataclasses
import importlib
import pathlib
import subprocess
import sys

import pytest
from titan.schemas import flavor_codegen
from titan.schemas.flavor_table import FLAVOR_TABLE
from titan.schemas.flavors import FAMILY_ALIASES, FLAVORS, Flavor, flavor, flavor_names

import titan.models
from tests import v022_flavors

REPO = pathlib.Path(__file__).resolve().parents[1]

EXPECTED = {family: v022_flavors.flavor_names(family) for family in v022_flavors.families()}
"""The v0.2.2 flavor lists (shared/reference/schema_v022.md, section [model]), frozen."""

ALL = [f for table in FLAVORS.values() for f in table.values()]
IDS = [f"{f.family}/{f.name}" for f in ALL]
MOE = {
    ("qwen3", "debugmodel_moe"),
    ("qwen3", "30B-A3B"),
    ("qwen3", "235B-A22B"),
    *(("deepseek_v3", n) for n in EXPECTED["deepseek_v3"]),
    *(("llama4", n) for n in EXPECTED["llama4"]),
    *(("gpt_oss", n) for n in EXPECTED["gpt_oss"]),
}


def test_the_table_is_generated_from_the_families_flavors() -> None:
    namespace: dict = {}
    exec(flavor_codegen.generate(), namespace)
    assert namespace["FLAVOR_TABLE"] == FLAVOR_TABLE, "stale: run `make schema`"
    assert tuple(FLAVOR_TABLE) == flavor_codegen.families()


@pytest.mark.parametrize("f", ALL, ids=IDS)
def test_every_flavor_builds_its_frozen_v022_config_tree(f: Flavor) -> None:
    # Each flavor factory must still build the tree that stood for v0.2.2's args when the file
    # was written (fields added since, with their defaults, are not compared).
    family = importlib.import_module(f"titan.models.{f.family}.flavors")
    assert v022_flavors.changed_leaves(f.family, f.name, family.FLAVORS[f.name]()) == {}


@pytest.mark.parametrize("f", ALL, ids=IDS)
def test_the_table_states_what_the_v022_args_say(f: Flavor) -> None:
    args = v022_flavors.args(f.family, f.name)
    assert f.n_layers == args.get("n_layers")
    assert f.attn_type == args.get("attn_type", "sdpa")  # flux: v0.2.2 ran SDPA
    routing = args.get("moe_args") if f.moe else None
    assert f.routing == (None if routing is None else {k: routing[k] for k in f.routing})
    assert f.n_heads == args.get("n_heads", args.get("num_heads"))


def test_a_changed_flavor_is_reported_by_its_leaves() -> None:
    config = importlib.import_module("titan.models.llama3.flavors").FLAVORS["8B"]()
    config.layer.attention.n_kv_heads = 4
    config.rope.theta = 10000.0
    changed = v022_flavors.changed_leaves("llama3", "8B", config)
    assert changed == {
        "layer.attention.n_kv_heads": (8, 4),
        "rope.theta": (500000, 10000.0),  # an int frozen, a float now: a change of type too
    }
    config.layer.moe = importlib.import_module("titan.models.common.moe").MoE.Config()
    assert "layer.moe" in v022_flavors.changed_leaves("llama3", "8B", config)


def test_every_family_has_exactly_the_v022_flavors() -> None:
    assert {family: tuple(table) for family, table in FLAVORS.items()} == EXPECTED
    for family, names in EXPECTED.items():
        assert flavor_names(family) == names


@pytest.mark.parametrize("f", ALL, ids=IDS)
def test_entry_is_keyed_by_its_own_family_and_name(f: Flavor) -> None:
    assert FLAVORS[f.family][f.name] is f
    assert flavor(f.family, f.name) is f


@pytest.mark.parametrize("f", ALL, ids=IDS)
def test_kv_heads_divide_heads(f: Flavor) -> None:
    if f.n_heads is not None and f.n_kv_heads is not None:
        assert f.n_heads % f.n_kv_heads == 0


@pytest.mark.parametrize("f", ALL, ids=IDS)
def test_moe_flags(f: Flavor) -> None:
    assert f.moe is ((f.family, f.name) in MOE)
    if f.moe:
        assert f.routing is not None and f.routing["num_experts"] > 1


@pytest.mark.parametrize("f", ALL, ids=IDS)
def test_facts_are_plain_data(f: Flavor) -> None:
    def check(value: object) -> None:
        if isinstance(value, dict):
            assert all(isinstance(k, str) for k in value)
            for v in value.values():
                check(v)
        elif isinstance(value, tuple):
            for v in value:
                check(v)
        else:
            assert value is None or type(value) in (bool, int, float, str), repr(value)

    check({slot: getattr(f, slot) for slot in Flavor.__slots__})


def test_flavors_do_not_share_nested_dicts() -> None:
    # A consumer that edits one flavor's nested args must not change another flavor.
    seen: dict[int, str] = {}
    for f in ALL:
        if f.routing is not None:
            assert seen.setdefault(id(f.routing), f"{f.family}/{f.name}") == f"{f.family}/{f.name}"


def test_flavor_is_frozen() -> None:
    f = flavor("llama3", "8B")
    assert f is not None
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.name = "9B"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("name", "dim", "n_layers", "n_heads", "n_kv_heads"),
    [("8B", 4096, 32, 32, 8), ("70B", 8192, 80, 64, 8), ("405B", 16384, 126, 128, 8)],
)
def test_llama3_well_known_sizes(
    name: str, dim: int, n_layers: int, n_heads: int, n_kv_heads: int
) -> None:
    f = flavor("llama3", name)
    assert f is not None
    args = v022_flavors.args("llama3", name)
    assert (args["dim"], args["n_layers"], f.n_layers) == (dim, n_layers, n_layers)
    assert (f.n_heads, f.n_kv_heads) == (n_heads, n_kv_heads)
    assert (args["n_heads"], args["n_kv_heads"]) == (n_heads, n_kv_heads)
    assert args["vocab_size"] == 128256
    assert args["rope_theta"] == 500000


def v022(f: Flavor) -> dict:
    """The frozen v0.2.2 model args of ``f``."""
    return v022_flavors.args(f.family, f.name)


def test_llama3_variants_and_defaults() -> None:
    base, flex, varlen = (flavor("llama3", n) for n in ("8B", "8B_flex", "8B_varlen"))
    assert base and flex and varlen
    assert (v022(base)["attn_type"], v022(base)["attn_mask_type"]) == ("sdpa", "causal")
    assert (v022(flex)["attn_type"], v022(flex)["attn_mask_type"]) == ("flex", "block_causal")
    assert (v022(varlen)["attn_type"], v022(varlen)["attn_mask_type"]) == ("varlen", "block_causal")
    assert {k: v for k, v in v022(flex).items() if v022(base)[k] != v} == {
        "attn_type": "flex",
        "attn_mask_type": "block_causal",
    }
    assert v022(base)["ffn_dim_multiplier"] == 1.3 and v022(base)["multiple_of"] == 1024
    assert v022(base)["max_seq_len"] == 131072
    assert v022(base)["rope_scaling_args"]["scaling_factor"] == 8.0
    debug = flavor("llama3", "debugmodel")
    assert debug is not None
    # n_kv_heads is not written, so the args keep None and the table reports n_heads.
    assert v022(debug)["n_kv_heads"] is None and debug.n_kv_heads == debug.n_heads == 16


def test_other_families_spot_checks() -> None:
    q = flavor("qwen3", "30B-A3B")
    assert q is not None
    assert (v022(q)["dim"], v022(q)["n_layers"], q.n_heads, q.n_kv_heads) == (2048, 48, 32, 4)
    assert v022(q)["moe_args"]["num_experts"] == 128 and v022(q)["moe_args"]["top_k"] == 8
    ds = flavor("deepseek_v3", "671B")
    assert ds is not None
    assert (v022(ds)["dim"], v022(ds)["n_layers"], v022(ds)["n_dense_layers"]) == (7168, 61, 3)
    assert v022(ds)["moe_args"]["num_experts"] == 256 and v022(ds)["vocab_size"] == 129280
    assert ds.n_kv_heads == ds.n_heads == 128  # MLA: one K/V per query head
    oss = flavor("gpt_oss", "120b")
    assert oss is not None
    assert (v022(oss)["n_layers"], v022(oss)["moe_args"]["num_experts"]) == (36, 128)
    l4 = flavor("llama4", "17bx128e")
    assert l4 is not None
    assert (v022(l4)["dim"], l4.n_heads, l4.n_kv_heads) == (5120, 40, 8)
    # 17bx128e does not write interleave_moe_layer_step, so every second layer is MoE.
    assert v022(l4)["interleave_moe_layer_step"] == 2
    fx = flavor("flux", "flux-dev")
    assert fx is not None
    assert (v022(fx)["hidden_size"], v022(fx)["depth"], fx.n_heads) == (3072, 19, 24)


def test_alias_resolves_to_llama3() -> None:
    assert FAMILY_ALIASES == titan.models.FAMILY_ALIASES  # the records' aliases
    assert FAMILY_ALIASES["llama3_ft"] == "llama3"
    assert flavor("llama3_ft", "8B") is flavor("llama3", "8B")
    assert flavor_names("llama3_ft") == EXPECTED["llama3"]


def test_unknown_family_or_flavor() -> None:
    assert flavor("llama3", "9B") is None
    assert flavor("llama5", "8B") is None
    assert flavor_names("llama5") is None
    assert flavor_names("simple_fsdp.llama3") is None


def test_import_does_not_pull_in_torch() -> None:
    code = "import sys, titan.schemas.flavors; print('torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"
