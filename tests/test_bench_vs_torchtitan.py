"""bench/vs_torchtitan.py's table and command line, without training anything.

The bench itself needs ``.venv-upstream`` and minutes of CPU; these checks need neither: every
family row names a legacy TOML that exists and trains the family and flavor the row says, every
row migrates to torchtitan 0.3.0 as the bench migrates it, and the command line's presets and
refusals are what the bench's docstring promises.
"""

from __future__ import annotations

import importlib.util
import sys
import tomllib
from pathlib import Path

import pytest

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
