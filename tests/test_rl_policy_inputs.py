"""PolicyTrainer refuses micro-batches its loss cannot use at the call that received them: no
token to learn from, non-finite advantages or log-probabilities, log-probabilities above 0,
token ids or labels outside the vocabulary. Each refusal names the micro-batch, the field and
the position, and leaves every part of the trainer's state as it was (weights, gradients,
AdamW moments, learning rate schedule, policy version)."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from titan.models.llama3.config_registry import llama3_debugmodel
from titan.rl import PolicyTrainer, policy_microbatch
from titan.training.step_api import Microbatch, TrainerUsageError

VOCAB = 2048  # the llama3 debug model's


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    """A debugmodel policy trainer that has taken one step (AdamW holds moments)."""
    base = llama3_debugmodel()
    base.training.seq_len, base.training.local_batch_size = 16, 2
    base.dump_folder = str(tmp_path_factory.mktemp("inputs") / "out")
    base.debug.seed = 3
    base.training.mixed_precision_param = "float32"  # no emulated bf16 on a CPU without it
    with PolicyTrainer.config_of(base).build() as built:
        built.forward_backward([_batch()])
        built.optim_step()
        yield built


def _batch(**changes):
    """A good policy micro-batch (2 x 16, the first 4 tokens a masked prompt) with ``changes``
    applied to its tensors (``name=lambda tensor: ...``)."""
    gen = torch.Generator().manual_seed(5)
    fields = {
        "token_ids": torch.randint(0, VOCAB, (2, 16), generator=gen),
        "generator_logprobs": -torch.rand(2, 16, generator=gen) - 0.1,
        "advantages": torch.tensor([0.5, -0.5]),
        "loss_mask": torch.ones(2, 16, dtype=torch.bool),
    }
    fields["labels"] = torch.roll(fields["token_ids"], -1, dims=1)
    fields["loss_mask"][:, :4] = False
    for name, change in changes.items():
        fields[name] = change(fields[name].clone())
    return policy_microbatch(**fields)


def _state(trainer):
    """Everything a step moves: weights, gradients, optimizer and schedule state, version."""
    model = trainer.parts.model
    return {
        "weights": {n: p.detach().clone() for n, p in model.named_parameters()},
        "grads": {
            n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()
        },
        "optimizer": copy.deepcopy(trainer.parts.optimizers.state_dict()),
        "schedule": [copy.deepcopy(s.state_dict()) for s in trainer.parts.lr_schedulers],
        "version": trainer.policy_version,
        "pending": trainer._pending,
    }


def _same(a, b) -> bool:
    """Whether two nested structures of tensors and plain values are equal, bit for bit."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))


def _set(index, value):
    """A change that writes ``value`` at ``index``."""

    def change(tensor):
        tensor[index] = value
        return tensor

    return change


