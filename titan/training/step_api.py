"""The pieces of one optimizer step that ``Trainer.train`` and the library API share.

A step is any number of forward/backward passes that accumulate gradients, then one update:
clip, optimizer step (the model converters' post-optimizer hooks run inside it), LR schedule.
``train`` and the library calls (``Trainer.forward_backward`` / ``Trainer.optim_step``) run the
same functions here, so the CLI path and the library path give the same weights bit for bit.

Loss normalisation: each micro-batch's loss is divided by the step's *global* count of valid
tokens (over every micro-batch of every data-parallel rank) before backward. FSDP and DDP
average gradients over the data-parallel (loss) mesh, so each rank's loss is also multiplied by
that mesh's size; the gradients then are those of the global per-token mean. ``train`` counts
every label as valid, so its divisor is exactly the accumulation steps, as it always was.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

IGNORE_INDEX = -100
"""The label that ``cross_entropy`` skips: a masked-out token's label becomes this."""


class TrainerUsageError(ValueError):
    """A library call the trainer cannot carry out as asked (wrong inputs, wrong order, closed
    trainer, pipeline parallel); the message says what to do instead."""


@dataclasses.dataclass(frozen=True, slots=True)
class Microbatch:
    """One micro-batch for ``Trainer.forward_backward``: rows of token ids and their labels.

    ``token_ids`` and ``labels`` are integer tensors ``[batch, seq]`` (labels are the next
    tokens). ``loss_mask`` (boolean, same shape) keeps the tokens whose loss counts; labels equal
    to -100 never count. ``positions`` must be each row's 0..seq-1 when given (the models take
    no other positions). ``extras`` carries whatever a custom ``loss_fn`` needs (advantages,
    generator log-probabilities), moved to the training device with the rest.
    """

    token_ids: torch.Tensor
    labels: torch.Tensor
    positions: torch.Tensor | None = None
    loss_mask: torch.Tensor | None = None
    extras: Mapping[str, torch.Tensor] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, slots=True)
class StepMetrics:
    """What one ``forward_backward`` call did, reduced over the data-parallel (loss) mesh."""

    loss: float
    """This call's part of the step's loss: the sum over its micro-batches and ranks of the
    per-token losses divided by the global valid-token count. The calls of one step add up to
    the step's per-token mean loss."""
    valid_tokens: int
    """Valid tokens of this call, over every data-parallel rank."""
    num_global_valid_tokens: int
    """The count the losses were divided by."""
    microbatches: int
    """Micro-batches this rank ran in this call."""


@dataclasses.dataclass(frozen=True, slots=True)
class OptimStepOutput:
    """What ``Trainer.optim_step`` did."""

    policy_version: int
    """Optimizer steps taken so far (the run's step; restored by ``load_checkpoint``)."""
    metrics: dict[str, float]
    """``grad_norm`` (before clipping), ``lr`` (the rate this step used) and ``tokens`` (valid
    tokens of the step over every data-parallel rank)."""


LossFn = Callable[[Any, Microbatch], torch.Tensor]
"""A custom loss: ``loss_fn(logits, microbatch)`` returns the *sum* of the per-token losses of
the micro-batch's valid tokens (the trainer divides it by the global valid-token count)."""


def loss_mesh(parts: Any) -> Any:
    """The data-parallel (loss) mesh: the ranks that hold different tokens; None for one."""
    if parts.world_mesh is None:
        return None
    return parts.parallel_dims.mesh(parts.world_mesh, "dp_cp")


def loss_mesh_size(parts: Any) -> int:
    """How many ranks FSDP / DDP average every gradient over."""
    return parts.parallel_dims.fsdp_gradient_divide_factor


def check_microbatch_list(microbatches: Any) -> None:
    """``TrainerUsageError`` unless ``microbatches`` is a non-empty list (sequence) of items."""
    if isinstance(microbatches, (str, bytes)) or not isinstance(microbatches, Sequence):
        raise TrainerUsageError(
            f"forward_backward takes a list of micro-batches, not {type(microbatches).__name__}"
        )
    if not microbatches:
        raise TrainerUsageError("forward_backward needs at least one micro-batch")


def check_count(name: str, value: Any) -> None:
    """``TrainerUsageError`` unless ``value`` (a global count a caller passes) is None or a
    positive int."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        raise TrainerUsageError(f"{name} must be a positive int, not {value!r}")


def raise_refusals(call: str, refused: TrainerUsageError | None, refusals: int) -> None:
    """After the ranks have counted their refusals of ``call``: this rank's own refusal, or the
    others' (``refusals`` ranks), so that every rank refuses the call together."""
    if refused is not None:
        raise refused
    if refusals:
        raise TrainerUsageError(
            f"{call}: {refusals} other rank(s) refused their micro-batches (their messages "
            "say why); no rank ran this call"
        )


