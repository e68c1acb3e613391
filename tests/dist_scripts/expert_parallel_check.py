"""Run under ``torchrun --nproc-per-node N`` (gloo, CPU) as ``expert_parallel_check.py FAMILY
SCENARIO...``: a tiny MoE model of FAMILY (qwen3, llama4, deepseek_v3, gpt_oss) under expert parallel
against the same model in one process on the whole batch.

Each scenario parallelizes the model with titan's generic ``parallelize_model`` (EP + FSDP),
loads the reference weights into its shards and takes two optimizer steps on its slice of the
batch, comparing after each: the mean loss, every full gradient, the clipped gradient norm, the
updated weights, and every layer's load-balancing ``expert_bias`` (bitwise: the token counts
are integers, so their all-reduced sum is exact). Rank 0 prints ``OK <scenario> ...``; any
mismatch raises, so the launch fails.
"""

from __future__ import annotations

import dataclasses
import os
import sys

import torch
import torch.distributed as dist
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
from titan.distributed.determinism import set_determinism
from titan.distributed.expert_parallel import moe_layers
from titan.distributed.grad_norm import clip_grad_norm_
from titan.distributed.parallel_dims import ParallelDims
from titan.distributed.parallelize import parallelize_model
from titan.distributed.process_group import init_distributed
from titan.distributed.reductions import dist_mean
from titan.models import deepseek_v3, gpt_oss, llama4, qwen3
from titan.models.common.decoder import TransformerBlock
from titan.models.common.feed_forward import FeedForward
from titan.models.common.moe import MoE
from titan.models.common.moe_balance import balance_mesh, update_expert_bias
from titan.models.deepseek_v3.model_config import (
    DeepSeekV3Model,
    DeepSeekV3TransformerBlock,
    MLAttention,
)
from titan.models.gpt_oss.model_config import (
    GptOssAttention,
    GptOssModel,
    GptOssMoE,
    GptOssRoPE,
    GptOssTransformerBlock,
)
from titan.models.llama4.model_config import Llama4Attention, Llama4Model, Llama4TransformerBlock
from titan.models.qwen3.model_config import Qwen3Attention, Qwen3Model

BATCH, SEQ, VOCAB = 4, 16, 128
STEPS = 2
LR = 1e-2
# A max_norm below the gradient norm, so clipping really scales.
MAX_NORM = 0.05
# fp32 in both runs, but not bitwise: the experts' gradients are summed over ranks in another
# order (all-to-all backward, reduce-scatter), and each rank's matmuls see other row counts.
FP32_TOL = {"rtol": 1e-4, "atol": 1e-5}
# Weights after AdamW: an element whose gradient is near Adam's eps (1e-8) moves by up to
# lr * g / (|g| + eps), whose slope there is lr / (4 eps), so a 1e-10 gradient difference moves it
# by ~2.5e-5. A wrong update is off by up to lr (1e-2): 100 times this bound.
WEIGHT_TOL = {"rtol": 1e-4, "atol": 1e-4}


# 8 experts, top 2, one shared expert, load balancing on, in every family.
MOE = dict(hidden_dim=32, num_experts=8, top_k=2, num_shared_experts=1, load_balance_coeff=1e-2)


def qwen3_config() -> Qwen3Model.Config:
    """Two qwen3 MoE blocks (softmax routing, scores after the experts)."""
    return Qwen3Model.Config(
        dim=64,
        n_layers=2,
        vocab_size=VOCAB,
        max_seq_len=SEQ,
        layer=TransformerBlock.Config(
            attention=Qwen3Attention.Config(n_heads=4, n_kv_heads=2, head_dim=16),
            feed_forward=FeedForward.Config(hidden_dim=96),
            moe=MoE.Config(score_func="softmax", score_before_experts=False, **MOE),
        ),
    )


