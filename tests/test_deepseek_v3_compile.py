"""torch.compile of deepseek_v3's blocks trains exactly as eager.

One CPU process trains under bfloat16 autocast (``titan.distributed.amp.amp_context``), with the
backward outside it. MLA's query/key heads are wider than its values, so SDPA cannot take the
CPU's fused kernel and runs its math path, which computes in float32 inside autocast. Compiled
blocks (aot_eager, per block, per-op activation checkpointing as the debug config) must get
eager's gradients there, and so its losses and expert biases bit for bit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest
import torch

from tests.dist_scripts.deepseek_v3_parallel_check import model_config as parallel_check_config
from tests.dist_scripts.parallel_check import BATCH, SEQ, VOCAB
from tests.training_runs import compiled_and_eager_loop, loss_bits
from titan.components.loss import cross_entropy_loss
from titan.config.configs import ActivationCheckpointConfig, ParallelismConfig, TrainingConfig
from titan.distributed.activation_checkpoint import apply_activation_checkpointing
from titan.distributed.amp import amp_context
from titan.distributed.parallel_dims import ParallelDims
from titan.distributed.parallelize import apply_compile
from titan.models.common.moe_balance import balanced_moe_layers, update_expert_bias
from titan.models.deepseek_v3.model import DeepSeekV3Model

STEPS = 4


def tiny_config() -> DeepSeekV3Model.Config:
    """The torchrun checks' tiny deepseek_v3 (MLA with a query LoRA, heads of 16 + 8 rope
    against values of 16, YaRN on, group-limited routing), its experts by the exact loop."""
    config = parallel_check_config()
    assert config.layer.moe is not None
    config.layer.moe.use_grouped_mm = False
    return config


def prepared_model(*, compiled: bool) -> DeepSeekV3Model:
    """The tiny model from seed 0, per-op checkpointed, and compiled block by block if asked."""
    with torch.device("meta"):
        model = tiny_config().build()
    model.to_empty(device="cpu")
    torch.manual_seed(0)
    model.init_weights()
    apply_activation_checkpointing(
        model,
        config=ActivationCheckpointConfig(selective_ac_option="op"),
    )
    if compiled:
        # A fresh compilation: graphs another test traced must not be reused here.
        torch._dynamo.reset()
        apply_compile(model, backend="aot_eager")
    return model


def batch(step: int) -> torch.Tensor:
    """``[BATCH, SEQ + 1]`` tokens of ``step``: inputs are all but the last, labels all but the
    first."""
    return torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=torch.Generator().manual_seed(step))


def one_process_amp() -> contextlib.AbstractContextManager:
    """What titan-train runs one process's forward in: bfloat16 autocast on CPU."""
    dims = ParallelDims.from_config(ParallelismConfig(), world_size=1)
    return amp_context(dims, training=TrainingConfig(), device_type="cpu")


def train(
    model: DeepSeekV3Model, *, forward_context: Callable[[], contextlib.AbstractContextManager]
) -> list[float]:
    """``STEPS`` AdamW steps as titan-train takes them (clipped at norm 1, expert biases moved
    after each step); the losses."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    moe_layers = balanced_moe_layers([model])
    losses = []
    for step in range(STEPS):
        tokens = batch(step)
        with forward_context():
            loss = cross_entropy_loss(model(tokens[:, :-1]), tokens[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        update_expert_bias(moe_layers, dp_mesh=None)
        losses.append(loss.item())
    return losses


def expert_biases(model: DeepSeekV3Model) -> list[torch.Tensor]:
    """Every MoE layer's expert bias, in layer order."""
    return [layer.expert_bias for layer in balanced_moe_layers([model])]


def first_gradients(
    model: DeepSeekV3Model, *, forward_context: Callable[[], contextlib.AbstractContextManager]
) -> dict[str, torch.Tensor]:
    """Each parameter's gradient after one forward (in ``forward_context``) and backward."""
    tokens = batch(0)
    with forward_context():
        loss = cross_entropy_loss(model(tokens[:, :-1]), tokens[:, 1:])
    loss.backward()
    return {name: p.grad for name, p in model.named_parameters()}


def test_compiled_blocks_train_with_eager_losses_and_expert_biases():
    eager = prepared_model(compiled=False)
    compiled = prepared_model(compiled=True)
    eager_losses = train(eager, forward_context=one_process_amp)
    compiled_losses = train(compiled, forward_context=one_process_amp)
    assert loss_bits(compiled_losses) == loss_bits(eager_losses)
    assert eager_losses[-1] < eager_losses[0]
    biases = expert_biases(eager)
    assert len(biases) == 2 and all(bias.any() for bias in biases)
    for got, want in zip(expert_biases(compiled), biases, strict=True):
        assert torch.equal(got, want)


def test_compiled_backward_traced_under_autocast_would_leave_eager():
    """The cause the forward context removes: compiled with the backward traced under the
    forward's autocast (torch's default), SDPA's float32 backward matmuls run in bfloat16 and
    the attention's gradients move off eager's (measured 2e-3 to 5e-3 relative); the first step's
    loss stays bitwise, so only the second step's shows it."""

    def plain_autocast() -> contextlib.AbstractContextManager:
        return torch.autocast("cpu", dtype=torch.bfloat16)

    eager = first_gradients(prepared_model(compiled=False), forward_context=plain_autocast)
    compiled = first_gradients(prepared_model(compiled=True), forward_context=plain_autocast)
    moved = [name for name, grad in eager.items() if not torch.equal(compiled[name], grad)]
    assert any("attention.wkv_b" in name for name in moved)


@pytest.mark.slow  # two titan-train processes
def test_titan_train_compiled_debug_model_trains_like_eager(tmp_path):
    """titan-train with --compile.enable (aot_eager) on the debug model: 3 steps with the eager
    run's losses bit for bit (both run the experts' exact loop, as a compiled float32 MoE does).
    In float32, as the other titan-train runs of the suite: the tests above hold compiled blocks
    to eager under titan-train's bfloat16 autocast (``amp_context``), in this process."""
    compiled, eager = compiled_and_eager_loop(
        "from titan.models.deepseek_v3.config_registry import deepseek_v3_debugmodel as base\n",
        tmp_path,
    )
    assert len(eager.losses) == 3
    assert loss_bits(compiled.losses) == loss_bits(eager.losses)
