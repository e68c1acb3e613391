"""bench/vs_torchtitan.py's table and command line, without training anything.

The bench itself needs ``.venv-upstream`` and minutes of CPU; these checks need neither: every
family row names a legacy TOML that exists and trains the family and flavor the row says, every
row migrates to torchtitan 0.3.0 as the bench migrates it, the command line's presets and
refusals are what the bench's docstring promises, and the shim's causal-SDPA switch
(``--upstream-attention sdpa``) computes causal attention and refuses anything else clearly.
"""

from __future__ import annotations

import importlib.util
import sys
import tomllib
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import AuxRequest, create_block_mask

REPO = Path(__file__).resolve().parents[1]


def _bench():
    path = REPO / "bench" / "vs_torchtitan.py"
    spec = importlib.util.spec_from_file_location("bench_vs_torchtitan", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being made
    spec.loader.exec_module(module)
    return module


bench = _bench()


@pytest.mark.parametrize("family", bench.FAMILIES, ids=lambda family: family.name)
def test_each_row_names_a_toml_of_its_family_and_flavor(family):
    toml = tomllib.loads((REPO / family.toml).read_text(encoding="utf-8"))
    assert (toml["model"]["name"], toml["model"]["flavor"]) == (family.name, family.flavor)


def test_rows_are_unique_families():
    names = [family.name for family in bench.FAMILIES]
    assert len(names) == len(set(names))
    assert "llama3" in names


@pytest.mark.parametrize("family", bench.FAMILIES, ids=lambda family: family.name)
def test_each_row_migrates_to_one_upstream_function(family, tmp_path):
    function = bench._migrate(family, tmp_path)
    text = (tmp_path / bench.UPSTREAM_MODULE).read_text(encoding="utf-8")
    assert f"def {function}() -> Trainer.Config:" in text
    assert f'model_registry("{family.flavor}")' in text


def test_defaults_are_llama3_at_4_by_256_for_12_steps():
    args = bench.parse_args([])
    assert (args.family, args.batch, args.seq_len, args.steps) == ("llama3", 4, 256, 12)
    assert (args.warmup, args.rel_tol, args.later_rel_tol, args.threads) == (2, 1e-5, 1e-4, 1)
    assert args.upstream_attention == "flex" and args.worker is None


def test_the_small_shape_and_explicit_sizes():
    assert (bench.parse_args(["--shape", "small"]).batch, bench.parse_args([]).seq_len) == (2, 256)
    args = bench.parse_args(["--shape", "small", "--seq-len", "32"])
    assert (args.batch, args.seq_len) == (2, 32)


def test_every_family_and_all_are_choices():
    for name in [family.name for family in bench.FAMILIES] + ["all"]:
        assert bench.parse_args(["--family", name]).family == name


@pytest.mark.parametrize(
    "argv",
    [
        ["--steps", "2", "--warmup", "2"],  # nothing left to time
        ["--batch", "0"],
        ["--family", "flux"],
        ["stray"],  # a folder only goes with --worker
        ["--worker", "titan"],  # and --worker needs one
    ],
)
def test_bad_command_lines_are_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.parse_args(argv)
    assert exit_info.value.code == 2
    assert "error:" in capsys.readouterr().err


def causal_sdpa_in_place_of_flex(monkeypatch):
    """The function ``upstream_shim.use_causal_sdpa`` puts in 0.3.0's flex attention's place.

    titan's environment has no torchtitan, so the one module the switch patches is a stand-in
    holding a ``FlexAttention`` class; the switch's checks are the shim's own.
    """
    stand_ins = {}
    for name in ("torchtitan", "torchtitan.models", "torchtitan.models.common"):
        stand_ins[name] = types.ModuleType(name)
    attention = types.ModuleType("torchtitan.models.common.attention")
    attention.FlexAttention = type("FlexAttention", (), {})
    stand_ins["torchtitan.models.common"].attention = attention
    stand_ins[attention.__name__] = attention
    for name, module in stand_ins.items():
        monkeypatch.setitem(sys.modules, name, module)
    spec = importlib.util.spec_from_file_location(
        "upstream_shim", REPO / "bench" / "upstream_shim.py"
    )
    shim = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, shim)  # its dataclasses look it up
    spec.loader.exec_module(shim)
    shim.use_causal_sdpa()
    return attention.FlexAttention.compiled_flex_attn


def flex_call(*, mask_mod, score_mod=None, lse=False):
    """Query, key, value and the keywords 0.3.0's FlexAttention passes, for 2 heads of 8 rows."""
    q, k, v = torch.randn(3, 1, 2, 8, 4, generator=torch.Generator().manual_seed(0))
    return (q, k, v), {
        "score_mod": score_mod,
        "block_mask": create_block_mask(mask_mod, 1, None, 8, 8, device="cpu"),
        "scale": None,
        "enable_gqa": False,
        "return_aux": AuxRequest(lse=lse),
        "kernel_options": {},
    }


def causal(batch, head, q_index, kv_index):
    """The plain causal mask."""
    return q_index >= kv_index


def test_causal_sdpa_computes_causal_attention(monkeypatch):
    tensors, keywords = flex_call(mask_mod=causal)
    out, aux = causal_sdpa_in_place_of_flex(monkeypatch)(*tensors, **keywords)
    assert aux is None
    assert torch.equal(out, F.scaled_dot_product_attention(*tensors, is_causal=True))


@pytest.mark.parametrize(
    ("mask_mod", "extra", "message"),
    [
        (lambda b, h, q, kv: q >= kv, {"score_mod": lambda score, *index: score}, "score modifier"),
        (causal, {"lse": True}, "log-sum-exp"),
        (lambda b, h, q, kv: (q >= kv) & (kv >= 4), {}, "not plain causal"),
    ],
    ids=["score_mod", "lse", "document_mask"],
)
def test_causal_sdpa_refuses_what_it_cannot_compute(monkeypatch, mask_mod, extra, message):
    tensors, keywords = flex_call(mask_mod=mask_mod, **extra)
    with pytest.raises(ValueError, match=message):
        causal_sdpa_in_place_of_flex(monkeypatch)(*tensors, **keywords)
