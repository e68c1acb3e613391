"""Run under ``torchrun --nproc-per-node 2`` (gloo, CPU): parallelized llama3 vs one process.

Every scenario builds a tiny llama3 on the meta device, parallelizes it, loads the reference
model's weights into its shards, and compares loss, gradients and the clipped gradient norm
with the unsharded model's. Rank 0 prints one ``OK <scenario> ...`` line per scenario; any
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
from torch.distributed.tensor.parallel import loss_parallel

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
from titan.distributed.grad_norm import clip_grad_norm_
from titan.distributed.parallel_dims import ParallelDims
from titan.distributed.parallelize import parallelize_model
from titan.distributed.process_group import init_distributed, set_train_timeout
from titan.distributed.reductions import dist_max, dist_mean
from titan.models.common.attention import Attention
from titan.models.common.decoder import TransformerBlock
from titan.models.common.feed_forward import FeedForward
from titan.models.llama3 import model_registry
from titan.models.llama3.model_config import Llama3Model

BATCH, SEQ, VOCAB = 4, 16, 128
# A max_norm below the gradient norm, so clipping really scales.
MAX_NORM = 0.05
# fp32 with different reduction orders (sharded matmuls, reduce-scatter) agrees to ~1e-6.
FP32_TOL = {"rtol": 1e-4, "atol": 1e-5}


def model_config() -> Llama3Model.Config:
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


def build_on_meta() -> torch.nn.Module:
    with torch.device("meta"):
        return model_config().build()


def clean_fqn(name: str) -> str:
    return name.replace("_checkpoint_wrapped_module.", "").replace("_orig_mod.", "")


@dataclasses.dataclass
class Reference:
    state: dict[str, torch.Tensor]
    loss: float
    grads: dict[str, torch.Tensor]
    norm: float
    clipped: dict[str, torch.Tensor]


def reference(tokens: torch.Tensor, labels: torch.Tensor) -> Reference:
    model = build_on_meta()
    model.to_empty(device="cpu")
    torch.manual_seed(0)
    model.init_weights()
    loss = cross_entropy_loss(model(tokens), labels)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
    clipped = {n: p.grad.clone() for n, p in model.named_parameters()}
    state = {n: t.detach().clone() for n, t in model.state_dict().items()}
    return Reference(state=state, loss=loss.item(), grads=grads, norm=norm.item(), clipped=clipped)


def full_grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    out = {}
    for name, param in model.named_parameters():
        grad = param.grad
        out[clean_fqn(name)] = grad.full_tensor() if isinstance(grad, DTensor) else grad
    return out


def compare(
    scenario: str, what: str, got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], tol
) -> float:
    assert got.keys() == want.keys(), (
        f"{scenario}: parameter names differ: {got.keys() ^ want.keys()}"
    )
    worst = 0.0
    for name, value in want.items():
        if not torch.allclose(got[name].float(), value, **tol):
            diff = (got[name].float() - value).abs().max().item()
            raise AssertionError(f"{scenario}: {what} of {name} differs by {diff}")
        worst = max(worst, (got[name].float() - value).abs().max().item())
    return worst


def run_scenario(
    name: str,
    *,
    ref: Reference,
    tokens: torch.Tensor,
    labels: torch.Tensor,
    parallelism: ParallelismConfig,
    training: TrainingConfig | None = None,
    ac: ActivationCheckpointConfig | None = None,
    tol=FP32_TOL,
) -> None:
    world_size = dist.get_world_size()
    training = training or TrainingConfig(seq_len=SEQ, mixed_precision_param="float32")
    dims = ParallelDims.from_config(parallelism, world_size=world_size)
    mesh = dims.build_mesh("cpu")
    model = build_on_meta()
    parallelize_model(
        model,
        spec=dataclasses.replace(model_registry("debugmodel"), model=model_config()),
        parallel_dims=dims,
        world_mesh=mesh,
        training=training,
        parallelism=parallelism,
        activation_checkpoint=ac or ActivationCheckpointConfig(mode="none"),
        compile=CompileConfig(),
    )
    model.to_empty(device="cpu")
    model.init_weights()  # the rope buffer; the weights are overwritten below
    # How a trainer loads a seed checkpoint: full tensors in, shards (and clean FQNs) handled
    # by DCP, so the shards hold exactly the single-process weights. (It replaces the values
    # of the dict it gets with shards, hence the copy.)
    set_model_state_dict(model, dict(ref.state), options=StateDictOptions(full_state_dict=True))

    # Data parallel ranks see their slice of the batch; TP ranks all see the whole batch.
    dp_rank, dp_degree = dims.dp_rank(mesh), dims.dp_degree
    rows = slice(dp_rank * BATCH // dp_degree, (dp_rank + 1) * BATCH // dp_degree)
    logits = model(tokens[rows])
    if dims.loss_parallel_enabled:
        assert isinstance(logits, DTensor), f"{name}: loss parallel logits should be a DTensor"
        with loss_parallel():
            loss = cross_entropy_loss(logits, labels[rows])
            loss.backward()
    else:
        loss = cross_entropy_loss(logits, labels[rows])
        loss.backward()
    mean_loss = dist_mean(loss, dims.mesh(mesh, "dp"))
    assert abs(mean_loss - ref.loss) <= 1e-4 + tol["rtol"] * abs(ref.loss), (
        f"{name}: loss {mean_loss} != reference {ref.loss}"
    )
    grad_diff = compare(name, "gradient", full_grads(model), ref.grads, tol)
    norm = clip_grad_norm_(model.parameters(), MAX_NORM)
    assert not isinstance(norm, DTensor)
    assert abs(norm.item() - ref.norm) <= tol["rtol"] * ref.norm + tol["atol"], (
        f"{name}: grad norm {norm.item()} != reference {ref.norm}"
    )
    # Every rank clipped with the same norm.
    assert abs(dist_max(norm, dims.mesh(mesh, "dp")) - norm.item()) <= 1e-6 * norm.item()
    compare(name, "clipped gradient", full_grads(model), ref.clipped, tol)
    if dist.get_rank() == 0:
        print(
            f"OK {name}: loss {mean_loss:.6f} (ref {ref.loss:.6f}) "
            f"norm {norm.item():.6f} (ref {ref.norm:.6f}) max grad diff {grad_diff:.2e}",
            flush=True,
        )


def main() -> None:
    torch.set_num_threads(1)
    placement = init_distributed(CommConfig(init_timeout_seconds=60))
    world_size = placement.world_size
    seed = set_determinism(None, device=placement.device, debug=DebugConfig())
    seeds = [None] * world_size
    dist.all_gather_object(seeds, seed)
    assert len(set(seeds)) == 1, f"ranks disagree on the broadcast seed: {seeds}"

    generator = torch.Generator().manual_seed(1234)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=generator)
    labels = torch.randint(0, VOCAB, (BATCH, SEQ), generator=generator)
    ref = reference(tokens, labels)

    selected = sys.argv[1:] or ["fsdp", "tp", "ddp", "fsdp_tp", "fsdp_bf16"]
    scenarios = {
        "fsdp": dict(
            parallelism=ParallelismConfig(),
            ac=ActivationCheckpointConfig(mode="selective", selective_ac_option="op"),
        ),
        "tp": dict(
            parallelism=ParallelismConfig(data_parallel_shard_degree=1, tensor_parallel_degree=2),
            ac=ActivationCheckpointConfig(mode="full"),
        ),
        "tp_no_loss_parallel": dict(
            parallelism=ParallelismConfig(
                data_parallel_shard_degree=1, tensor_parallel_degree=2, disable_loss_parallel=True
            ),
        ),
        "ddp": dict(
            parallelism=ParallelismConfig(
                data_parallel_replicate_degree=2, data_parallel_shard_degree=1
            ),
            ac=ActivationCheckpointConfig(mode="selective", selective_ac_option="2"),
        ),
        "hsdp": dict(parallelism=ParallelismConfig(data_parallel_replicate_degree=2)),
        "fsdp_tp": dict(parallelism=ParallelismConfig(tensor_parallel_degree=2)),
        "fsdp_cpu_offload": dict(
            parallelism=ParallelismConfig(),
            training=TrainingConfig(
                seq_len=SEQ, mixed_precision_param="float32", enable_cpu_offload=True
            ),
        ),
        # bf16 all-gathers over gloo: only agreement to bf16 precision is expected.
        "fsdp_bf16": dict(
            parallelism=ParallelismConfig(),
            training=TrainingConfig(seq_len=SEQ, mixed_precision_param="bfloat16"),
            tol={"rtol": 5e-2, "atol": 5e-3},
        ),
    }
    for name in selected:
        run_scenario(name, ref=ref, tokens=tokens, labels=labels, **scenarios[name])
    dims = ParallelDims.from_config(ParallelismConfig(), world_size=world_size)
    set_train_timeout(CommConfig(train_timeout_seconds=30), world_mesh=dims.build_mesh("cpu"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    from script_exit import run_and_leave  # beside this script: the first entry of sys.path

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    run_and_leave(main)