def llama4_config() -> Llama4Model.Config:
    """A dense llama4 block, then an MoE one (sigmoid routing, scores before the experts)."""
    return Llama4Model.Config(
        dim=64,
        n_layers=2,
        vocab_size=VOCAB,
        max_seq_len=SEQ,
        layer=Llama4TransformerBlock.Config(
            attention=Llama4Attention.Config(n_heads=4, n_kv_heads=2),
            feed_forward=FeedForward.Config(multiple_of=32),
            moe=MoE.Config(**MOE),
            interleave_moe_layer_step=2,
        ),
    )


def deepseek_v3_config() -> DeepSeekV3Model.Config:
    """A dense deepseek_v3 block, then two MoE ones with group-limited sigmoid routing."""
    return DeepSeekV3Model.Config(
        dim=64,
        n_layers=3,
        vocab_size=VOCAB,
        max_seq_len=SEQ,
        layer=DeepSeekV3TransformerBlock.Config(
            attention=MLAttention.Config(
                n_heads=4,
                q_lora_rank=24,
                kv_lora_rank=16,
                qk_nope_head_dim=16,
                qk_rope_head_dim=8,
                v_head_dim=16,
            ),
            feed_forward=FeedForward.Config(hidden_dim=96),
            moe=MoE.Config(
                route_norm=True,
                route_scale=2.5,
                score_before_experts=False,
                num_expert_groups=4,
                num_limited_groups=2,
                **MOE,
            ),
            n_dense_layers=1,
        ),
    )


def gpt_oss_config() -> GptOssModel.Config:
    """Two gpt_oss MoE blocks (biased clamped-SwiGLU experts, biased gate, sinks, a sliding
    window on the first); no shared expert, as in gpt-oss."""
    moe = {**MOE, "num_shared_experts": 0}
    return GptOssModel.Config(
        dim=64,
        n_layers=2,
        vocab_size=VOCAB,
        max_seq_len=SEQ,
        rope=GptOssRoPE.Config(theta=150000.0, rope_factor=32.0),
        layer=GptOssTransformerBlock.Config(
            attention=GptOssAttention.Config(
                n_heads=4, n_kv_heads=2, head_dim=16, sliding_window_size=8
            ),
            feed_forward=None,
            moe=GptOssMoE.Config(
                score_func="softmax",
                route_norm=True,
                gate_bias=True,
                score_before_experts=False,
                **moe,
            ),
        ),
    )


# family -> (tiny model config, a flavor of the family for its ModelSpec)
FAMILIES = {
    "qwen3": (qwen3_config, qwen3.model_registry, "debugmodel_moe"),
    "llama4": (llama4_config, llama4.model_registry, "debugmodel"),
    "deepseek_v3": (deepseek_v3_config, deepseek_v3.model_registry, "debugmodel"),
    "gpt_oss": (gpt_oss_config, gpt_oss.model_registry, "debugmodel"),
}


def model_spec(family: str):
    """A spec of ``family`` (its parallelize plan and capabilities) holding the tiny model."""
    config, registry, flavor = FAMILIES[family]
    return dataclasses.replace(registry(flavor), model=config())


def build_on_meta(family: str) -> torch.nn.Module:
    with torch.device("meta"):
        return FAMILIES[family][0]().build()


def clean_fqn(name: str) -> str:
    return name.replace("_checkpoint_wrapped_module.", "")


def full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if isinstance(t, DTensor) else t


def biases(model: torch.nn.Module) -> list[torch.Tensor]:
    return [moe.expert_bias.clone() for moe in moe_layers(model)]


@dataclasses.dataclass
class Step:
    """What one optimizer step of the reference left."""

    loss: float
    grads: dict[str, torch.Tensor]
    norm: float
    weights: dict[str, torch.Tensor]
    biases: list[torch.Tensor]


