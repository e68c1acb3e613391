"""Expert parallel (EP): the layout ParallelDims forms (with the rule titan-validate reports), and,
under torchrun on gloo, MoE models whose experts are split over ranks training like one process.

The fast tests build no process group. The slow ones launch real processes: the tiny MoE of each
family against one process (``dist_scripts/expert_parallel_check.py``: losses, gradients,
weights after AdamW, and the load-balancing bias bitwise), then ``titan-train`` itself on a
small qwen3 MoE (EP against FSDP alone, and a bitwise resume under EP).
"""

from __future__ import annotations

import dataclasses
import io
import shutil
import subprocess
import sys

import pytest
from titan.schemas.expert_rules import expert_layout_problem

from tests.test_qwen3_train import SMALL_MOE
from tests.training_runs import REPO, SEED, Run, child_env, loss_bits, titan_train
from titan.cli import validate
from titan.config.configs import ParallelismConfig
from titan.distributed.parallel_dims import ParallelDims

CHECK = REPO / "tests" / "dist_scripts" / "expert_parallel_check.py"


def dims(world_size: int, **degrees) -> ParallelDims:
    return ParallelDims.from_config(ParallelismConfig(**degrees), world_size=world_size)


@pytest.mark.parametrize(
    ("world_size", "degrees", "names", "halves"),
    [
        # EP takes both FSDP ranks; the experts' FSDP dimension stays, of size 1.
        (2, {"expert_parallel_degree": 2}, ("dp_shard_mod_ep", "dp_shard_in_ep"), (1, 2)),
        (8, {"expert_parallel_degree": 2}, ("dp_shard_mod_ep", "dp_shard_in_ep"), (4, 2)),
        (
            8,
            {"expert_parallel_degree": 4, "data_parallel_replicate_degree": 2},
            ("dp_replicate", "dp_shard_mod_ep", "dp_shard_in_ep"),
            (1, 4),
        ),
    ],
)
def test_ep_borrows_from_the_shard_dimension(world_size, degrees, names, halves):
    got = dims(world_size, **degrees)
    assert got.ep_enabled and not got.etp_enabled
    assert got.mesh_dim_names == names
    assert (got.dp_shard_mod_ep, got.dp_shard_in_ep) == halves
    assert got.dp_shard_mod_ep * got.dp_shard_in_ep == got.dp_shard
    # Dense parameters still shard over all of dp_shard; experts over what EP leaves.
    assert got.fsdp_mesh_dim_names[-1] == "dp_shard"
    assert got.expert_fsdp_mesh_dim_names[-1] == "dp_shard_mod_ep"
    assert got.fsdp_gradient_divide_factor == got.dp_degree


def test_without_ep_nothing_changes():
    plain = dims(4, tensor_parallel_degree=2)
    assert not plain.ep_enabled and plain.mesh_dim_names == ("dp_shard", "tp")
    assert (plain.dp_shard_mod_ep, plain.dp_shard_in_ep) == (2, 1)


@pytest.mark.parametrize(
    ("world_size", "degrees", "fact"),
    [
        (4, {"expert_parallel_degree": 3}, "ep"),
        (8, {"expert_parallel_degree": 16}, "ep"),
        (
            4,
            {
                "expert_parallel_degree": 2,
                "tensor_parallel_degree": 2,
                "expert_tensor_parallel_degree": 4,
            },
            "etp",
        ),
    ],
)
def test_a_layout_that_cannot_be_formed_fails_with_the_validators_rule(world_size, degrees, fact):
    """The run's checks refuse it with titan-validate's expert-parallel finding (one rule:
    titan.schemas.expert_rules.expert_layout_problem), and ParallelDims never builds it."""
    from titan.models.qwen3.config_registry import qwen3_moe_debug
    from titan.training.run_checks import ConfigFindings, refuse_findings

    parallelism = ParallelismConfig(**degrees)
    with pytest.raises(ValueError, match="titan-validate --ngpu N names what to change"):
        ParallelDims.from_config(parallelism, world_size=world_size)
    shard = world_size // parallelism.tensor_parallel_degree
    problem = expert_layout_problem(
        ep=parallelism.expert_parallel_degree,
        etp=parallelism.expert_tensor_parallel_degree,
        tp=parallelism.tensor_parallel_degree,
        cp=1,
        dp_shard=shard,
    )
    assert problem is not None and problem[0] == fact
    _, message, hint = problem
    config = qwen3_moe_debug()
    config.parallelism = parallelism
    with pytest.raises(ConfigFindings) as raised:
        refuse_findings(config, world_size=world_size)
    found = [f for f in raised.value.findings if f.code == "expert-parallel"]
    assert [(f.message, f.hint) for f in found] == [(message, hint)]
    assert found[0].path.endswith(f"expert_{'tensor_' if fact == 'etp' else ''}parallel_degree")