def as_microbatch(item: Any, index: int) -> Microbatch:
    """``item`` (a ``Microbatch`` or an ``(inputs, labels)`` pair) as a checked ``Microbatch``."""
    if isinstance(item, Microbatch):
        batch = item
    elif isinstance(item, (tuple, list)) and len(item) == 2:
        batch = Microbatch(token_ids=item[0], labels=item[1])
    else:
        raise TrainerUsageError(
            f"microbatch {index}: expected a Microbatch or an (inputs, labels) pair of tensors, "
            f"got {type(item).__name__}"
        )
    _check_tensor(batch.token_ids, f"microbatch {index}: token_ids", integer=True)
    _check_tensor(batch.labels, f"microbatch {index}: labels", integer=True)
    shape = tuple(batch.token_ids.shape)
    if len(shape) != 2 or 0 in shape:
        raise TrainerUsageError(
            f"microbatch {index}: token_ids must be [batch, seq] with both non-zero, not "
            f"{list(shape)}"
        )
    named = {"labels": batch.labels, "positions": batch.positions, "loss_mask": batch.loss_mask}
    for name, tensor in named.items():
        if tensor is None:
            continue
        if name != "labels":
            _check_tensor(tensor, f"microbatch {index}: {name}", integer=name == "positions")
        if tuple(tensor.shape) != shape:
            raise TrainerUsageError(
                f"microbatch {index}: {name} has shape {list(tensor.shape)}, token_ids "
                f"{list(shape)}; they must match"
            )
    if batch.loss_mask is not None and batch.loss_mask.dtype != torch.bool:
        raise TrainerUsageError(
            f"microbatch {index}: loss_mask must be a bool tensor, not {batch.loss_mask.dtype}"
        )
    if batch.positions is not None:
        expected = torch.arange(shape[1], device=batch.positions.device).expand(shape)
        if not torch.equal(batch.positions, expected):
            raise TrainerUsageError(
                f"microbatch {index}: positions must be 0..seq-1 in every row: the models "
                "take no other positions (pack documents with EOS tokens and a block_causal "
                "mask instead)"
            )
    for name, tensor in batch.extras.items():
        _check_tensor(tensor, f"microbatch {index}: extras[{name!r}]", integer=None)
    return batch


def _check_tensor(value: Any, what: str, *, integer: bool | None) -> None:
    """``value`` must be a tensor; integer (True), floating (False) or bool, or any (None)."""
    if not isinstance(value, torch.Tensor):
        raise TrainerUsageError(f"{what} must be a torch.Tensor, not {type(value).__name__}")
    if integer is None:
        return
    is_integer = not value.dtype.is_floating_point and not value.dtype.is_complex
    if integer and (not is_integer or value.dtype == torch.bool):
        raise TrainerUsageError(f"{what} must hold integer token ids, not {value.dtype}")


def first_index(where: torch.Tensor) -> tuple[int, ...]:
    """The index of the first true element of ``where``."""
    return tuple(int(i) for i in torch.nonzero(where)[0].tolist())


def index_text(position: tuple[int, ...]) -> str:
    """``position`` as an index: ``[1, 3]``."""
    return "[" + ", ".join(map(str, position)) + "]"


def vocab_size_of(config: Any) -> int | None:
    """The model's vocabulary size (None when the flavor does not say)."""
    spec = getattr(config, "model_spec", None)
    size = getattr(getattr(spec, "model", None), "vocab_size", None)
    return size if isinstance(size, int) and size > 0 else None


def check_token_range(batch: Microbatch, index: int, vocab_size: int | None) -> None:
    """``token_ids`` in ``0..vocab_size-1``; ``labels`` too, or -100 (no loss)."""
    if vocab_size is None:
        return
    fields = {"token_ids": batch.token_ids, "labels": batch.labels}
    for name, tensor in fields.items():
        outside = (tensor < 0) | (tensor >= vocab_size)
        if name == "labels":
            outside &= tensor != IGNORE_INDEX
        if bool(outside.any()):
            where = first_index(outside)
            allowed = f"0..{vocab_size - 1}" + (" or -100" if name == "labels" else "")
            raise TrainerUsageError(
                f"microbatch {index}: {name}{index_text(where)} is {int(tensor[where])}, "
                f"outside the model's vocabulary ({allowed})"
            )


