"""Expert parallel with tensor parallel: over the TP ranks (``expert_tensor_parallel_degree = 1``:
the EP group takes the TP ranks, each of which routes only its own sequence slice), or with each
expert's hidden units split over them (expert tensor parallel, ``= tensor_parallel_degree``).

The layouts ``ParallelDims`` builds for it, then every MoE family under TP 2 x EP 2 (and with FSDP
and EP 4 on four ranks, and expert tensor parallel) against one process (``dist_scripts/expert_parallel_check.py``: losses,
every gradient, weights after AdamW, the load-balancing bias bitwise), then ``titan-train``
itself: TP 2 x EP 2 against one process on the same batches, and a bitwise resume.
"""

from __future__ import annotations

import shutil

import pytest
import torch

from tests.test_expert_parallel import small_moe_args, torchrun_check
from tests.training_runs import REPO, Launch, Run, loss_bits, titan_train, titan_trains
from titan.config.configs import ParallelismConfig
from titan.distributed.parallel_dims import ParallelDims

FAMILIES = ("qwen3", "llama4", "deepseek_v3", "gpt_oss")


def dims(world_size: int, **degrees) -> ParallelDims:
    return ParallelDims.from_config(ParallelismConfig(**degrees), world_size=world_size)


@pytest.mark.parametrize(
    ("world_size", "degrees", "names", "halves", "fsdp_dims"),
    [
        # EP is the TP ranks: nothing borrowed from dp_shard, no FSDP.
        (2, {"expert_parallel_degree": 2}, ("dp_shard_mod_ep", "tp"), (1, 1), ("dp_shard_mod_ep",)),
        # FSDP 2 x TP 2, EP the TP ranks: the experts FSDP-shard over the 2 data-parallel ranks.
        (4, {"expert_parallel_degree": 2}, ("dp_shard_mod_ep", "tp"), (2, 1), ("dp_shard_mod_ep",)),
        # FSDP 2 x TP 2, EP every rank: the experts are not FSDP-sharded.
        (
            4,
            {"expert_parallel_degree": 4},
            ("dp_shard_mod_ep", "dp_shard_in_ep", "tp"),
            (1, 2),
            ("dp_shard",),
        ),
    ],
)
def test_ep_takes_the_tp_ranks(world_size, degrees, names, halves, fsdp_dims):
    got = dims(world_size, tensor_parallel_degree=2, **degrees)
    assert got.ep_borrows_tp and got.ep_enabled and not got.etp_enabled
    assert got.mesh_dim_names == names
    assert (got.dp_shard_mod_ep, got.dp_shard_in_ep) == halves
    assert got.fsdp_mesh_dim_names == fsdp_dims
    assert got.expert_fsdp_mesh_dim_names == ("dp_shard_mod_ep",)
    assert got._present_dims("ep")[-1] == "tp"
    # Every rank routes its own tokens, so the load-balancing counts pool over all of them.
    assert got._present_dims("dp_tp") == names


def test_ep_without_tp_or_tp_without_ep_does_not_split_tokens():
    assert not dims(2, expert_parallel_degree=2).ep_borrows_tp
    assert not dims(2, tensor_parallel_degree=2).ep_borrows_tp


def test_expert_tensor_parallel_splits_experts_over_ep_and_their_hidden_units_over_tp():
    got = dims(
        4, tensor_parallel_degree=2, expert_parallel_degree=2, expert_tensor_parallel_degree=2
    )
    assert got.etp_enabled and not got.ep_borrows_tp
    assert got.moe_layout == "hidden_split"
    # EP borrows dp_shard alone; the TP ranks route the same tokens and pool nothing.
    assert got.mesh_dim_names == ("dp_shard_mod_ep", "dp_shard_in_ep", "tp")
    assert (got.dp_shard_mod_ep, got.dp_shard_in_ep) == (1, 2)
    assert got._present_dims("ep") == ("dp_shard_in_ep",)
    assert got.fsdp_mesh_dim_names == ("dp_shard",)


