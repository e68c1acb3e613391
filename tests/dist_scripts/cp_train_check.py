"""Run under ``torchrun --nproc-per-node N`` (gloo, CPU) as ``cp_train_check.py
FAMILY:SCENARIO...``: a tiny model of each FAMILY (llama3, qwen3 MoE, llama4, deepseek_v3,
gpt_oss) under context parallel against the same model in one process on the whole batch.

Each scenario parallelizes the model with titan's ``parallelize_model`` over the scenario's
layout (CP alone, CP with FSDP, CP with TP, CP with expert parallel), loads the reference weights
into its shards, and trains ``STEPS`` optimizer steps (``EP_STEPS`` with expert parallel) on the
same full batch, built into each rank's CP view by the trainer's own ``context_parallel_parts``
(this rank's head-tail chunks, their RoPE positions, the masks over the gathered keys, its share
of the labels). After every step it compares the
loss averaged over the data-parallel and CP ranks, every full gradient, and the gradient norm
with the reference's, and the MoE layers' load-balancing biases bitwise (their token counts
pool over the CP ranks). A ``_docs`` scenario runs block-causal (per-document) masks on tokens
with EOS ids, an ``_irope`` one llama4's chunked iRoPE layers. Rank 0 prints ``OK <family>
<scenario> ...``; any mismatch raises.
"""

from __future__ import annotations

import dataclasses
import os
import sys

import torch
import torch.distributed as dist

# The EP check's tiny MoE families; this folder is the script's own (sys.path[0]).
from expert_parallel_check import FAMILIES as MOE_FAMILIES
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
from torch.distributed.tensor import DTensor

from titan.components.loss import cross_entropy_loss
from titan.config.configs import (
    ActivationCheckpointConfig,
    CommConfig,
    CompileConfig,
    DebugConfig,
    ParallelismConfig,
    TrainingConfig,
)
from titan.distributed.cp_batch import context_parallel_parts
from titan.distributed.determinism import set_determinism
from titan.distributed.expert_parallel import moe_layers
from titan.distributed.grad_norm import clip_grad_norm_
from titan.distributed.parallel_dims import ParallelDims
from titan.distributed.parallelize import parallelize_model
from titan.distributed.process_group import init_distributed
from titan.distributed.reductions import dist_mean
from titan.models import llama3
from titan.models.common.attention import Attention
from titan.models.common.decoder import TransformerBlock
from titan.models.common.feed_forward import FeedForward
from titan.models.common.moe_balance import balance_mesh, update_expert_bias
from titan.models.llama3.model_config import Llama3Model

BATCH, SEQ, VOCAB = 2, 32, 128
EOS = 3
STEPS = 10
EP_STEPS = 4  # expert parallel with CP (the ``_ep`` scenarios): the same checks, fewer steps
LR = 1e-3
MAX_NORM = 1.0
# fp32 in both runs, not bitwise: each rank's matmuls see other row counts, the keys' gradients
# are summed over the CP ranks (reduce-scatter), and FSDP averages the CP ranks' gradients.
FP32_TOL = {"rtol": 1e-4, "atol": 2e-6}
LOSS_RTOL = 1e-5
NORM_RTOL = 1e-5


def llama3_config() -> Llama3Model.Config:
    """Two llama3 blocks with grouped-query attention."""
    return Llama3Model.Config(
        dim=64,
        n_layers=2,
        vocab_size=VOCAB,
        max_seq_len=SEQ,
        layer=TransformerBlock.Config(
            attention=Attention.Config(n_heads=4, n_kv_heads=2),
            feed_forward=FeedForward.Config(hidden_dim=96),
        ),
    )


FAMILIES = {"llama3": (llama3_config, llama3.model_registry, "debugmodel"), **MOE_FAMILIES}


# Scenario suffixes: "_docs" masks every layer by document; "_irope" (llama4) runs its flex
# flavor's iRoPE: layer 0 without rope attends globally, layer 1 with rope within chunks of 12
# positions, which straddle the CP chunks of 8.
VARIANTS = {
    "docs": {"attn_mask_type": "block_causal"},
    "irope": {"attn_type": "flex", "every_n_layers_nope": 2, "fixed_attn_block_size": 12},
}


