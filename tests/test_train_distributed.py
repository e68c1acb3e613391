"""titan-train under torchrun (gloo, 2 processes): the TOML form and the generated-registry form
give the same loss bits with FSDP2 and with tensor parallel (sequence parallel + loss parallel).
"""

from __future__ import annotations

import pytest

from tests.training_runs import both_forms, loss_bits

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