@pytest.mark.parametrize("ep", ["3", "8"])
def test_titan_validate_reports_the_same_layouts_in_both_forms(ep, tmp_path):
    problem = expert_layout_problem(ep=int(ep), etp=1, tp=1, cp=1, dp_shard=4)
    assert problem is not None
    toml = tmp_path / "moe.toml"
    toml.write_text(
        'model = { name = "qwen3", flavor = "debugmodel_moe" }\n'
        f"[parallelism]\nexpert_parallel_degree = {ep}\n",
        encoding="utf-8",
    )
    registry = ["--config", "qwen3_moe_debug", "--parallelism.expert_parallel_degree", ep]
    for argv in ([str(toml), "--ngpu", "4"], [*registry, "--ngpu", "4"]):
        out, err = io.StringIO(), io.StringIO()
        assert validate.run(argv, stdout=out, stderr=err) == 1
        assert f"error[expert-parallel] {problem[1]}" in out.getvalue() + err.getvalue()


def torchrun_check(nproc: int, family: str, *scenarios: str) -> str:
    """Run the EP check script on ``nproc`` gloo processes; its output (it fails on a mismatch)."""
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        + [f"--nproc-per-node={nproc}", str(CHECK), family, *scenarios],
        capture_output=True,
        text=True,
        timeout=900,
        env=child_env(),
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-6000:]
    return done.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    ("family", "scenarios"),
    [
        ("qwen3", ("ep2", "ep2_sac_op")),
        ("llama4", ("ep2",)),
        ("deepseek_v3", ("ep2",)),
        ("gpt_oss", ("ep2",)),
    ],
)
def test_two_ep_ranks_train_like_one_process(family, scenarios):
    out = torchrun_check(2, family, *scenarios)
    for scenario in scenarios:
        assert f"OK {family} {scenario}:" in out


@pytest.mark.slow
def test_ep_with_fsdp_of_the_experts_and_hsdp_on_four_ranks():
    scenarios = ("ep2_efsdp2", "ep4", "hsdp_ep2")
    out = torchrun_check(4, "qwen3", *scenarios)
    for scenario in scenarios:
        assert f"OK qwen3 {scenario}:" in out


def small_moe_args(folder) -> list[str]:
    """titan-train flags for qwen3_train's small MoE (2 layers of 8 experts, top 2) in float32,
    4 steps of 2 x 32 tokens with a checkpoint every 2; its registry is written into ``folder``."""
    registry = folder / "config_registry.py"
    registry.write_text(SMALL_MOE, encoding="utf-8")
    args = ["--registry", str(registry), "--config", "small_moe", *SEED]
    args += ["--training.mixed_precision_param", "float32"]
    args += ["--training.seq_len", "32", "--training.local_batch_size", "2"]
    args += ["--training.steps", "4", "--checkpoint.enable", "--checkpoint.interval", "2"]
    return [*args, "--checkpoint.keep_latest_k", "0"]


