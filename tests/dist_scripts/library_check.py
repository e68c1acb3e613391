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
import torch.nn.functional as F

from tests.dist_scripts.library_common import (
    FP32_TOL,
    MOE_LAYOUTS,
    TRAINERS,
    build,
    concatenated,
    data,
    full_grads,
    same,
    say,
)
from tests.dist_scripts.library_misuse import misuse, one_rank_refuses, pipeline
from titan.training.library_weights import canonical_name


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


SCENARIOS = {
    "checkpoints": checkpoints,
    "one_rank_refuses": one_rank_refuses,
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