def reference(family: str, tokens: torch.Tensor, labels: torch.Tensor) -> tuple[dict, list[Step]]:
    """The initial state and each step of the unsharded model on the whole batch."""
    model = build_on_meta(family)
    model.to_empty(device="cpu")
    torch.manual_seed(0)
    model.init_weights()
    state = {n: t.detach().clone() for n, t in model.state_dict().items()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    layers = moe_layers(model)
    steps = []
    for _ in range(STEPS):
        loss = cross_entropy_loss(model(tokens), labels)
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
        optimizer.step()
        optimizer.zero_grad()
        update_expert_bias(layers, dp_mesh=None)
        weights = {n: p.detach().clone() for n, p in model.named_parameters()}
        steps.append(Step(loss.item(), grads, norm.item(), weights, biases(model)))
    return state, steps


def compare(scenario: str, what: str, got: dict, want: dict, tol: dict = FP32_TOL) -> float:
    assert got.keys() == want.keys(), f"{scenario}: names differ: {got.keys() ^ want.keys()}"
    worst = 0.0
    for name, value in want.items():
        diff = (got[name] - value).abs().max().item()
        if not torch.allclose(got[name], value, **tol):
            raise AssertionError(
                f"{scenario}: {what} of {name} differs by {diff}; ratio {(got[name] / value).flatten()[:8]}"
            )
        worst = max(worst, diff)
    return worst


def run_scenario(
    family: str,
    name: str,
    *,
    state: dict,
    steps: list[Step],
    tokens: torch.Tensor,
    labels: torch.Tensor,
    parallelism: ParallelismConfig,
    ac: ActivationCheckpointConfig | None = None,
) -> None:
    dims = ParallelDims.from_config(parallelism, world_size=dist.get_world_size())
    mesh = dims.build_mesh("cpu")
    model = build_on_meta(family)
    parallelize_model(
        model,
        spec=model_spec(family),
        parallel_dims=dims,
        world_mesh=mesh,
        training=TrainingConfig(seq_len=SEQ, mixed_precision_param="float32"),
        parallelism=parallelism,
        activation_checkpoint=ac or ActivationCheckpointConfig(mode="none"),
        compile=CompileConfig(),
    )
    model.to_empty(device="cpu")
    model.init_weights()  # buffers; the weights are overwritten below
    set_model_state_dict(model, dict(state), options=StateDictOptions(full_state_dict=True))
    # Every expert weight has the experts first (w1 or gpt_oss's mlp1_weight).
    expert_weight = next(moe_layers(model)[0].experts.parameters())
    ep_shape = full(expert_weight).shape
    local_shape = expert_weight.to_local().shape
    assert ep_shape[0] == 8 and local_shape[0] == 8 // (dims.ep * dims.dp_shard_mod_ep), (
        f"{name}: experts not split over EP: full {ep_shape}, local {local_shape}"
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    layers = moe_layers(model)
    dp_mesh = dims.mesh(mesh, "dp")
    dp_rank, dp_degree = dims.dp_rank(mesh), dims.dp_degree
    rows = slice(dp_rank * BATCH // dp_degree, (dp_rank + 1) * BATCH // dp_degree)
    worst = {"loss": 0.0, "grad": 0.0, "weight": 0.0}
    for number, want in enumerate(steps, start=1):
        loss = cross_entropy_loss(model(tokens[rows]), labels[rows])
        loss.backward()
        mean_loss = dist_mean(loss, dp_mesh)
        worst["loss"] = max(worst["loss"], abs(mean_loss - want.loss))
        assert abs(mean_loss - want.loss) <= 1e-5 * abs(want.loss), (
            f"{name} step {number}: loss {mean_loss} != reference {want.loss}"
        )
        grads = {clean_fqn(n): full(p.grad) for n, p in model.named_parameters()}
        worst["grad"] = max(worst["grad"], compare(name, "gradient", grads, want.grads))
        norm = clip_grad_norm_(model.parameters(), MAX_NORM)
        assert abs(norm.item() - want.norm) <= 1e-4 * want.norm, (
            f"{name} step {number}: grad norm {norm.item()} != reference {want.norm}"
        )
        optimizer.step()
        optimizer.zero_grad()
        update_expert_bias(layers, dp_mesh=balance_mesh(dims, mesh))
        weights = {clean_fqn(n): full(p.detach()) for n, p in model.named_parameters()}
        worst["weight"] = max(
            worst["weight"], compare(name, "weight", weights, want.weights, WEIGHT_TOL)
        )
        for layer, (got, expected) in enumerate(zip(biases(model), want.biases, strict=True)):
            assert torch.equal(got, expected), (
                f"{name} step {number}: expert_bias of layer {layer} differs: {got} {expected}"
            )
    if dist.get_rank() == 0:
        print(
            f"OK {family} {name}: {STEPS} steps, max |loss diff| {worst['loss']:.2e}, max grad diff "
            f"{worst['grad']:.2e}, max weight diff {worst['weight']:.2e}, expert_bias bitwise",
            flush=True,
        )


# EP 2 with the logits replicated (the loss here is the plain cross-entropy).
EP2_TP2 = dict(expert_parallel_degree=2, disable_loss_parallel=True)

SCENARIOS = {
    # 2 processes: EP borrows both FSDP ranks; each expert module is FSDP-wrapped on 1 rank.
    "ep2": dict(parallelism=ParallelismConfig(expert_parallel_degree=2)),
    "ep2_ac": dict(
        parallelism=ParallelismConfig(expert_parallel_degree=2),
        ac=ActivationCheckpointConfig(mode="full"),
    ),
    "ep2_sac_op": dict(
        parallelism=ParallelismConfig(expert_parallel_degree=2),
        ac=ActivationCheckpointConfig(mode="selective", selective_ac_option="op"),
    ),
    # 4 processes: EP takes 2 of the 4 FSDP ranks, FSDP shards the experts over the other 2.
    "ep2_efsdp2": dict(parallelism=ParallelismConfig(expert_parallel_degree=2)),
    "ep4": dict(parallelism=ParallelismConfig(expert_parallel_degree=4)),
    "hsdp_ep2": dict(
        parallelism=ParallelismConfig(data_parallel_replicate_degree=2, expert_parallel_degree=2)
    ),
    # EP takes the TP ranks (expert_tensor_parallel_degree = 1): each TP rank routes its own
    # sequence slice. 2 processes: TP 2 and EP 2 over the same two ranks, no FSDP.
    "tp2_ep2": dict(parallelism=ParallelismConfig(tensor_parallel_degree=2, **EP2_TP2)),
    "tp2_ep2_ac": dict(
        parallelism=ParallelismConfig(tensor_parallel_degree=2, **EP2_TP2),
        ac=ActivationCheckpointConfig(mode="full"),
    ),
    # 4 processes: FSDP 2 x TP 2; EP 2 is the TP ranks (the experts FSDP-sharded over the other
    # 2), EP 4 is every rank.
    "fsdp2_tp2_ep2": dict(parallelism=ParallelismConfig(tensor_parallel_degree=2, **EP2_TP2)),
    # Expert tensor parallel: EP 2 over the FSDP ranks, each expert's hidden units over TP 2.
    "fsdp2_tp2_ep2_etp2": dict(
        parallelism=ParallelismConfig(
            tensor_parallel_degree=2, expert_tensor_parallel_degree=2, **EP2_TP2
        )
    ),
    "fsdp2_tp2_ep2_etp2_ac": dict(
        parallelism=ParallelismConfig(
            tensor_parallel_degree=2, expert_tensor_parallel_degree=2, **EP2_TP2
        ),
        ac=ActivationCheckpointConfig(mode="full"),
    ),
    "fsdp2_tp2_ep4": dict(
        parallelism=ParallelismConfig(
            tensor_parallel_degree=2, expert_parallel_degree=4, disable_loss_parallel=True
        )
    ),
}


def main() -> None:
    family, scenarios = sys.argv[1], sys.argv[2:]
    torch.set_num_threads(1)
    placement = init_distributed(CommConfig(init_timeout_seconds=60))
    set_determinism(None, device=placement.device, debug=DebugConfig())
    generator = torch.Generator().manual_seed(1234)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=generator)
    labels = torch.randint(0, VOCAB, (BATCH, SEQ), generator=generator)
    state, steps = reference(family, tokens, labels)
    for name in scenarios:
        run_scenario(
            family,
            name,
            state=state,
            steps=steps,
            tokens=tokens,
            labels=labels,
            **SCENARIOS[name],
        )
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    from script_exit import run_and_leave  # beside this script: the first entry of sys.path

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    run_and_leave(main)
