"""A seed checkpoint is made by one process on one process's layout, whatever parallel degrees
its config sets: titan-train's config check accepts such a config for one process (both forms),
the run's checks set the degrees to 1 and say which, and several processes are still refused."""

from __future__ import annotations

import io
import logging

import pytest

from tests.training_runs import DEBUG_TOML
from titan.cli.train_config import load
from titan.training.seed_run import ONE_PROCESS, is_seed_run, one_process_layout

SEED_RUN = ["--checkpoint.enable", "--checkpoint.create_seed_checkpoint"]
LAYOUTS = [
    (
        ["--parallelism.pipeline_parallel_degree", "2"]
        + ["--parallelism.pipeline_parallel_schedule", "Interleaved1F1B"],
        ["parallelism.pipeline_parallel_degree = 2 -> 1"],
    ),
    (
        ["--parallelism.data_parallel_shard_degree", "2"]
        + ["--parallelism.tensor_parallel_degree", "2"],
        [
            "parallelism.data_parallel_shard_degree = 2 -> 1",
            "parallelism.tensor_parallel_degree = 2 -> 1",
        ],
    ),
    (
        ["--parallelism.data_parallel_replicate_degree", "2"]
        + ["--parallelism.data_parallel_shard_degree", "2"]
        + ["--parallelism.pipeline_parallel_degree", "2"]
        + ["--parallelism.pipeline_parallel_layers_per_stage", "2"]
        + ["--training.global_batch_size", "32"],
        [
            "parallelism.data_parallel_replicate_degree = 2 -> 1",
            "parallelism.data_parallel_shard_degree = 2 -> 1",
            "parallelism.pipeline_parallel_degree = 2 -> 1",
            "parallelism.pipeline_parallel_layers_per_stage = 2 -> None",
            "training.global_batch_size = 32 -> -1",
        ],
    ),
    ([], []),
]
FORMS = {
    "registry": ["--config", "llama3_debugmodel"],
    "toml": ["--job.config_file", str(DEBUG_TOML)],
}


def loaded(argv: list[str], *, world_size: int):
    """titan-train's config check of ``argv`` for ``world_size`` processes: (config, findings)."""
    stderr = io.StringIO()
    result = load(argv, world_size=world_size, stdout=io.StringIO(), stderr=stderr)
    return result.config, stderr.getvalue()


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize(("flags", "changed"), LAYOUTS)
def test_a_seed_run_takes_one_process_layout_and_says_what_it_set(form, flags, changed, caplog):
    from titan.training.run_checks import check_config

    argv = [*FORMS[form], "--training.seq_len", "64", *flags, *SEED_RUN]
    config, findings = loaded(argv, world_size=1)
    assert config is not None, findings
    assert is_seed_run(config, world_size=1) and not is_seed_run(config, world_size=2)
    with caplog.at_level(logging.INFO, logger="titan"):
        checked = check_config(config, world_size=1, warn=False)
    assert checked.parallel_dims.world_size == 1 and not checked.parallel_dims.pp_enabled
    said = [
        r.getMessage()
        for r in caplog.records
        if "seed checkpoint is the unsharded" in r.getMessage()
    ]
    if changed:
        assert said == [
            "a seed checkpoint is the unsharded model, made by one process: " + ", ".join(changed)
        ]
    else:
        assert said == []
    # Once set, there is nothing left to set.
    assert one_process_layout(config) == []
    for key, values in ONE_PROCESS.items():
        section, name = key.split(".")
        assert getattr(getattr(config, section), name) in values


@pytest.mark.parametrize("form", sorted(FORMS))
def test_the_same_layout_without_a_seed_or_on_several_processes_is_still_checked(form):
    pipelined = [*FORMS[form], "--parallelism.pipeline_parallel_degree", "2"]
    # Not a seed run: one process cannot hold a pipeline of 2.
    config, findings = loaded(pipelined, world_size=1)
    assert config is None and "1 GPU cannot be split by pipeline_parallel_degree=2" in findings
    # A seed run on 2 processes is refused when it starts (the seed is the unsharded model).
    config, findings = loaded([*pipelined, *SEED_RUN], world_size=2)
    assert config is not None, findings
    assert not is_seed_run(config, world_size=2)
    from titan.components.checkpoint.checks import check_start

    with pytest.raises(ValueError, match="run it as one process, not 2"):
        check_start(config.checkpoint, world_size=2)
    # A layout unsound for any world size is refused for a seed run too.
    config, findings = loaded(
        [*pipelined[:-1], "7", "--training.seq_len", "64", *SEED_RUN], world_size=1
    )
    assert config is None and "pipeline_parallel_degree" in findings
