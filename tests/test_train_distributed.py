"""titan-train under torchrun (gloo, 2 processes): the TOML form and the generated-registry form
give the same loss bits with FSDP2 and with tensor parallel (sequence parallel + loss parallel).
"""

from __future__ import annotations

import pytest

from tests.training_runs import SEED, SMALL, both_forms, loss_bits, titan_train

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