REFUSED = {
    "mask all false": (
        {"loss_mask": lambda m: torch.zeros_like(m)},
        r"microbatch 1: no token.s loss counts \(its loss_mask is false everywhere\)",
    ),
    "labels all -100": (
        {"labels": lambda t: torch.full_like(t, -100), "loss_mask": lambda m: m | True},
        "microbatch 1: no token's loss counts",
    ),
    "nan advantage": ({"advantages": _set(1, math.nan)}, r"advantages\[1\] is nan"),
    "inf advantage": ({"advantages": _set(0, math.inf)}, r"advantages\[0\] is inf"),
    "nan logprob": (
        {"generator_logprobs": _set((1, 6), math.nan)},
        r"generator_logprobs\[1, 6\] is nan",
    ),
    "-inf logprob": (
        {"generator_logprobs": _set((0, 15), -math.inf)},
        r"generator_logprobs\[0, 15\] is -inf",
    ),
    "logprob above 0": (
        {"generator_logprobs": _set((0, 9), 0.25)},
        r"generator_logprobs\[0, 9\] is 0.25, above 0",
    ),
    "token id = vocab": (
        {"token_ids": _set((1, 2), VOCAB)},
        rf"token_ids\[1, 2\] is {VOCAB}, outside the model's vocabulary \(0..{VOCAB - 1}\)",
    ),
    "negative token id": ({"token_ids": _set((0, 0), -3)}, r"token_ids\[0, 0\] is -3, outside"),
    "label past vocab": (
        {"labels": _set((0, 5), VOCAB + 7)},
        rf"labels\[0, 5\] is {VOCAB + 7}, outside .*0..{VOCAB - 1} or -100",
    ),
    "negative label": ({"labels": _set((1, 0), -2)}, r"labels\[1, 0\] is -2, outside"),
    "float token ids": ({"token_ids": lambda t: t.float()}, "token_ids must hold integer"),
    "per-token advantages of another shape": (
        {"advantages": lambda a: torch.zeros(2, 15)},
        r"advantages must be \[batch\]",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_refused_micro_batch_moves_nothing(trainer, case):
    """The bad micro-batch is the second of the call: refused naming microbatch 1 and where;
    the trainer's state is bit for bit what it was, and optim_step has nothing to apply."""
    changes, words = REFUSED[case]
    before = _state(trainer)
    with pytest.raises(TrainerUsageError, match=words) as raised:
        trainer.forward_backward([_batch(), _batch(**changes)])
    assert "microbatch 1" in str(raised.value)
    assert _same(_state(trainer), before)
    with pytest.raises(TrainerUsageError, match="no gradients to apply"):
        trainer.optim_step()
    assert _same(_state(trainer), before)


def test_values_at_masked_tokens_are_never_read(trainer):
    """NaN, -inf and positive values at masked (prompt) positions and an all-masked row's
    advantage are accepted and leave the loss and every gradient finite."""
    batch = _batch(
        generator_logprobs=_set((0, 1), math.nan),
        loss_mask=_set(1, False),
        advantages=_set(1, math.nan),
    )
    spoiled = batch.extras["generator_logprobs"]
    spoiled[1, 2], spoiled[0, 3] = -math.inf, 3.0
    metrics = trainer.forward_backward([batch])
    assert math.isfinite(metrics.loss)
    grads = [p.grad for p in trainer.parts.model.parameters() if p.grad is not None]
    assert grads and all(bool(torch.isfinite(g).all()) for g in grads)
    trainer.parts.optimizers.zero_grad()
    trainer._pending = trainer._pending_tokens = 0  # drop this step: the others compare state


@pytest.mark.parametrize(
    ("item", "words"),
    [
        ((torch.tensor([[1, VOCAB]]), torch.tensor([[1, 2]])), rf"token_ids\[0, 1\] is {VOCAB}"),
        ((torch.tensor([[1, 2]]), torch.tensor([[-7, 2]])), r"labels\[0, 0\] is -7"),
        (Microbatch(token_ids=torch.tensor([[-1, 2]]), labels=torch.tensor([[1, 2]])), "is -1"),
    ],
)
def test_cross_entropy_step_refuses_ids_outside_the_vocabulary(trainer, item, words):
    """The supervised call too: a clear refusal, not the embedding's IndexError."""
    before = _state(trainer)
    with pytest.raises(TrainerUsageError, match=words):
        trainer.cross_entropy_step([item])
    assert _same(_state(trainer), before)


@pytest.mark.parametrize(
    ("counts", "words"),
    [
        ({"num_global_valid_tokens": "24"}, "num_global_valid_tokens must be a positive int"),
        ({"num_global_valid_tokens": [24]}, "num_global_valid_tokens must be a positive int"),
        ({"num_global_valid_tokens": (24,)}, "num_global_valid_tokens must be a positive int"),
    ],
)
def test_bad_global_counts_move_nothing(trainer, counts, words):
    """A valid-token count that is not a number is refused, not a TypeError in the loss."""
    before = _state(trainer)
    with pytest.raises(TrainerUsageError, match=words):
        trainer.forward_backward([_batch()], **counts)
    assert _same(_state(trainer), before)