def model_config(family: str, *, variant: str):
    """The tiny config of ``family`` with the attention settings of ``variant``."""
    config = FAMILIES[family][0]()
    config.max_seq_len = SEQ  # the EP check's families are built for shorter sequences
    if variant:
        attention = dataclasses.replace(config.layer.attention, **VARIANTS[variant])
        config.layer = dataclasses.replace(config.layer, attention=attention)
    return config


def build(family: str, *, variant: str) -> torch.nn.Module:
    with torch.device("meta"):
        return model_config(family, variant=variant).build()


def full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if isinstance(t, DTensor) else t


def biases(model: torch.nn.Module) -> list[torch.Tensor]:
    """Every MoE layer's load-balancing bias (none in a dense model)."""
    return [moe.expert_bias.clone() for moe in moe_layers(model)]


def clean(name: str) -> str:
    return name.replace("_checkpoint_wrapped_module.", "")


@dataclasses.dataclass
class Step:
    loss: float
    grads: dict[str, torch.Tensor]
    norm: float
    biases: list[torch.Tensor]


def reference(family: str, tokens, labels, *, variant: str, steps: int) -> tuple[dict, list[Step]]:
    """The initial state and each of ``steps`` steps of the unsharded model on the whole batch."""
    model = build(family, variant=variant)
    model.to_empty(device="cpu")
    torch.manual_seed(0)
    model.init_weights()
    state = {n: t.detach().clone() for n, t in model.state_dict().items()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    done = []
    for _ in range(steps):
        masks = model.attention_masks(tokens, eos_id=EOS)
        loss = cross_entropy_loss(model(tokens, attention_masks=masks), labels)
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
        optimizer.step()
        optimizer.zero_grad()
        if moe_layers(model):
            update_expert_bias(moe_layers(model), dp_mesh=None)
        done.append(Step(loss.item(), grads, norm.item(), biases(model)))
    return state, done


def run(family: str, name: str, parallelism: ParallelismConfig, ac: str, *, variant: str):
    tokens, labels = batch(documents=variant == "docs")
    count = EP_STEPS if parallelism.expert_parallel_degree > 1 else STEPS
    state, steps = reference(family, tokens, labels, variant=variant, steps=count)
    dims = ParallelDims.from_config(parallelism, world_size=dist.get_world_size())
    mesh = dims.build_mesh("cpu")
    model = build(family, variant=variant)
    spec = dataclasses.replace(
        FAMILIES[family][1](FAMILIES[family][2]), model=model_config(family, variant=variant)
    )
    parallelize_model(
        model,
        spec=spec,
        parallel_dims=dims,
        world_mesh=mesh,
        training=TrainingConfig(seq_len=SEQ, mixed_precision_param="float32"),
        parallelism=parallelism,
        activation_checkpoint=ActivationCheckpointConfig(mode=ac),
        compile=CompileConfig(),
    )
    model.to_empty(device="cpu")
    model.init_weights()  # buffers; the weights are overwritten below
    set_model_state_dict(model, dict(state), options=StateDictOptions(full_state_dict=True))
    loss_fn, attention_masks = context_parallel_parts(
        loss_fn=cross_entropy_loss, model=model, eos_id=EOS, parallel_dims=dims, world_mesh=mesh
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    loss_mesh = dims.mesh(mesh, "dp_cp")
    rows = slice(
        dims.dp_rank(mesh) * BATCH // dims.dp_degree,
        (dims.dp_rank(mesh) + 1) * BATCH // dims.dp_degree,
    )
    worst = {"loss": 0.0, "grad": 0.0, "norm": 0.0}
    for number, want in enumerate(steps, start=1):
        inputs = tokens[rows]
        loss = loss_fn(model(inputs, attention_masks=attention_masks(inputs)), labels[rows])
        loss.backward()
        mean_loss = dist_mean(loss.detach(), loss_mesh)
        worst["loss"] = max(worst["loss"], abs(mean_loss - want.loss) / abs(want.loss))
        assert abs(mean_loss - want.loss) <= LOSS_RTOL * abs(want.loss), (
            f"{name} step {number}: loss {mean_loss} != reference {want.loss}"
        )
        for param_name, param in model.named_parameters():
            got, expected = full(param.grad), want.grads[clean(param_name)]
            diff = (got - expected).abs().max().item()
            worst["grad"] = max(worst["grad"], diff)
            assert torch.allclose(got, expected, **FP32_TOL), (
                f"{family} {name} step {number}: gradient of {param_name} differs by {diff}"
            )
        norm = clip_grad_norm_(list(model.parameters()), MAX_NORM).item()
        worst["norm"] = max(worst["norm"], abs(norm - want.norm) / want.norm)
        assert abs(norm - want.norm) <= NORM_RTOL * want.norm, (
            f"{name} step {number}: grad norm {norm} != reference {want.norm}"
        )
        optimizer.step()
        optimizer.zero_grad()
        # The token counts of every CP rank pool into the bias update (integers: bitwise).
        if moe_layers(model):
            update_expert_bias(moe_layers(model), dp_mesh=balance_mesh(dims, mesh))
        for layer, (got, expected) in enumerate(zip(biases(model), want.biases, strict=True)):
            assert torch.equal(got, expected), (
                f"{family} {name} step {number}: expert_bias of layer {layer} differs"
            )
    if dist.get_rank() == 0:
        print(
            f"OK {family} {name}: {count} steps, max loss rel diff {worst['loss']:.1e}, max grad "
            f"diff {worst['grad']:.1e}, max grad-norm rel diff {worst['norm']:.1e}",
            flush=True,
        )


def batch(documents: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The full batch; with ``documents`` a few EOS tokens cut each row into documents (some of
    which straddle the CP chunks)."""
    generator = torch.Generator().manual_seed(1234)
    tokens = torch.randint(4, VOCAB, (BATCH, SEQ), generator=generator)
    labels = torch.randint(0, VOCAB, (BATCH, SEQ), generator=generator)
    if documents:
        tokens[0, [5, 13, 20]] = EOS
        tokens[1, [9, 30]] = EOS
    return tokens, labels


# name -> (parallelism, activation checkpointing mode)
SCENARIOS = {
    "cp2": (ParallelismConfig(context_parallel_degree=2), "none"),
    "cp2_ac": (ParallelismConfig(context_parallel_degree=2), "full"),
    "cp4": (ParallelismConfig(context_parallel_degree=4), "none"),
    "fsdp2_cp2": (
        ParallelismConfig(context_parallel_degree=2, data_parallel_shard_degree=2),
        "none",
    ),
    "hsdp_cp2": (
        ParallelismConfig(context_parallel_degree=2, data_parallel_replicate_degree=2),
        "none",
    ),
    "cp2_tp2": (
        ParallelismConfig(
            context_parallel_degree=2, tensor_parallel_degree=2, disable_loss_parallel=True
        ),
        "none",
    ),
    # Expert parallel borrows the CP ranks (and the shard ones beyond them), as torchtitan v0.2.2
    # formed its expert mesh out of dp_shard × cp: the experts' tokens come from every rank of
    # the group, each CP rank routing its own head-tail chunks.
    "cp2_ep2": (ParallelismConfig(context_parallel_degree=2, expert_parallel_degree=2), "none"),
    "fsdp2_cp2_ep4": (
        ParallelismConfig(
            context_parallel_degree=2, data_parallel_shard_degree=2, expert_parallel_degree=4
        ),
        "none",
    ),
    "cp2_tp2_ep4": (
        ParallelismConfig(
            context_parallel_degree=2,
            tensor_parallel_degree=2,
            expert_parallel_degree=4,
            disable_loss_parallel=True,
        ),
        "none",
    ),
}


def main() -> None:
    torch.set_num_threads(1)
    init_distributed(CommConfig(init_timeout_seconds=60))
    set_determinism(None, device=torch.device("cpu"), debug=DebugConfig())
    for argument in sys.argv[1:]:
        family, _, scenario = argument.partition(":")
        base, _, variant = scenario.rpartition("_")
        if variant not in VARIANTS:
            base, variant = scenario, ""
        parallelism, ac = SCENARIOS[base]
        run(family, scenario, parallelism, ac, variant=variant)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    from script_exit import run_and_leave  # beside this script: the first entry of sys.path

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    run_and_leave(main)
