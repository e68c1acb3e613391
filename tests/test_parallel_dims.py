"""``ParallelDims``: degree resolution, what it refuses to build, mesh names (no processes)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from titan.config.configs import ParallelismConfig
from titan.distributed.parallel_dims import ParallelDims


def dims(world_size: int, **degrees) -> ParallelDims:
    return ParallelDims.from_config(ParallelismConfig(**degrees), world_size=world_size)


@pytest.mark.parametrize(
    ("world_size", "degrees", "expected"),
    [
        (1, {}, (1, 1, 1)),
        (8, {}, (1, 8, 1)),
        (8, {"tensor_parallel_degree": 2}, (1, 4, 2)),
        (8, {"data_parallel_replicate_degree": 2}, (2, 4, 1)),
        (8, {"data_parallel_replicate_degree": 2, "tensor_parallel_degree": 4}, (2, 1, 4)),
        (4, {"data_parallel_replicate_degree": 4, "data_parallel_shard_degree": 1}, (4, 1, 1)),
        (4, {"data_parallel_shard_degree": 2, "tensor_parallel_degree": 2}, (1, 2, 2)),
    ],
)
def test_shard_degree_takes_the_ranks_left_over(world_size, degrees, expected):
    got = dims(world_size, **degrees)
    assert (got.dp_replicate, got.dp_shard, got.tp) == expected
    assert got.dp_replicate * got.dp_shard * got.tp == got.world_size == world_size


def test_what_is_enabled():
    fsdp = dims(4)
    assert fsdp.dp_enabled and fsdp.fsdp_enabled and fsdp.dp_shard_enabled
    assert not fsdp.dp_replicate_enabled and not fsdp.tp_enabled and not fsdp.loss_parallel_enabled
    assert fsdp.mesh_dim_names == ("dp_shard",) and fsdp.fsdp_mesh_dim_names == ("dp_shard",)

    hsdp_tp = dims(8, data_parallel_replicate_degree=2, tensor_parallel_degree=2)
    assert hsdp_tp.mesh_dim_names == ("dp_replicate", "dp_shard", "tp")
    assert hsdp_tp.fsdp_mesh_dim_names == ("dp_replicate", "dp_shard")
    assert hsdp_tp.dp_degree == 4 and hsdp_tp.non_data_parallel_size == 2
    assert hsdp_tp.loss_parallel_enabled and hsdp_tp.seq_len_divisor == 2

    tp_only = dims(2, tensor_parallel_degree=2, disable_loss_parallel=True)
    assert tp_only.tp_enabled and not tp_only.loss_parallel_enabled and not tp_only.dp_enabled
    assert tp_only.mesh_dim_names == ("tp",)

    single = dims(1)
    assert single.mesh_dim_names == () and not single.dp_enabled
    assert single.build_mesh("cpu") is None
    assert single.dp_rank(None) == 0 and single.mesh(None, "dp") is None


@pytest.mark.parametrize(
    ("world_size", "degrees", "code"),
    [
        (8, {"data_parallel_replicate_degree": 2, "data_parallel_shard_degree": 3}, "world-size"),
        (6, {"tensor_parallel_degree": 4}, "world-size"),
        (4, {"tensor_parallel_degree": 0}, "out-of-range"),
        (4, {"data_parallel_replicate_degree": -1}, "out-of-range"),
        (4, {"data_parallel_shard_degree": 0}, "parallel-degree"),
        (4, {"data_parallel_shard_degree": -2}, "out-of-range"),
        (4, {"expert_parallel_degree": 3}, "expert-parallel"),
    ],
)
def test_a_layout_the_rules_refuse_is_never_built(world_size, degrees, code):
    """The rules decide (the run's checks apply them first, naming the change); a layout they
    refuse that reaches ParallelDims anyway raises instead of becoming a mesh."""
    from titan.models.qwen3 import model_registry
    from titan.trainer import Trainer
    from titan.training.run_checks import ConfigFindings, refuse_findings

    with pytest.raises(ValueError, match="titan-validate --ngpu N names what to change"):
        dims(world_size, **degrees)
    config = Trainer.Config(
        model_spec=model_registry("debugmodel_moe"), parallelism=ParallelismConfig(**degrees)
    )
    with pytest.raises(ConfigFindings) as raised:
        refuse_findings(config, world_size=world_size)
    assert code in {finding.code for finding in raised.value.findings}


def test_mesh_names_are_checked():
    with pytest.raises(KeyError, match="unknown mesh name 'xp'"):
        dims(1).mesh(None, "xp")
    assert dims(1).mesh(None, "pp") is None and dims(1).mesh(None, "cp") is None


def test_parallel_dims_does_not_import_torch():
    probe = (
        "import sys\n"
        "from titan.distributed import ParallelDims\n"
        "from titan.config.configs import ParallelismConfig\n"
        "ParallelDims.from_config(ParallelismConfig(), world_size=4)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