def check_sequence(parts: Any, batch: Microbatch, index: int) -> None:
    """The micro-batch's sequence length must split as the run's parallelisms split it."""
    dims, seq = parts.parallel_dims, batch.token_ids.shape[1]
    # Sequence parallel splits the sequence over TP; context parallel over 2 × CP chunks.
    needs = {"tensor parallel": dims.tp if dims.tp > 1 else 1, "context parallel": 2 * dims.cp}
    for name, divisor in needs.items():
        if divisor > 1 and seq % divisor:
            raise TrainerUsageError(
                f"microbatch {index}: sequence length {seq} must be a multiple of {divisor} "
                f"under {name}"
            )


def to_device(batch: Microbatch, device: torch.device) -> Microbatch:
    """``batch`` with every tensor on ``device`` (token ids and labels as int64)."""

    def move(tensor: torch.Tensor | None) -> torch.Tensor | None:
        """``tensor`` on ``device`` (None stays None)."""
        return None if tensor is None else tensor.to(device, non_blocking=True)

    labels = move(batch.labels).long()
    if batch.loss_mask is not None:
        labels = torch.where(move(batch.loss_mask), labels, IGNORE_INDEX)
    return Microbatch(
        token_ids=move(batch.token_ids).long(),
        labels=labels,
        positions=move(batch.positions),
        loss_mask=move(batch.loss_mask),
        extras={name: move(tensor) for name, tensor in batch.extras.items()},
    )


def local_valid_tokens(parts: Any, labels: torch.Tensor) -> int:
    """The valid tokens (labels not -100) that this rank's loss sees: under context parallel
    its share of the sequence."""
    from titan.distributed.cp_batch import LocalLabelsLoss, balance

    loss_fn = parts.loss_fn
    if isinstance(loss_fn, LocalLabelsLoss):
        labels = balance(labels, 1, cp=loss_fn.cp, rank=loss_fn.rank)
    return int((labels != IGNORE_INDEX).sum().item())


def accumulate(
    parts: Any,
    batches: Sequence[Microbatch],
    *,
    local_valid: Sequence[int],
    num_global_valid_tokens: int,
    loss_fn: LossFn | None = None,
) -> list[torch.Tensor]:
    """Forward and backward of every micro-batch, gradients accumulated; returns each one's
    loss as backward saw it (detached).

    The run's loss is a mean over the micro-batch's valid tokens, so it is divided by
    ``num_global_valid_tokens / (mesh size × its valid tokens)``; a custom ``loss_fn`` returns a
    sum and is divided by ``num_global_valid_tokens / mesh size``.
    """
    mesh_size = loss_mesh_size(parts)
    losses = []
    for batch, valid in zip(batches, local_valid, strict=True):
        inputs = batch.token_ids
        with parts.loss_context():
            with parts.amp():
                pred = parts.model(inputs, attention_masks=parts.attention_masks(inputs))
                if loss_fn is not None:
                    loss = loss_fn(pred, batch) / (num_global_valid_tokens / mesh_size)
                elif valid == 0:
                    # Every rank must run backward (FSDP's gradient collectives); none of this
                    # micro-batch's tokens count, so its loss is a zero that reaches every weight.
                    loss = pred.sum() * 0.0
                else:
                    loss = parts.loss_fn(pred, batch.labels) / (
                        num_global_valid_tokens / (mesh_size * valid)
                    )
            # Free the logits before backward: they are the largest activation of the step.
            del pred
            # Backward runs outside autocast (as in torchtitan): its ops already take the
            # forward's dtypes, and autocast's cache would keep a bf16 copy of every weight alive
            # through backward (on CPU ~3% of a debugmodel step in page faults).
            loss.backward()
        losses.append(loss.detach())
    return losses


def clip_gradients(parts: Any) -> torch.Tensor:
    """The total gradient norm before clipping (zero when optimizers step in backward)."""
    if parts.clip_gradients:
        return parts.clip_grad_norm()
    return torch.zeros((), device=parts.device)


def apply_update(parts: Any) -> float:
    """Optimizer step (its post hooks run the converters' post-optimizer hooks) and LR schedule
    step; returns the learning rate the step used."""
    # A background save may still be copying the weights the optimizer is about to change.
    parts.checkpointer.maybe_wait_for_staging()
    parts.optimizers.step()
    lr = parts.lr_schedulers.last_lr()  # the rate this step used, before the schedule moves
    parts.lr_schedulers.step()
    return lr


__all__ = [
    "IGNORE_INDEX",
    "LossFn",
    "Microbatch",
    "OptimStepOutput",
    "StepMetrics",
    "TrainerUsageError",
    "accumulate",
    "apply_update",
    "as_microbatch",
    "check_sequence",
    "clip_gradients",
    "local_valid_tokens",
    "loss_mesh",
    "loss_mesh_size",
    "to_device",
]
