"""Helpers of the library checks (``library_check.py``, ``library_misuse.py``): trainers built
from the debug registries under a named layout, tensor comparisons and micro-batches."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from titan.training.library_weights import canonical_name
from titan.training.step_api import Microbatch

SEQ, BATCH = 64, 2
# fp32 sums of the same tokens grouped otherwise (other batch shapes, sharded matmuls,
# reduce-scatter) agree to ~1e-6; as tests/dist_scripts/parallel_check.py.
FP32_TOL = {"rtol": 1e-4, "atol": 1e-5}
LAYOUTS = {
    "one": {},
    "fsdp2": {"data_parallel_shard_degree": 2},
    "moe": {},
    "ep2": {"data_parallel_shard_degree": 2, "expert_parallel_degree": 2},
    "tp2_loss_parallel": {"data_parallel_shard_degree": 1, "tensor_parallel_degree": 2},
    "pp2": {"data_parallel_shard_degree": 1, "pipeline_parallel_degree": 2},
    "tp2": {
        "data_parallel_shard_degree": 1,
        "tensor_parallel_degree": 2,
        "disable_loss_parallel": True,
    },
}
MOE_LAYOUTS = {"moe", "ep2"}
"""Layouts that run the deepseek_v3 debug model (mixture of experts) instead of llama3's."""
TRAINERS: list = []
"""Every trainer built, closed together at the end (the first close ends the process group)."""


def rank() -> int:
    """This process's rank (0 for a plain one-process launch)."""
    return dist.get_rank() if dist.is_initialized() else 0


def say(line: str) -> None:
    """Print ``line`` once per launch (on rank 0)."""
    if rank() == 0:
        print(line, flush=True)


def build(
    dump: str,
    name: str,
    *,
    layout: str,
    accumulation: int = 1,
    float8: bool = False,
    fp32: bool = False,
    checkpoint_interval: int = 0,
    **extra,
):
    """A trainer of the llama3 debug registry in ``dump/name`` under ``layout``."""
    from titan.models.deepseek_v3.config_registry import deepseek_v3_debugmodel
    from titan.models.llama3.config_registry import llama3_debugmodel, llama3_debugmodel_float8

    registry = llama3_debugmodel_float8 if float8 else llama3_debugmodel
    config = (deepseek_v3_debugmodel if layout in MOE_LAYOUTS else registry)()
    config.dump_folder = os.path.join(dump, name)
    config.training.seq_len, config.training.local_batch_size = SEQ, BATCH
    config.training.steps = 1
    config.debug.seed = 7
    config.validator.enable = False
    # fp32 forward for the tolerance comparisons (bf16 autocast rounds to ~0.5%).
    config.training.mixed_precision_param = "float32" if fp32 else "bfloat16"
    if checkpoint_interval:
        config.checkpoint.enable = True
        config.checkpoint.interval = checkpoint_interval
        config.training.steps = 5
    for key, value in {**LAYOUTS[layout], **extra}.items():
        setattr(config.parallelism, key, value)
    dp = LAYOUTS[layout].get("data_parallel_shard_degree", 1)
    config.training.global_batch_size = BATCH * dp * accumulation
    trainer = config.build()
    TRAINERS.append(trainer)
    return trainer


def same(got: dict, want: dict, what: str, **tol) -> None:
    """The same keys and tensors: bit for bit, or within ``tol`` (``assert_close``)."""
    assert got.keys() == want.keys(), f"{what}: keys differ: {sorted(got ^ want)}"
    for key, value in want.items():
        if tol:
            torch.testing.assert_close(
                got[key], value, **tol, msg=lambda text, key=key: f"{what}: {key}: {text}"
            )
        else:
            assert got[key].dtype == value.dtype, f"{what}: {key} dtype"
            assert torch.equal(got[key], value), f"{what}: {key} differs on rank {rank()}"


def full_grads(trainer) -> dict[str, torch.Tensor]:
    """Every parameter's whole gradient."""
    grads = {}
    for name, param in trainer.parts.model.named_parameters():
        grad = param.grad
        grads[canonical_name(name)] = grad.full_tensor() if isinstance(grad, DTensor) else grad
    return grads


def data(seed: int, *, valid: list[int]) -> list[Microbatch]:
    """Random micro-batches whose loss masks keep ``valid[i]`` tokens of micro-batch ``i``."""
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for count in valid:
        tokens = torch.randint(0, 256, (BATCH, SEQ + 1), generator=generator)
        mask = torch.zeros(BATCH * SEQ, dtype=torch.bool)
        mask[torch.randperm(BATCH * SEQ, generator=generator)[:count]] = True
        batches.append(
            Microbatch(
                token_ids=tokens[:, :-1], labels=tokens[:, 1:], loss_mask=mask.view(BATCH, SEQ)
            )
        )
    return batches


def concatenated(batches: list[Microbatch]) -> Microbatch:
    """One micro-batch holding the rows of ``batches``."""
    return Microbatch(
        token_ids=torch.cat([b.token_ids for b in batches]),
        labels=torch.cat([b.labels for b in batches]),
        loss_mask=torch.cat([b.loss_mask for b in batches]),
    )
