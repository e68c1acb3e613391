"""The library checks of misuse (``library_check.py`` runs them): every wrong call is refused
with a ``TrainerUsageError`` that names the problem, on every rank, and the trainer goes on."""

from __future__ import annotations

import torch
import torch.distributed as dist

from tests.dist_scripts.library_common import build, data, rank
from titan.training.step_api import Microbatch, TrainerUsageError


def misuse(dump: str, layout: str) -> str:
    """Wrong calls raise TrainerUsageError with a message naming the problem."""
    trainer = build(dump, "misuse", layout=layout)
    good = data(5, valid=[10])[0]
    vocab = trainer.config.model_spec.model.vocab_size
    negative, beyond = good.labels.clone(), good.token_ids.clone()
    negative[0, 2], beyond[1, 0] = -1, vocab
    cases = {
        f"token_ids[1, 0] is {vocab}, outside the model's vocabulary (0..{vocab - 1})": (
            lambda: trainer.forward_backward([(beyond, good.labels)])
        ),
        "labels[0, 2] is -1, outside the model's vocabulary": lambda: trainer.forward_backward(
            [(good.token_ids, negative)], loss_fn=lambda logits, batch: logits.sum()
        ),
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
        "must be a positive int": lambda: trainer.forward_backward(
            [good], num_global_valid_tokens=2.0
        ),
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


def one_rank_refuses(dump: str, layout: str) -> str:
    """Micro-batches refused on one rank only: every rank refuses the call (none waits in the
    forward's collectives), and the trainer goes on with the next good call."""
    trainer = build(dump, f"{layout}-one-refuses", layout=layout)
    good = data(6 + rank(), valid=[20])[0]
    vocab = trainer.config.model_spec.model.vocab_size
    beyond = good.token_ids.clone()
    beyond[1, 3] = vocab
    wrong = {
        "integer token ids": (good.token_ids.float(), good.labels),
        "must match": (good.token_ids, good.labels[:, :7]),
        f"token_ids[1, 3] is {vocab}, outside the model's vocabulary": (beyond, good.labels),
    }
    for needle, bad in wrong.items():
        mine = bad if rank() == 1 else good
        try:
            trainer.forward_backward([mine])
        except TrainerUsageError as error:
            want = needle if rank() == 1 else "1 other rank(s) refused"
            assert want in str(error), error
        else:
            raise AssertionError(f"rank {rank()} ran a call that rank 1 refused")
    # Different micro-batch counts: every rank is refused with each rank's count, before the
    # forward's collectives (where the rank with fewer would wait for the others).
    counts = ", ".join(f"rank {r}: {1 + (r == 1)}" for r in range(dist.get_world_size()))
    try:
        trainer.forward_backward([good] * (1 + (rank() == 1)))
    except TrainerUsageError as error:
        assert f"the ranks hold different numbers of micro-batches ({counts})" in str(error)
    else:
        raise AssertionError(f"rank {rank()} ran a call with mismatched micro-batch counts")
    trainer.forward_backward([good])
    assert trainer.optim_step().policy_version == 1
    return f"{len(wrong) + 1} one-rank refusals reached every rank"


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
