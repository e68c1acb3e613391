"""The trainer's library API against ``train()`` and against a one-process reference.

Usage: ``library_check.py DUMP_FOLDER SCENARIO...``, as one process (plain ``python``) or under
``torchrun --nproc-per-node 2`` (gloo, CPU). Every scenario builds real trainers from the llama3
debug registry, deepseek_v3's for the MoE layouts (sequence 64, batch 2, seed 7). Rank 0
prints ``OK <scenario>: ...`` for each; any mismatch raises, so the launch fails.

Layouts (``LAYOUTS``) name the parallel degrees a scenario runs under; a two-process launch
runs FSDP 2, TP 2 (loss parallel off and on), EP 2 and PP 2 side by side on the same process
group.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.tensor import DTensor

from titan.training.library_weights import canonical_name
from titan.training.step_api import Microbatch, TrainerUsageError

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


def same_as_train(dump: str, layout: str) -> str:
    """forward_backward + optim_step on train()'s first batch: its loss, norm and weights."""
    cli = build(dump, f"{layout}-cli", layout=layout, accumulation=2)
    lib = build(dump, f"{layout}-lib", layout=layout, accumulation=2)
    logged = []
    log = cli.parts.metrics.log
    cli.parts.metrics.log = lambda **kw: (logged.append(kw), log(**kw))[1]
    cli.train()
    batches = iter(lib.parts.dataloader)
    micro = [lib.parts.to_device(next(batches)) for _ in range(2)]
    metrics = lib.forward_backward(micro)
    out = lib.optim_step()
    assert metrics.loss == logged[0]["loss"], (metrics.loss, logged[0]["loss"])
    assert out.metrics["grad_norm"] == logged[0]["grad_norm"], (out.metrics, logged[0])
    assert out.policy_version == 1 == lib.policy_version, out
    assert metrics.microbatches == 2 and metrics.num_global_valid_tokens == metrics.valid_tokens
    same(lib.model_state_dict(), cli.model_state_dict(), f"{layout}: weights after one step")
    return f"loss {metrics.loss!r}, grad norm {out.metrics['grad_norm']!r}"


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


VALID = {0: [3, 40, 0], 1: [77, 5, 128]}
"""Valid tokens per micro-batch of each data-parallel rank: few, many, none and all."""


def accumulation(dump: str, layout: str) -> str:
    """Several calls equal one call on the concatenated micro-batches, and both equal the
    global per-token mean loss computed by hand on the one-process model."""
    split = build(dump, f"{layout}-split", layout=layout, fp32=True)
    joined = build(dump, f"{layout}-joined", layout=layout, fp32=True)
    dims, mesh = split.parts.parallel_dims, split.parts.world_mesh
    dp, dp_rank = dims.dp_degree, dims.dp_rank(mesh) if mesh is not None else 0
    total = sum(sum(VALID[r]) for r in range(dp))
    mine = data(100 + dp_rank, valid=VALID[dp_rank])
    initial = split.model_state_dict()

    parts = [split.forward_backward([b], num_global_valid_tokens=total) for b in mine]
    one = joined.forward_backward([concatenated(mine)])
    assert one.num_global_valid_tokens == one.valid_tokens == total, one
    assert sum(p.valid_tokens for p in parts) == total, parts
    split_loss = sum(p.loss for p in parts)
    torch.testing.assert_close(split_loss, one.loss, **FP32_TOL)
    same(full_grads(split), full_grads(joined), f"{layout}: gradients", **FP32_TOL)

    # By hand: every rank's tokens through the unsharded model, summed CE over the valid
    # tokens, divided by their number.
    model_config = split.config.model_spec.model
    with torch.device("meta"):
        reference = model_config.build()
    reference.to_empty(device="cpu")
    reference.init_weights()
    reference.load_state_dict(initial)
    loss = torch.zeros(())
    for r in range(dp):
        for batch in data(100 + r, valid=VALID[r]):
            logits = reference(batch.token_ids).flatten(0, 1).float()
            each = F.cross_entropy(logits, batch.labels.flatten(), reduction="none")
            loss = loss + each[batch.loss_mask.flatten()].sum()
    loss = loss / total
    loss.backward()
    want = {canonical_name(n): p.grad for n, p in reference.named_parameters()}
    torch.testing.assert_close(one.loss, loss.item(), **FP32_TOL)
    same(
        full_grads(joined), want, f"{layout}: gradients against the hand-computed loss", **FP32_TOL
    )

    # A count twice as large halves every gradient (it counts tokens of other calls).
    halved = build(dump, f"{layout}-halved", layout=layout, fp32=True)
    halved.forward_backward([concatenated(mine)], num_global_valid_tokens=2 * total)
    got = full_grads(halved)
    same(got, {k: v / 2 for k, v in want.items()}, f"{layout}: halved gradients", **FP32_TOL)

    split.optim_step(), joined.optim_step()
    same(split.model_state_dict(), joined.model_state_dict(), f"{layout}: weights", **FP32_TOL)
    return f"loss {one.loss!r} over {total} tokens"