@dataclasses.dataclass
class EpRuns:
    """titan-train on the small qwen3 MoE, 2 processes reading the same batches, 4 steps with a
    checkpoint every 2: under FSDP alone, under EP 2, and under EP 2 resumed from the EP run's
    step-2 checkpoint."""

    fsdp: Run
    ep: Run
    resumed: Run


@pytest.fixture(scope="module")
def ep_runs(tmp_path_factory) -> EpRuns:
    """The three runs, shared by the tests that compare them (each launch takes seconds of
    torchrun start-up alone)."""
    folder = tmp_path_factory.mktemp("ep_runs")
    args = small_moe_args(folder)
    ep = [*args, "--parallelism.expert_parallel_degree", "2"]
    fsdp_run = titan_train(args, dump_folder=folder / "fsdp", legacy=False, nproc=2).check()
    ep_run = titan_train(ep, dump_folder=folder / "ep", legacy=False, nproc=2).check()
    # A run that finds only the EP run's step-2 checkpoint resumes from it.
    (folder / "resumed" / "checkpoint").mkdir(parents=True)
    shutil.copytree(
        folder / "ep" / "checkpoint" / "step-2", folder / "resumed" / "checkpoint" / "step-2"
    )
    resumed = titan_train(ep, dump_folder=folder / "resumed", legacy=False, nproc=2).check()
    return EpRuns(fsdp=fsdp_run, ep=ep_run, resumed=resumed)


@pytest.mark.slow
def test_titan_train_ep2_matches_fsdp2(ep_runs):
    """The small qwen3 MoE (2 layers of 8 experts, top 2) on 2 processes reading the same batches,
    with and without EP: in float32 the losses agree to 1e-5 relative (not bitwise: the experts'
    gradients are summed over the ranks in another order) and the expert biases saved at the end
    are equal: zero, as qwen3's optimizers do no load balancing (torchtitan v0.2.2's).

    (One process reads other batches, since the loader deals documents out to data-parallel
    ranks; the comparison with one process on one batch is the dist-script tests' above.)
    """
    import torch

    from tests.test_qwen3_train import dcp_tensors

    fsdp, ep = ep_runs.fsdp, ep_runs.ep
    assert "(FSDP 2, EP 2)" in ep.stderr and "(FSDP 2)" in fsdp.stderr
    assert len(ep.losses) == 4
    assert ep.losses == pytest.approx(fsdp.losses, rel=1e-5)
    saved = [dcp_tensors(run.dump_folder / "checkpoint" / "step-4") for run in (fsdp, ep)]
    biases = [key for key in saved[0] if key.endswith("moe.expert_bias")]
    assert len(biases) == 2
    assert all(torch.equal(saved[0][key], saved[1][key]) for key in biases)
    assert all(not saved[1][key].any() for key in biases)


@pytest.mark.slow
def test_ep_resume_is_bitwise(ep_runs):
    """The run under EP resumed from its step-2 checkpoint ends bit for bit where the straight run
    does: losses, and every saved tensor (the EP-sharded experts, saved whole, and the biases)."""
    import torch

    from tests.test_qwen3_train import dcp_tensors

    straight, resumed = ep_runs.ep, ep_runs.resumed
    assert resumed.metrics[0]["step"] == 2
    assert loss_bits(resumed.losses) == loss_bits(straight.losses[2:])
    final_a = dcp_tensors(straight.dump_folder / "checkpoint" / "step-4")
    final_b = dcp_tensors(resumed.dump_folder / "checkpoint" / "step-4")
    assert final_a.keys() == final_b.keys()
    assert [key for key in final_a if not torch.equal(final_a[key], final_b[key])] == []
    experts = [key for key in final_a if key.endswith("moe.experts.w1")]
    biases = [key for key in final_a if key.endswith("moe.expert_bias")]
    assert len(experts) == len(biases) == 2
    assert all(final_a[key].shape[0] == 8 for key in experts)
    assert all(not final_a[key].any() for key in biases)  # qwen3 does no load balancing
