"""titan-train under torchrun (gloo, 2 processes): the TOML form and the generated-registry form
give the same loss bits with FSDP2 and with tensor parallel (sequence parallel + loss parallel).
"""

from __future__ import annotations

import json

import pytest

from tests.training_runs import SEED, SMALL, both_forms, loss_bits, titan_train

pytestmark = pytest.mark.slow  # every test here launches torchrun


STEPS = ["--training.steps", "10"]


@pytest.mark.parametrize(
    ("name", "flags", "summary"),
    [
        ("fsdp2", [], "world size 2 (FSDP 2)"),
        ("tp2", ["--parallelism.tensor_parallel_degree", "2"], "world size 2 (TP 2)"),
    ],
)
def test_both_forms_agree_bit_for_bit_on_two_processes(
    generated_registry,
    tmp_path,
    name,
    flags,
    summary,
):
    toml, code = both_forms(generated_registry, tmp_path, [*STEPS, *flags], nproc=2)
    assert summary in toml.stderr and summary in code.stderr
    assert [m["step"] for m in toml.metrics] == list(range(1, 11))
    assert loss_bits(toml.losses) == loss_bits(code.losses)
    assert toml.losses[-1] < toml.losses[0] - 0.5


def test_ddp_run_validates_the_whole_set_in_step_on_both_ranks(tmp_path):
    """DDP over 2 processes; validation with steps = -1 reads every batch of the shipped split
    once, with both ranks stopping together even though their shards differ in length."""
    run = titan_train(
        [
            "--config",
            "llama3_debugmodel",
            *SMALL,
            *SEED,
            "--training.steps",
            "2",
            "--parallelism.data_parallel_replicate_degree",
            "2",
            "--parallelism.data_parallel_shard_degree",
            "1",
            "--validator.enable",
            "--validator.freq",
            "2",
            "--validator.steps",
            "-1",
            "--validator.dataloader.dataset",
            "c4_test_validation",
        ],
        dump_folder=tmp_path,
        legacy=False,
        nproc=2,
    ).check()
    assert "world size 2 (DDP 2)" in run.stderr
    validation = [m for m in run.metrics if "validation_loss" in m]
    assert [m["step"] for m in validation] == [1, 2]
    assert validation[1]["validation_loss"] < validation[0]["validation_loss"]


def test_two_nodes_joined_by_rendezvous_run_what_one_node_runs(tmp_path):
    """Two torchrun launchers (one per "node", as on a cluster) meeting at a c10d rendezvous give
    the same loss bits as one launcher with both processes."""
    import socket
    import subprocess
    import sys

    from tests.training_runs import REPO, child_env

    args = ["--config", "llama3_debugmodel", *SMALL, *SEED, "--training.steps", "3"]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2"]
    launcher += ["--nproc-per-node", "1", "--rdzv-backend", "c10d"]
    launcher += ["--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "titan-test"]
    command = [*launcher, "-m", "titan.train", *args, "--dump_folder", str(tmp_path / "two")]
    nodes = [
        subprocess.Popen(command, cwd=REPO, env=child_env(), stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    # The one-node run goes on meanwhile: the four processes share the cores.
    one_node = titan_train(args, dump_folder=tmp_path / "one", legacy=False, nproc=2).check()
    errors = [node.communicate(timeout=600)[1] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], errors
    two_nodes = [json.loads(line) for line in (tmp_path / "two" / "metrics.jsonl").open()]
    assert "world size 2 (FSDP 2)" in "".join(errors)
    assert loss_bits([m["loss"] for m in two_nodes]) == loss_bits(one_node.losses)
