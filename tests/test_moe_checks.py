"""Mixture-of-experts mistakes are refused alike by ``titan-validate`` (a TOML file and a registry
function), ``titan-train --preflight`` and a run, with one code and one message each.

A TOML names a flavor, so its experts are the flavor's (``schemas/flavor_table.py``): what it can
get wrong is an expert parallel degree that does not divide them. A registry function can change
the MoE config itself: counts below their range (``out-of-range``, declared on ``MoE.Config``),
and routing the model cannot run (``moe-routing``: top_k, group-limited routing).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests.test_train_preflight import preflight
from tests.test_validate_config import run
from tests.training_runs import REPO, run_train

# (family, flavor, --ngpu, EP degree, experts, the degree the hint suggests)
UNEVEN_EP = [
    ("llama4", "debugmodel", None, 3, 8, 2),
    ("qwen3", "30B-A3B", None, 48, 128, 32),
    ("qwen3", "debugmodel_moe", "6", 6, 64, 2),  # 4 divides 64, but not the 6 shards
    ("gpt_oss", "debugmodel", "12", 12, 8, 4),  # 8 does not divide the 12 shards
    ("deepseek_v3", "236B", "6", 6, 160, 2),
]


def _uneven(experts: int, ep: int, suggested: int) -> tuple[str, str]:
    return (
        f"expert parallel degree {ep} does not divide the {experts} routed experts: each "
        "expert-parallel rank holds the same number of whole experts",
        f"use an expert parallel degree that divides {experts}, e.g. {suggested}",
    )


def findings(*argv: str) -> tuple[int, list[dict]]:
    """``titan-validate --format json ARGV``: the exit code and the findings."""
    code, out, err = run("--format", "json", *argv)
    assert "Traceback" not in out + err, out + err
    return code, json.loads(out)["diagnostics"]


def write_registry(folder: Path, body: str) -> Path:
    """``config_registry.py`` in ``folder`` with ``body`` under the imports registry code uses."""
    path = folder / "config_registry.py"
    header = (
        "from titan.config import ParallelismConfig\n"
        "from titan.models.deepseek_v3 import model_registry as deepseek_v3\n"
        "from titan.models.gpt_oss import model_registry as gpt_oss\n"
        "from titan.models.llama4 import model_registry as llama4\n"
        "from titan.models.qwen3 import model_registry as qwen3\n"
        "from titan.trainer import Trainer\n\n\n"
    )
    path.write_text(header + textwrap.dedent(body), encoding="utf-8")
    return path


def moe_registry(folder: Path, family: str, flavor: str, **fields: object) -> Path:
    """A registry function ``mine``: ``family``'s ``flavor`` with its MoE fields changed."""
    changes = "".join(f"    spec.model.layer.moe.{k} = {v!r}\n" for k, v in fields.items())
    return write_registry(
        folder,
        f"def mine():\n    spec = {family}({flavor!r})\n{changes}"
        "    return Trainer.Config(model_spec=spec)\n",
    )


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


# --------------------------------------------------------------------- EP divides the experts


@pytest.mark.parametrize(("family", "flavor", "ngpu", "ep", "experts", "suggested"), UNEVEN_EP)
def test_an_ep_degree_that_does_not_divide_the_experts_is_refused_in_both_forms(
    in_tmp, family, flavor, ngpu, ep, experts, suggested
):
    message, hint = _uneven(experts, ep, suggested)
    gpus = ("--ngpu", ngpu) if ngpu else ()
    (in_tmp / "job.toml").write_text(
        f'[model]\nname = "{family}"\nflavor = "{flavor}"\n'
        f"[parallelism]\nexpert_parallel_degree = {ep}\n",
        encoding="utf-8",
    )
    code, found = findings("job.toml", *gpus)
    assert code == 1
    assert [(d["code"], d["path"], d["message"], d["hint"]) for d in found] == [
        ("expert-parallel", "parallelism.expert_parallel_degree", message, hint)
    ]
    assert found[0]["line"] == 5
    (in_tmp / "job.toml").write_text(
        f'[model]\nname = "{family}"\nflavor = "{flavor}"\n'
        f"[parallelism]\nexpert_parallel_degree = {suggested}\n",
        encoding="utf-8",
    )
    assert findings("job.toml", *gpus) == (0, [])  # the hint's degree runs

    write_registry(
        in_tmp,
        f"""\
        def mine():
            return Trainer.Config(
                model_spec={family}({flavor!r}),
                parallelism=ParallelismConfig(expert_parallel_degree={ep}),
            )
        """,
    )
    code, found = findings("--config", "mine", "--registry", "config_registry.py", *gpus)
    assert code == 1
    assert [(d["code"], d["path"], d["message"], d["hint"]) for d in found] == [
        ("expert-parallel", "parallelism.expert_parallel_degree", message, hint)
    ]
    assert found[0]["line"] == 12  # the keyword that sets it
    fixed = ("--parallelism.expert_parallel_degree", str(suggested))
    assert findings("--config", "mine", "--registry", "config_registry.py", *gpus, *fixed) == (
        0,
        [],
    )


