"""``ParallelDims``: degree resolution, refusals and their messages, mesh names (no processes)."""

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


def test_a_product_other_than_the_world_size_names_every_degree():
    with pytest.raises(ValueError) as raised:
        dims(8, data_parallel_replicate_degree=2, data_parallel_shard_degree=3)
    message = str(raised.value)
    for part in (
        "data_parallel_replicate_degree (2)",
        "data_parallel_shard_degree (3)",
        "tensor_parallel_degree (1)",
        "= 6",
        "world size is 8",
        "hint",
    ):
        assert part in message


def test_leftover_shard_degree_must_divide_evenly():
    with pytest.raises(ValueError, match=r"world size 6 is not a multiple of .* = 4"):
        dims(6, tensor_parallel_degree=4)


@pytest.mark.parametrize(
    ("degrees", "match"),
    [
        ({"tensor_parallel_degree": 0}, "tensor_parallel_degree must be at least 1, got 0"),
        ({"data_parallel_replicate_degree": -1}, "replicate_degree must be at least 1"),
        ({"data_parallel_shard_degree": 0}, r"must be -1 \(all ranks left over\) or at least 1"),
        ({"data_parallel_shard_degree": -2}, "got -2"),
    ],
)
def test_degrees_below_one_are_refused(degrees, match):
    with pytest.raises(ValueError, match=match):
        dims(4, **degrees)


def test_mesh_names_are_checked():
    with pytest.raises(KeyError, match="unknown mesh name 'cp'"):
        dims(1).mesh(None, "cp")
    assert dims(1).mesh(None, "pp") is None


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