def state_dict(dump: str, layout: str) -> str:
    """bf16 Hugging Face weights: written by the one-process run, equal under every layout."""
    trainer = build(dump, f"{layout}-weights", layout=layout)
    weights = trainer.model_state_dict(dtype=torch.bfloat16, hf_names=True)
    plain = trainer.model_state_dict()
    assert any(v.dtype == torch.bfloat16 for v in weights.values())
    for key, value in plain.items():
        assert value.dtype == torch.float32, f"{key}: {value.dtype}"
    buffers = {canonical_name(n) for n, _ in trainer.parts.model.named_buffers()}
    assert all(
        plain[name].dtype == trainer.model_state_dict(dtype=torch.bfloat16)[name].dtype
        for name in buffers & plain.keys()
    )
    family = "moe" if layout in MOE_LAYOUTS else "dense"
    reference = os.path.join(dump, f"hf_bf16_{family}.pt")
    if layout in ("one", "moe"):
        torch.save(weights, reference)
    else:
        same(weights, torch.load(reference), f"{layout}: bf16 Hugging Face weights")
    return f"{len(weights)} tensors"


def float8(dump: str, layout: str) -> str:
    """Emulated float8 trains through optim_step: its post-optimizer hook runs once per step,
    and the weights are train()'s."""
    cli = build(dump, "f8-cli", layout=layout, float8=True)
    lib = build(dump, "f8-lib", layout=layout, float8=True)
    converters = lib.parts.converters
    calls = []
    hook = converters.post_optimizer_hook
    converters.post_optimizer_hook = lambda parts: (calls.append(1), hook(parts))[1]
    cli.train()
    batch = lib.parts.to_device(next(iter(lib.parts.dataloader)))
    lib.forward_backward([batch])
    lib.optim_step()
    assert calls == [1], calls
    assert any("Float8" in type(m).__name__ for m in lib.parts.model.modules())
    same(lib.model_state_dict(), cli.model_state_dict(), "float8: weights after one step")
    return "post-optimizer hook ran once"