def test_the_experts_counted_are_the_config_trees_not_the_flavors_name(in_tmp):
    """A registry function that gives llama4's debug model 12 experts is checked with 12."""
    moe_registry(in_tmp, "llama4", "debugmodel", num_experts=12)
    argv = ("--config", "mine", "--registry", "config_registry.py", "--ngpu", "8")
    code, found = findings(*argv, "--parallelism.expert_parallel_degree", "8")
    message, hint = _uneven(12, 8, 4)  # 6 divides 12 but not the 8 shards
    assert code == 1
    assert [(d["code"], d["message"], d["hint"]) for d in found] == [
        ("expert-parallel", message, hint)
    ]
    assert findings(*argv, "--parallelism.expert_parallel_degree", "4") == (0, [])


# --------------------------------------------------------------------------- counts in range

COUNTS = [
    ("llama4", "debugmodel", {"num_experts": 0}, "num_experts", "is 0; it must be ≥ 1"),
    ("qwen3", "debugmodel_moe", {"num_experts": -4}, "num_experts", "is -4; it must be ≥ 1"),
    (
        "deepseek_v3",
        "debugmodel",
        {"num_shared_experts": -1},
        "num_shared_experts",
        "is -1; it must be ≥ 0",
    ),
    ("gpt_oss", "debugmodel", {"top_k": 0}, "top_k", "is 0; it must be ≥ 1"),
    (
        "deepseek_v3",
        "debugmodel",
        {"num_expert_groups": 0},
        "num_expert_groups",
        "is 0; it must be ≥ 1",
    ),
    ("llama4", "debugmodel", {"hidden_dim": -8}, "hidden_dim", "is -8; it must be ≥ 1"),
]


@pytest.mark.parametrize(("family", "flavor", "fields", "field", "why"), COUNTS)
def test_an_moe_count_below_its_range_is_out_of_range(in_tmp, family, flavor, fields, field, why):
    moe_registry(in_tmp, family, flavor, **fields)
    code, found = findings("--config", "mine", "--registry", "config_registry.py")
    path = f"model_spec.model.layer.moe.{field}"
    assert code == 1
    assert [(d["code"], d["path"]) for d in found] == [("out-of-range", path)]
    assert found[0]["message"] == f"`{path}` {why}"
    assert found[0]["hint"] == why.rpartition("it ")[2]  # the valid range


# ----------------------------------------------------------------------------- routing

ROUTING = [
    (
        "qwen3",
        "debugmodel_moe",
        {"top_k": 65},
        "top_k",
        "top_k 65 must be between 1 and num_experts 64",
        "route each token to 1 to 64 experts",
        {"top_k": 64},
    ),
    (
        "gpt_oss",
        "debugmodel",
        {"top_k": 9},
        "top_k",
        "top_k 9 must be between 1 and num_experts 8",
        "route each token to 1 to 8 experts",
        {"top_k": 8},
    ),
    (
        "deepseek_v3",
        "debugmodel",
        {"num_expert_groups": 4},
        "num_limited_groups",
        "num_limited_groups must be set when num_expert_groups is set",
        "set num_limited_groups to 1 to 4, or num_expert_groups = None to route over all experts",
        {"num_expert_groups": 4, "num_limited_groups": 4},
    ),
    (
        "deepseek_v3",
        "debugmodel",
        {"num_expert_groups": 4, "num_limited_groups": 5},
        "num_limited_groups",
        "num_limited_groups 5 must be between 1 and num_expert_groups 4",
        "let each token use 1 to 4 groups",
        {"num_expert_groups": 4, "num_limited_groups": 4},
    ),
    (
        "deepseek_v3",
        "debugmodel",
        {"num_expert_groups": 4, "num_limited_groups": 0},
        "num_limited_groups",
        "num_limited_groups 0 must be between 1 and num_expert_groups 4",
        "let each token use 1 to 4 groups",
        {"num_expert_groups": 4, "num_limited_groups": 2},
    ),
    (
        "deepseek_v3",
        "debugmodel",
        {"num_expert_groups": 3, "num_limited_groups": 1},
        "num_expert_groups",
        "num_experts 8 is not divisible by num_expert_groups 3",
        "use a number of groups that divides 8 into groups of 2 or more, e.g. 2",
        {"num_expert_groups": 2, "num_limited_groups": 1},
    ),
    (
        "deepseek_v3",
        "debugmodel",
        {"num_expert_groups": 8, "num_limited_groups": 2},
        "num_expert_groups",
        "group-limited routing needs at least 2 experts per group, got 1 "
        "(num_experts 8 / num_expert_groups 8)",
        "use a number of groups that divides 8 into groups of 2 or more, e.g. 4",
        {"num_expert_groups": 4, "num_limited_groups": 2},
    ),
    (
        "deepseek_v3",
        "debugmodel",
        {"num_expert_groups": 4, "num_limited_groups": 1},  # top_k 3 of the flavor
        "top_k",
        "top_k 3 is more than the 2 experts that num_limited_groups 1 groups of 2 hold",
        "raise num_limited_groups to 2, or lower top_k to 2",
        {"num_expert_groups": 4, "num_limited_groups": 2},
    ),
]


