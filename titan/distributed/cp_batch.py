"""A training run under context parallel: each batch's CP view.

Every rank of a CP group loads the same batches (they share a data-parallel rank). For each
batch, :func:`batch_view` builds what the model's forward takes in place of the attention
masks: a ``ContextParallelBatch`` naming this rank's tokens (chunks ``r`` and ``2·cp − 1 − r`` of
``2·cp``, the "head-tail" balance), their RoPE positions, and the mask of every layer's kind
over the gathered keys (plain causal, per document, chunked or windowed). The loss keeps the
same rank's labels (:class:`LocalLabelsLoss`). Each rank's loss is the mean over its own
``seq / cp`` tokens; FSDP, which shards over the data-parallel and CP ranks together, averages
the gradients over both, and the logged loss is averaged over both (the ``dp_cp`` mesh), which
is the mean over every token of the batch.

Under pipeline parallel the schedule, not the trainer, calls the model: :class:`PipelineCut`
hands it this rank's share of the tokens and labels (cut before the schedule splits the batch
rows into microbatches) and gives every stage the batch's CP view as a keyword argument.

``context_parallel_rotate_method`` chose the collective of torch's ring attention, which titan
does not use (keys and values are all-gathered); ``context_parallel_load_balancer`` chose among
torch's balancers, of which titan runs head-tail. Both are accepted and reported as having no
effect (``titan.schemas.layout_rules.context_parallel_options``, a warning of titan-validate and
of titan-train's config check); the numbers a run computes do not depend on either. Which
sequence lengths CP can cut is the shared ``seq-len`` rule's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from titan.distributed.context_parallel import balance, check_sequence_split, cp_mask, positions
from titan.models.common.attention_masks import MaskSpec, document_ids
from titan.models.common.cp_attention import ContextParallelBatch, ContextParallelMask

if TYPE_CHECKING:
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    from titan.distributed.parallel_dims import ParallelDims


def batch_view(
    tokens: torch.Tensor,
    *,
    mask_specs: list[MaskSpec],
    eos_id: int | None,
    group: dist.ProcessGroup | None,
    cp: int,
    rank: int,
    inputs_cut: bool = False,
) -> ContextParallelBatch:
    """The CP view of the full batch ``tokens`` ``[bs, seq]`` on CP rank ``rank``: one mask per
    kind in ``mask_specs`` (kinds equal at this length share one tensor) and this rank's
    positions; ``inputs_cut``: the model will receive this rank's share, not ``tokens``."""
    seq_len = tokens.shape[1]
    check_sequence_split(seq_len, cp=cp)
    effective = {spec: spec.for_length(seq_len) for spec in mask_specs}
    documents = None
    if any(spec.documents for spec in effective.values()):
        if eos_id is None:
            raise ValueError(
                "block_causal attention needs the id of the EOS token that ends each document"
            )
        documents = document_ids(tokens, eos_id=eos_id)
    built = {
        kind: ContextParallelMask(
            cp_mask(
                kind,
                seq_len=seq_len,
                cp=cp,
                rank=rank,
                device=tokens.device,
                documents=documents if kind.documents else None,
            ),
            group,
        )
        for kind in set(effective.values())
    }
    return ContextParallelBatch(
        {spec: built[kind] for spec, kind in effective.items()},
        positions=positions(seq_len, cp=cp, rank=rank, device=tokens.device),
        inputs_cut=inputs_cut,
    )


class LocalLabelsLoss:
    """``loss_fn(pred, labels)`` on this CP rank's logits and its share of the full labels."""

    def __init__(self, loss_fn: Callable[[Any, torch.Tensor], Any], *, cp: int, rank: int):
        self.loss_fn, self.cp, self.rank = loss_fn, cp, rank

    def __call__(self, pred: Any, labels: torch.Tensor) -> Any:
        """The loss of this rank's tokens (the mean over them, as ``loss_fn`` computes it)."""
        return self.loss_fn(pred, balance(labels, 1, cp=self.cp, rank=self.rank))