def misuse(dump: str, layout: str) -> str:
    """Wrong calls raise TrainerUsageError with a message naming the problem."""
    trainer = build(dump, "misuse", layout=layout)
    good = data(5, valid=[10])[0]
    cases = {
        "no gradients": lambda: trainer.optim_step(),
        "at least one": lambda: trainer.forward_backward([]),
        "list of micro-batches": lambda: trainer.forward_backward(good),
        "expected a Microbatch": lambda: trainer.forward_backward([good.token_ids]),
        "integer token ids": lambda: trainer.forward_backward(
            [(good.token_ids.float(), good.labels)]
        ),
        "must match": lambda: trainer.forward_backward([(good.token_ids, good.labels[:, :5])]),
        "[batch, seq]": lambda: trainer.forward_backward([(good.token_ids[0], good.labels[0])]),
        "bool tensor": lambda: trainer.forward_backward(
            [
                Microbatch(
                    token_ids=good.token_ids, labels=good.labels, loss_mask=good.loss_mask.long()
                )
            ]
        ),
        "0..seq-1": lambda: trainer.forward_backward(
            [
                Microbatch(
                    token_ids=good.token_ids,
                    labels=good.labels,
                    positions=torch.zeros_like(good.token_ids),
                )
            ]
        ),
        "must be a torch.Tensor": lambda: trainer.forward_backward([([1, 2], good.labels)]),
        "must count every valid": lambda: trainer.forward_backward(
            [good], num_global_valid_tokens=3
        ),
        "must be an int": lambda: trainer.forward_backward([good], num_global_valid_tokens=2.0),
        "must be callable": lambda: trainer.forward_backward([good], loss_fn="sum"),
        "step must be an int": lambda: trainer.save_checkpoint(step=0),
        "floating torch.dtype": lambda: trainer.model_state_dict(dtype=torch.int8),
    }
    for needle, call in cases.items():
        try:
            call()
        except TrainerUsageError as error:
            assert needle in str(error), f"{needle!r} not in {error}"
        else:
            raise AssertionError(f"no error for {needle!r}")
    trainer.forward_backward([good])  # still usable after refused calls
    assert trainer.optim_step().policy_version == 1
    trainer.close()
    trainer.close()  # twice: nothing more
    for call in (
        lambda: trainer.forward_backward([good]),
        trainer.optim_step,
        lambda: trainer.model_state_dict(),
        lambda: trainer.save_checkpoint(step=1),
    ):
        try:
            call()
        except TrainerUsageError as error:
            assert "the trainer is closed" in str(error), error
        else:
            raise AssertionError("a call after close was not refused")
    return f"{len(cases)} refusals and calls after close"


def checkpoints(dump: str, layout: str) -> str:
    """save_checkpoint / load_checkpoint through the run's checkpointer: a later step is undone
    and the policy version comes back with the weights."""
    trainer = build(dump, f"{layout}-checkpoints", layout=layout, checkpoint_interval=2)
    batches = data(9, valid=[50, 60, 70])
    for batch in batches[:2]:
        trainer.forward_backward([batch])
        trainer.optim_step()
    assert not trainer.save_checkpoint(step=1), "step 1 is not due (interval 2)"
    assert trainer.save_checkpoint(step=2)
    saved = trainer.model_state_dict()
    trainer.forward_backward([batches[2]])
    assert trainer.optim_step().policy_version == 3
    assert trainer.load_checkpoint()
    assert trainer.policy_version == 2
    same(trainer.model_state_dict(), saved, f"{layout}: weights after load_checkpoint()")
    trainer.forward_backward([batches[2]])
    trainer.optim_step()
    folder = os.path.join(trainer.config.dump_folder, "checkpoint", "step-2")
    assert trainer.load_checkpoint(path=folder)
    assert trainer.policy_version == 2
    same(trainer.model_state_dict(), saved, f"{layout}: weights after load_checkpoint(path)")
    return "saved step 2, restored it by step and by path"


def pipeline(dump: str, layout: str) -> str:
    """Under pipeline parallel every library call is refused with what to do instead."""
    trainer = build(dump, f"{layout}-refused", layout=layout)
    batch = data(5, valid=[10])[0]
    calls = {
        "forward_backward": lambda: trainer.forward_backward([batch]),
        "optim_step": trainer.optim_step,
        "model_state_dict": trainer.model_state_dict,
        "save_checkpoint": lambda: trainer.save_checkpoint(step=1),
        "load_checkpoint": trainer.load_checkpoint,
    }
    for name, call in calls.items():
        try:
            call()
        except TrainerUsageError as error:
            assert f"{name}: the library calls do not run under pipeline parallel" in str(error)
        else:
            raise AssertionError(f"{name} ran under pipeline parallel")
    return f"{len(calls)} calls refused"


SCENARIOS = {
    "checkpoints": checkpoints,
    "pipeline": pipeline,
    "same_as_train": same_as_train,
    "accumulation": accumulation,
    "state_dict": state_dict,
    "float8": float8,
    "misuse": misuse,
}


def main(dump: str, names: list[str]) -> None:
    """Run the scenarios ``names`` (``scenario:layout``) in order; close every trainer."""
    try:
        for name in names:
            scenario, layout = name.rsplit(":", 1)
            say(f"OK {name}: {SCENARIOS[scenario](dump, layout)}")
    finally:
        for trainer in TRAINERS:
            trainer.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