@pytest.mark.parametrize(
    ("world_size", "degrees", "layout"),
    [
        (2, {"tensor_parallel_degree": 2}, "replicated"),
        (2, {"tensor_parallel_degree": 2, "expert_parallel_degree": 2}, "token_split"),
        (
            4,
            {
                "tensor_parallel_degree": 2,
                "expert_parallel_degree": 2,
                "expert_tensor_parallel_degree": 2,
            },
            "hidden_split",
        ),
        # Without EP, the expert TP degree is moot (torchtitan's rule): replicated under TP.
        (2, {"tensor_parallel_degree": 2, "expert_tensor_parallel_degree": 2}, "replicated"),
    ],
)
def test_the_moe_layout_follows_the_degrees(world_size, degrees, layout):
    assert dims(world_size, **degrees).moe_layout == layout


def test_gpt_oss_refuses_expert_tensor_parallel_before_building(capsys):
    from titan.train import main

    code = main(
        [
            "--preflight",
            "--ngpu",
            "4",
            "--job.config_file",
            str(REPO / "legacy_configs" / "gpt_oss" / "debug_model.toml"),
            "--parallelism.tensor_parallel_degree",
            "2",
            "--parallelism.expert_parallel_degree",
            "2",
            "--parallelism.expert_tensor_parallel_degree",
            "2",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert (
        "expert_tensor_parallel_degree" in err
        and "set parallelism.expert_tensor_parallel_degree to 1" in err
    )


@pytest.mark.parametrize(
    ("config", "degrees", "summary"),
    [
        ("qwen3_moe_debug", ("2", "2", "1"), "4 GPUs (FSDP 2, TP 2, EP 2)"),
        ("llama4_debugmodel", ("2", "2", "2"), "4 GPUs (FSDP 2, TP 2, EP 2, ETP 2)"),
    ],
)
def test_preflight_passes_expert_parallel_with_tp(capsys, config, degrees, summary):
    from titan.train import main

    tp, ep, etp = degrees
    code = main(
        ["--preflight", "--ngpu", "4", "--config", config]
        + ["--parallelism.tensor_parallel_degree", tp, "--parallelism.expert_parallel_degree", ep]
        + ["--parallelism.expert_tensor_parallel_degree", etp]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    assert summary in out


def checked(nproc: int, family: str, *scenarios: str) -> None:
    """The EP check script's scenarios on ``nproc`` gloo processes, each reported OK."""
    out = torchrun_check(nproc, family, *scenarios)
    for scenario in scenarios:
        assert f"OK {family} {scenario}:" in out, out


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_tp2_ep2_trains_like_one_process(family):
    # gpt_oss has its own TP plan (hidden-split experts) that EP over TP replaces; qwen3 also
    # recomputes every block (activation checkpointing re-runs the routing and the exchange).
    checked(2, family, "tp2_ep2", *(("tp2_ep2_ac",) if family == "qwen3" else ()))


@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen3", "gpt_oss"])
def test_fsdp_tp_and_ep_on_four_ranks_train_like_one_process(family):
    checked(4, family, "fsdp2_tp2_ep2", "fsdp2_tp2_ep4")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("family", "scenarios"),
    [
        # Scores after the experts (their gradient needs the whole expert output), and with AC.
        ("qwen3", ("fsdp2_tp2_ep2_etp2", "fsdp2_tp2_ep2_etp2_ac")),
        # Scores before the experts, a shared expert, dense layers between.
        ("llama4", ("fsdp2_tp2_ep2_etp2",)),
    ],
)
def test_expert_tensor_parallel_on_four_ranks_trains_like_one_process(family, scenarios):
    checked(4, family, *scenarios)


def straight_and_resumed(
    tmp_path, parallel: list[str], *, nproc: int, reference_nproc: int
) -> tuple[Run, Run, dict, dict]:
    """The small qwen3 MoE for 4 steps under the ``parallel`` flags on ``nproc`` processes with
    a checkpoint every 2, side by side with the reference layout (no flags) on
    ``reference_nproc``; then the same run resumed from the straight run's step-2 checkpoint,
    checked to end bit for bit where the straight run does. Returns (reference, straight, its
    final tensors, the reference's)."""
    from tests.test_qwen3_train import dcp_tensors

    args = small_moe_args(tmp_path)
    runs = titan_trains(
        [
            Launch(args, dump_folder=tmp_path / "reference", nproc=reference_nproc),
            Launch([*args, *parallel], dump_folder=tmp_path / "a", nproc=nproc),
        ]
    )
    reference, straight = (run.check() for run in runs)
    assert len(straight.losses) == 4

    (tmp_path / "b" / "checkpoint").mkdir(parents=True)
    shutil.copytree(
        tmp_path / "a" / "checkpoint" / "step-2", tmp_path / "b" / "checkpoint" / "step-2"
    )
    resumed = titan_train([*args, *parallel], dump_folder=tmp_path / "b", legacy=False, nproc=nproc)
    resumed.check()
    assert resumed.metrics[0]["step"] == 2
    assert loss_bits(resumed.losses) == loss_bits(straight.losses[2:])
    final_a = dcp_tensors(tmp_path / "a" / "checkpoint" / "step-4")
    final_b = dcp_tensors(tmp_path / "b" / "checkpoint" / "step-4")
    assert final_a.keys() == final_b.keys()
    assert [key for key in final_a if not torch.equal(final_a[key], final_b[key])] == []
    return (
        reference,
        straight,
        final_a,
        dcp_tensors(tmp_path / "reference" / "checkpoint" / "step-4"),
    )


@pytest.mark.slow
def test_titan_train_tp2_ep2_matches_one_process_and_resumes_bitwise(tmp_path):
    """The small qwen3 MoE, 4 steps: under TP 2 x EP 2 (2 processes, one data-parallel rank) the
    losses agree with one process on the same batches to 1e-5 relative (fp32; the sums run in
    other orders), the run resumes bitwise, and its expert biases stay zero as one process's do
    (qwen3's optimizers do no load balancing, as torchtitan v0.2.2's; the pooling of the counts
    over the ranks' sequence slices is dist_scripts/expert_parallel_check.py's, every family)."""
    parallel = ["--parallelism.tensor_parallel_degree", "2"]
    parallel += ["--parallelism.expert_parallel_degree", "2"]
    one, straight, final, final_one = straight_and_resumed(
        tmp_path, parallel, nproc=2, reference_nproc=1
    )
    assert "(TP 2, EP 2)" in straight.stderr, straight.stderr[-3000:]
    assert straight.losses == pytest.approx(one.losses, rel=1e-5)
    biases = [key for key in final if key.endswith("moe.expert_bias")]
    assert len(biases) == 2
    for key in biases:
        assert not final[key].any()
        assert torch.equal(final[key], final_one[key])


@pytest.mark.slow
def test_titan_train_expert_tensor_parallel_matches_fsdp2_and_resumes_bitwise(tmp_path):
    """The small qwen3 MoE, 4 steps: FSDP 2 x TP 2 with EP 2 and expert TP 2 (4 processes, two
    data-parallel ranks) agrees with FSDP 2 on the same batches to 1e-5 relative, and resumed
    from its step-2 checkpoint (experts saved from their (ep, tp) shards) ends bit for bit where
    the straight run does."""
    parallel = ["--parallelism.tensor_parallel_degree", "2"]
    parallel += ["--parallelism.expert_parallel_degree", "2"]
    parallel += ["--parallelism.expert_tensor_parallel_degree", "2"]
    fsdp, straight, final, _ = straight_and_resumed(tmp_path, parallel, nproc=4, reference_nproc=2)
    assert "(FSDP 2, TP 2, EP 2, ETP 2)" in straight.stderr, straight.stderr[-3000:]
    assert straight.losses == pytest.approx(fsdp.losses, rel=1e-5)
    experts = [key for key in final if key.endswith("moe.experts.w2")]
    assert len(experts) == 2 and all(final[key].shape[0] == 8 for key in experts)
