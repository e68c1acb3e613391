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

REPO = pathlib.Path(__file__).resolve().parents[1]

# The flavor lists of shared/reference/schema_v022.md, section [model], in torchtitan's order.
EXPECTED = {
    "llama3": (
        "debugmodel",
        "debugmodel_flex_attn",
        "debugmodel_varlen_attn",
        "8B",
        "8B_flex",
        "8B_varlen",
        "70B",
        "405B",
    ),
    "llama4": (
        "debugmodel",
        "17bx16e",
        "17bx128e",
        "debugmodel_irope",
        "17bx16e_irope",
        "17bx128e_irope",
    ),
    "qwen3": (
        "debugmodel",
        "0.6B",
        "1.7B",
        "4B",
        "8B",
        "14B",
        "32B",
        "debugmodel_moe",
        "30B-A3B",
        "235B-A22B",
    ),
    "deepseek_v3": ("debugmodel", "debugmodel_flex_attn", "16B", "236B", "671B"),
    "gpt_oss": ("debugmodel", "20b", "120b"),
    "flux": ("flux-dev", "flux-schnell", "flux-debug"),
}

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
def test_the_args_rebuild_the_config_the_family_defines(f: Flavor) -> None:
    # The table's args are what a legacy TOML's flavor means; read back through the family's
    # own converter they must give exactly the config tree its flavor factory builds.
    family = importlib.import_module(f"titan.models.{f.family}.flavors")
    model_config = importlib.import_module(f"titan.models.{f.family}.model_config")
    assert model_config.config_from_args(f.args) == family.FLAVORS[f.name]()


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
        assert f.args["moe_args"]["num_experts"] > 1


@pytest.mark.parametrize("f", ALL, ids=IDS)
def test_args_are_plain_data(f: Flavor) -> None:
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

    check(f.args)


def test_flavors_do_not_share_nested_dicts() -> None:
    # A consumer that edits one flavor's nested args must not change another flavor.
    seen: dict[int, str] = {}
    for f in ALL:
        for key, value in f.args.items():
            if isinstance(value, dict):
                owner = seen.setdefault(id(value), f"{f.family}/{f.name}.{key}")
                assert owner == f"{f.family}/{f.name}.{key}"


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
    assert (f.args["dim"], f.args["n_layers"]) == (dim, n_layers)
    assert (f.n_heads, f.n_kv_heads) == (n_heads, n_kv_heads)
    assert (f.args["n_heads"], f.args["n_kv_heads"]) == (n_heads, n_kv_heads)
    assert f.args["vocab_size"] == 128256
    assert f.args["rope_theta"] == 500000


def test_llama3_variants_and_defaults() -> None:
    base, flex, varlen = (flavor("llama3", n) for n in ("8B", "8B_flex", "8B_varlen"))
    assert base and flex and varlen
    assert (base.args["attn_type"], base.args["attn_mask_type"]) == ("sdpa", "causal")
    assert (flex.args["attn_type"], flex.args["attn_mask_type"]) == ("flex", "block_causal")
    assert (varlen.args["attn_type"], varlen.args["attn_mask_type"]) == ("varlen", "block_causal")
    assert {k: v for k, v in flex.args.items() if base.args[k] != v} == {
        "attn_type": "flex",
        "attn_mask_type": "block_causal",
    }
    assert base.args["ffn_dim_multiplier"] == 1.3 and base.args["multiple_of"] == 1024
    assert base.args["max_seq_len"] == 131072
    assert base.args["rope_scaling_args"]["scaling_factor"] == 8.0
    debug = flavor("llama3", "debugmodel")
    assert debug is not None
    # n_kv_heads is not written, so the args keep None and the Flavor reports n_heads.
    assert debug.args["n_kv_heads"] is None and debug.n_kv_heads == debug.n_heads == 16


def test_other_families_spot_checks() -> None:
    q = flavor("qwen3", "30B-A3B")
    assert q is not None
    assert (q.args["dim"], q.args["n_layers"], q.n_heads, q.n_kv_heads) == (2048, 48, 32, 4)
    assert q.args["moe_args"]["num_experts"] == 128 and q.args["moe_args"]["top_k"] == 8
    ds = flavor("deepseek_v3", "671B")
    assert ds is not None
    assert (ds.args["dim"], ds.args["n_layers"], ds.args["n_dense_layers"]) == (7168, 61, 3)
    assert ds.args["moe_args"]["num_experts"] == 256 and ds.args["vocab_size"] == 129280
    assert ds.n_kv_heads == ds.n_heads == 128  # MLA: one K/V per query head
    oss = flavor("gpt_oss", "120b")
    assert oss is not None
    assert (oss.args["n_layers"], oss.args["moe_args"]["num_experts"]) == (36, 128)
    l4 = flavor("llama4", "17bx128e")
    assert l4 is not None
    assert (l4.args["dim"], l4.n_heads, l4.n_kv_heads) == (5120, 40, 8)
    # 17bx128e does not write interleave_moe_layer_step, so every second layer is MoE.
    assert l4.args["interleave_moe_layer_step"] == 2
    fx = flavor("flux", "flux-dev")
    assert fx is not None
    assert (fx.args["hidden_size"], fx.args["depth"], fx.n_heads) == (3072, 19, 24)


def test_alias_resolves_to_llama3() -> None:
    assert FAMILY_ALIASES == {"llama3_ft": "llama3"}
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
