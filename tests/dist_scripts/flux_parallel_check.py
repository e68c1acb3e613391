"""Run under ``torchrun --nproc-per-node N SCRIPT SCENARIO...`` (gloo, CPU): a small flux
transformer sharded with FSDP2 by ``parallelize_flux`` (with and without activation
checkpointing) against the same model in one process.

Every rank builds the reference with the same seed and the same batch, and the sharded model on
the meta device, loads the reference's weights into its shards, then runs forward and backward.
With the same batch on every rank the averaged gradient is the reference's. The output and every
full gradient are compared in fp32 within ``TOLERANCE``; rank 0 prints ``OK <scenario>: ...``
with the largest differences.
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import distribute_tensor

from titan.config.configs import ActivationCheckpointConfig
from titan.distributed.process_group import destroy_distributed
from titan.models.flux import sampling
from titan.models.flux.model_config import FluxModel, FluxRoPE
from titan.models.flux.parallelize import parallelize_flux

TOLERANCE = 1e-6
CONFIG = FluxModel.Config(
    in_channels=16,
    out_channels=16,
    vec_in_dim=8,
    context_in_dim=12,
    hidden_size=32,
    num_heads=2,
    depth=2,
    depth_single_blocks=2,
    guidance_embed=True,
    rope=FluxRoPE.Config(axes_dim=(4, 6, 6)),
)
SCENARIOS = {"fsdp": "none", "fsdp_ac": "full"}
"""Scenario -> activation checkpointing mode."""


def batch() -> dict[str, torch.Tensor]:
    """The same inputs on every rank (fixed seed)."""
    generator = torch.Generator().manual_seed(1)
    return {
        "img": torch.randn(2, 4, 16, generator=generator),
        "img_ids": sampling.latent_position_ids(2, height=4, width=4),
        "txt": torch.randn(2, 3, 12, generator=generator),
        "txt_ids": sampling.text_position_ids(2, tokens=3),
        "y": torch.randn(2, 8, generator=generator),
        "timesteps": torch.rand(2, generator=generator),
        "guidance": torch.tensor([3.5, 1.0]),
    }


def reference_model() -> torch.nn.Module:
    """The unsharded model with random weights (the same on every rank)."""
    model = CONFIG.build()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.1)
    return model


def run(scenario: str) -> str:
    """Compare one sharded run with the reference; the line rank 0 prints."""
    reference = reference_model()
    with torch.device("meta"):
        sharded = CONFIG.build()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    ac = ActivationCheckpointConfig(mode=SCENARIOS[scenario])
    parallelize_flux(sharded, activation_checkpoint=ac, dp_mesh=mesh)
    units = [*sharded.embedders(), *sharded.double_blocks, *sharded.single_blocks]
    assert all(isinstance(m, FSDPModule) for m in [*units, sharded.final_layer, sharded])
    sharded.to_empty(device="cpu")
    full = reference.state_dict()
    with torch.no_grad():
        for name, param in sharded.named_parameters():
            name = name.replace("_checkpoint_wrapped_module.", "")
            param.copy_(distribute_tensor(full[name], mesh, param.placements))
    outputs = []
    for model in (reference, sharded):
        out = model(**batch())
        out.square().mean().backward()
        outputs.append(out.detach())
    out_diff = (outputs[0] - outputs[1]).abs().max().item()
    grads = dict(reference.named_parameters())
    grad_diff = max(
        (grads[n.replace("_checkpoint_wrapped_module.", "")].grad - p.grad.full_tensor())
        .abs()
        .max()
        .item()
        for n, p in sharded.named_parameters()
    )
    assert out_diff <= TOLERANCE and grad_diff <= TOLERANCE, (out_diff, grad_diff)
    return f"OK {scenario}: fsdp {dist.get_world_size()}, out {out_diff:.1e}, grads {grad_diff:.1e}"


def main() -> None:
    """Run each scenario named on the command line."""
    dist.init_process_group("gloo")
    try:
        for scenario in sys.argv[1:]:
            line = run(scenario)
            if dist.get_rank() == 0:
                print(line, flush=True)
        # Every rank's last collective has completed before any rank closes its connections:
        # gloo aborts a process that tears down while a peer's message is still arriving.
        dist.barrier()
    finally:
        destroy_distributed()


if __name__ == "__main__":
    main()