def context_parallel_parts(
    *,
    loss_fn: Callable[[Any, torch.Tensor], Any],
    model: torch.nn.Module,
    eos_id: int | None,
    parallel_dims: ParallelDims,
    world_mesh: DeviceMesh | None,
) -> tuple[Callable[[Any, torch.Tensor], Any], Callable[[torch.Tensor], Any]]:
    """The run's ``loss_fn`` (on this rank's labels) and ``attention_masks(inputs)`` (each
    batch's CP view) under context parallel, from the one-process ``loss_fn`` and ``model``."""
    cp_mesh = parallel_dims.mesh(world_mesh, "cp")
    assert cp_mesh is not None
    cp, rank, group = parallel_dims.cp, cp_mesh.get_local_rank(), cp_mesh.get_group()
    specs = list(model.mask_specs)

    def attention_masks(tokens: torch.Tensor) -> ContextParallelBatch:
        """The batch's CP view on this rank."""
        return batch_view(tokens, mask_specs=specs, eos_id=eos_id, group=group, cp=cp, rank=rank)

    return LocalLabelsLoss(loss_fn, cp=cp, rank=rank), attention_masks


@dataclasses.dataclass(frozen=True, kw_only=True)
class PipelineBatch:
    """One micro-batch as the pipeline schedule takes it under context parallel."""

    inputs: torch.Tensor
    """This rank's ``[bs, seq / cp]`` share of the token ids."""
    labels: torch.Tensor
    """The labels of the same tokens."""
    model_kwargs: dict[str, Any]
    """What every stage's forward takes besides its input: the batch's CP view."""


class PipelineCut:
    """Cut each micro-batch into this CP rank's share before the pipeline schedule splits it into
    microbatches (which split the batch rows, so every microbatch keeps the same head-tail
    tokens), and give every stage the batch's CP view: the masks over the gathered keys and the
    RoPE positions of this rank's tokens."""

    def __init__(
        self,
        *,
        mask_specs: list[MaskSpec],
        eos_id: int | None,
        group: dist.ProcessGroup | None,
        cp: int,
        rank: int,
    ) -> None:
        self.mask_specs, self.eos_id = mask_specs, eos_id
        self.group, self.cp, self.rank = group, cp, rank

    def __call__(self, inputs: torch.Tensor, labels: torch.Tensor) -> PipelineBatch:
        """This rank's share of ``inputs`` and ``labels`` ``[bs, seq]`` and the CP view."""
        view = batch_view(
            inputs,
            mask_specs=self.mask_specs,
            eos_id=self.eos_id,
            group=self.group,
            cp=self.cp,
            rank=self.rank,
            inputs_cut=True,
        )
        return PipelineBatch(
            inputs=balance(inputs, 1, cp=self.cp, rank=self.rank),
            labels=balance(labels, 1, cp=self.cp, rank=self.rank),
            model_kwargs={"attention_masks": view},
        )


def pipeline_cut(
    model: torch.nn.Module,
    *,
    eos_id: int | None,
    parallel_dims: ParallelDims,
    world_mesh: DeviceMesh | None,
) -> PipelineCut | None:
    """How the pipeline schedule takes each micro-batch of the meta ``model`` under context
    parallel; None without it."""
    if not parallel_dims.cp_enabled:
        return None
    cp_mesh = parallel_dims.mesh(world_mesh, "cp")
    assert cp_mesh is not None
    return PipelineCut(
        mask_specs=list(model.mask_specs),
        eos_id=eos_id,
        group=cp_mesh.get_group(),
        cp=parallel_dims.cp,
        rank=cp_mesh.get_local_rank(),
    )


__all__ = [
    "LocalLabelsLoss",
    "PipelineBatch",
    "PipelineCut",
    "batch_view",
    "context_parallel_parts",
    "pipeline_cut",
]