@pytest.mark.parametrize(
    ("family", "flavor", "fields", "field", "message", "hint", "fixed"), ROUTING
)
def test_routing_the_model_cannot_run_is_refused(
    in_tmp, family, flavor, fields, field, message, hint, fixed
):
    moe_registry(in_tmp, family, flavor, **fields)
    code, found = findings("--config", "mine", "--registry", "config_registry.py")
    assert code == 1
    assert [(d["code"], d["path"], d["message"], d["hint"]) for d in found] == [
        ("moe-routing", f"model_spec.model.layer.moe.{field}", message, hint)
    ]
    moe_registry(in_tmp, family, flavor, **fixed)  # as the hint says
    assert findings("--config", "mine", "--registry", "config_registry.py") == (0, [])


def test_the_model_build_refuses_with_the_same_words():
    """The one rule (``titan.schemas.expert_rules.moe_routing_problem``) is what the MoE module raises."""
    import torch

    from titan.models.common.moe import MoE

    for _, _, fields, field, message, hint, _ in ROUTING[2:]:
        config = MoE.Config(num_experts=8, top_k=3, **fields)
        with pytest.raises(ValueError) as raised, torch.device("meta"):
            config.build(dim=16, hidden_dim=32)
        assert str(raised.value) == f"moe.{field}: {message}; hint: {hint}"


# ------------------------------------------------------------------ pre-flight and the run


def test_preflight_refuses_an_uneven_ep_degree_in_both_forms(capsys, in_tmp):
    message, hint = _uneven(8, 6, 2)
    toml = str(REPO / "legacy_configs" / "llama4" / "debug_model.toml")
    for form in (["--job.config_file", toml], ["--config", "llama4_debugmodel"]):
        code, out, err = preflight(
            capsys, "--ngpu", "6", *form, "--parallelism.expert_parallel_degree", "6"
        )
        assert (code, out) == (1, ""), err
        assert f"error[expert-parallel] {message}" in err
        assert hint in err
        assert "Traceback" not in err and "bug in titan" not in err


def test_preflight_refuses_routing_and_counts_before_building(capsys, in_tmp):
    moe_registry(in_tmp, "deepseek_v3", "debugmodel", num_expert_groups=4, num_limited_groups=1)
    code, out, err = preflight(capsys, "--registry", "config_registry.py", "--config", "mine")
    assert (code, out) == (1, "")
    assert "error[moe-routing] top_k 3 is more than the 2 experts" in err
    moe_registry(in_tmp, "llama4", "debugmodel", num_shared_experts=-1)
    code, out, err = preflight(capsys, "--registry", "config_registry.py", "--config", "mine")
    assert (code, out) == (1, "")
    assert (
        "error[out-of-range] `model_spec.model.layer.moe.num_shared_experts` is -1; it must be ≥ 0"
        in err
    )
    assert "Traceback" not in err and "bug in titan" not in err


def test_a_run_refuses_with_the_same_finding(in_tmp):
    moe_registry(in_tmp, "gpt_oss", "debugmodel", top_k=9)
    dump = in_tmp / "out"
    done = run_train(
        ["--registry", "config_registry.py", "--config", "mine", "--dump_folder", str(dump)],
        cwd=in_tmp,
        timeout=300,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "error[moe-routing] top_k 9 must be between 1 and num_experts 8" in output
    assert "Traceback" not in output
    assert not dump.exists()
