"""Run under ``torchrun --nproc-per-node 2`` (gloo, CPU): MoE load balancing pools the token
counts of both data-parallel ranks before it moves the expert bias.

Each rank counts other tokens; the bias both ranks end with is the one the summed counts give
(computed by hand below), not what either rank's own counts would give. Rank 0 prints ``OK``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from titan.components.optimizer import OptimizersContainer
from titan.config.configs import ParallelismConfig
from titan.distributed.parallel_dims import ParallelDims
from titan.distributed.process_group import destroy_distributed
from titan.models.common import Attention, MoE, TransformerBlock
from titan.models.common.moe_balance import register_moe_load_balancing

# Rank 0 and rank 1 counts sum to (1, 1, 1, 4): mean 1.75, so the signs are (+, +, +, -);
# times 0.25 and centred (mean 0.125). Rank 0 alone, (1, 0, 0, 1), would give (-, +, +, -).
COUNTS = {0: [1.0, 0.0, 0.0, 1.0], 1: [0.0, 1.0, 1.0, 3.0]}
EXPECTED = [0.125, 0.125, 0.125, -0.375]


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dims = ParallelDims.from_config(ParallelismConfig(data_parallel_shard_degree=2), world_size=2)
    world_mesh = dims.build_mesh("cpu")
    block = TransformerBlock.Config(
        attention=Attention.Config(n_heads=2),
        moe=MoE.Config(num_experts=4, hidden_dim=8, load_balance_coeff=0.25),
    )
    part = torch.nn.Module()
    part.layers = torch.nn.ModuleDict(
        {"0": block.build(layer_id=0, dim=16, n_layers=1, norm_eps=1e-5)}
    )
    moe = part.layers["0"].moe
    moe.init_weights(0.02)
    moe.tokens_per_expert.copy_(torch.tensor(COUNTS[rank]))
    optimizers = OptimizersContainer.Config(lr=0.0).build(model_parts=[part])
    register_moe_load_balancing(
        optimizers, model_parts=[part], parallel_dims=dims, world_mesh=world_mesh
    )
    optimizers.step()
    assert moe.expert_bias.tolist() == EXPECTED, (rank, moe.expert_bias.tolist())
    assert moe.tokens_per_expert.tolist() == [0.0] * 4
    destroy_distributed()  # every rank past its last collective before any closes
    if rank == 0:
        print("OK")


if __name__ == "__main__":
    from script_exit import run_and_leave  # beside this script: the first entry of sys.path

    run_and_leave(main)
