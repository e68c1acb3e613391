"""What a decoder needs to run one batch under context parallel: the batch's CP view.

Under context parallel (``titan.distributed.context_parallel``) the trainer hands the model,
in place of the batch's attention masks, a :class:`ContextParallelBatch`: a mapping from each
layer's mask kind to its :class:`ContextParallelMask` (this rank's query rows over the gathered
keys, for every kind, plain causal included), plus what the decoder itself needs: which tokens
of the full sequence this rank holds (``local``) and the rotary-table rows of their global
positions (``rotary``). The model's forward takes the full ``[bs, seq]`` tokens as always and
keeps this rank's ``seq / cp`` of them; its logits are those tokens' only.

Each attention that meets a :class:`ContextParallelMask` gathers the keys and values of every
CP rank along the sequence (``all_gather_sequence``; their gradients are reduce-scattered back)
and attends with the mask: SDPA through ``masked_sdpa`` (llama3, qwen3, llama4, deepseek_v3's
MLA), or gpt_oss's sink softmax through :meth:`ContextParallelMask.gather`.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.distributed as dist

from titan.distributed.context_parallel import all_gather_sequence, cp_attention
from titan.models.common.attention_masks import MaskSpec


@dataclasses.dataclass(frozen=True, eq=False)
class ContextParallelMask:
    """One mask kind of one batch on one CP rank: ``mask`` is ``[bs or 1, 1, seq / cp, seq]``
    (this rank's queries over the keys in gathered order, from ``cp_mask``)."""

    mask: torch.Tensor
    """True where a query may attend to a key (keys in ``all_gather_sequence`` order)."""
    group: dist.ProcessGroup | None
    """The CP group whose ranks hold the other tokens of the sequence."""

    def gather(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Every CP rank's ``[bs, heads, seq / cp, d]`` keys and values, gathered along the
        sequence (``[bs, heads, seq, d]``, in the mask's key order); differentiable."""
        return (
            all_gather_sequence(keys, dim=2, group=self.group),
            all_gather_sequence(values, dim=2, group=self.group),
        )

    def attend(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        *,
        scale: float | None = None,
    ) -> torch.Tensor:
        """SDPA of this rank's ``[bs, heads, seq / cp, d]`` queries over every rank's keys and
        values (``kv_heads`` may divide ``heads``: they are repeated after the gather)."""
        return cp_attention(
            queries, keys, values, group=self.group, attention_mask=self.mask, scale=scale
        )


class ContextParallelBatch:
    """One batch's CP view on one rank: a :class:`ContextParallelMask` for each mask kind
    (``batch.get(spec)``, as the decoder reads a dict of masks), this rank's token positions,
    and the helpers the decoder's forward calls.

    Not a ``dict`` subclass on purpose: FSDP's root forward rebuilds dict inputs as plain dicts
    (moving their tensors to the device), which would lose what makes this one a CP batch.
    """

    def __init__(
        self,
        masks: dict[MaskSpec, ContextParallelMask],
        *,
        positions: torch.Tensor,
        inputs_cut: bool = False,
    ) -> None:
        self.masks = dict(masks)
        """Each mask kind's mask on this rank."""
        self.positions = positions
        """The global positions of this rank's tokens, in the order it holds them."""
        self.inputs_cut = inputs_cut
        """Whether the model receives this rank's share already (pipeline parallel cuts the batch
        before the schedule splits it into microbatches, and a later stage receives the hidden
        states of this rank's tokens), instead of the full sequence."""

    def get(self, spec: MaskSpec) -> ContextParallelMask:
        """The mask of kind ``spec`` (every kind the model's layers use has one)."""
        return self.masks[spec]

    def local(self, tokens: torch.Tensor) -> torch.Tensor:
        """This rank's ``[bs, seq / cp]`` share of the full ``[bs, seq]`` ``tokens`` (``tokens``
        itself when the inputs were cut already)."""
        return tokens if self.inputs_cut else tokens.index_select(1, self.positions)

    def rotary(self, table: torch.Tensor) -> torch.Tensor:
        """The rows of a rotary ``table`` (indexed by position along dim 0) for this rank's
        tokens, in their order: row ``i`` rotates the rank's ``i``-th token."""
        return table.index_select(0, self.positions)


def local_batch(
    tokens: torch.Tensor, rotary_table: torch.Tensor, attention_masks: object
) -> tuple[torch.Tensor, torch.Tensor]:
    """The decoder's tokens (or a later pipeline stage's hidden states) and rotary table for this
    rank: unchanged without context parallel, else this rank's tokens and their rows of the table
    (``attention_masks`` is then the batch's :class:`ContextParallelBatch`)."""
    if isinstance(attention_masks, ContextParallelBatch):
        return attention_masks.local(tokens), attention_masks.rotary(rotary_table)
    return tokens, rotary_table


__all__ = ["ContextParallelBatch", "ContextParallelMask", "local_batch"]
