"""Context parallel: each rank of a CP group holds a slice of the sequence, and attention
gathers every rank's keys and values.

Load balancing ("head-tail"): the sequence is cut into ``2 * cp`` equal chunks and CP rank
``r`` holds chunks ``r`` and ``2 * cp - 1 - r``, so under a causal mask every rank has the same
number of query-key pairs to compute (an early chunk sees few keys, its partner many)::

    seq 8, cp 2: chunks [0 1][2 3][4 5][6 7]
        rank 0 holds chunks 0 and 3 -> tokens 0 1 6 7
        rank 1 holds chunks 1 and 2 -> tokens 2 3 4 5

Attention on one rank: its queries stay local; keys and values are all-gathered along the
sequence dimension (their gradients are reduce-scattered back in the backward pass), so the
gathered key order is rank 0's tokens, then rank 1's, and so on. The boolean mask is built
from the tokens' *global* positions (query rows: this rank's tokens; key columns: the gathered
order), so it is exactly the full-sequence mask restricted to this rank's query rows and
permuted along the keys: causal, per document, chunked or windowed (``MaskSpec``) alike. SDPA
is invariant to a permutation of the keys, so the result equals one-process attention.

Everything runs on plain ``torch.distributed`` collectives, so the same code serves gloo (CPU)
and NCCL. Rotary embeddings must use the tokens' global positions: take them from
``positions`` (or ``balance`` the rotary table along its sequence dimension).

What it costs: each rank holds the whole sequence's keys and values of one layer while it
attends, and a mask of ``local_batch × seq / cp × seq`` booleans per mask kind.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F

from titan.models.common.attention_masks import MaskSpec

# torch renamed the single-tensor collectives; the old names still work but warn.
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def check_sequence_split(
    seq_len: int, *, cp: int, tp: int = 1, sequence_parallel: bool = False
) -> None:
    """Raise ``ValueError`` unless ``seq_len`` splits into the ``2 * cp`` load-balanced chunks
    (and, with sequence parallel over ``tp`` ranks, each rank's slice splits ``tp`` ways)."""
    if cp < 1 or tp < 1:
        raise ValueError(
            f"context and tensor parallel degrees must be at least 1, got cp {cp}, tp {tp}"
        )
    if sequence_parallel and tp > 1:
        divisor = 2 * cp * tp
        if seq_len % divisor:
            raise ValueError(
                f"seq_len {seq_len} is not divisible by 2 * cp * tp = 2 * {cp} * {tp} = {divisor}: "
                f"context parallel cuts the sequence into {2 * cp} chunks and sequence parallel "
                f"splits each rank's tokens {tp} ways; use a seq_len that is a multiple of "
                f"{divisor}"
            )
        return
    divisor = 2 * cp
    if seq_len % divisor:
        raise ValueError(
            f"seq_len {seq_len} is not divisible by 2 * cp = 2 * {cp} = {divisor}: context "
            f"parallel cuts the sequence into {divisor} equal chunks, two per rank; use a seq_len "
            f"that is a multiple of {divisor}"
        )


def _check_rank(cp: int, rank: int) -> None:
    """Raise ``ValueError`` for a CP rank outside ``range(cp)``."""
    if not 0 <= rank < cp:
        raise ValueError(f"context parallel rank {rank} is outside 0..{cp - 1} (cp {cp})")


def chunk_ids(cp: int, rank: int) -> tuple[int, int]:
    """The two chunks (of ``2 * cp``) that CP rank ``rank`` holds, head first."""
    _check_rank(cp, rank)
    return rank, 2 * cp - 1 - rank


def positions(
    seq_len: int, *, cp: int, rank: int, device: torch.device | None = None
) -> torch.Tensor:
    """The global positions (int64, ``[seq_len / cp]``) of CP rank ``rank``'s tokens, in the
    order the rank holds them: the rotary table rows and position ids its tokens need."""
    check_sequence_split(seq_len, cp=cp)
    chunk = seq_len // (2 * cp)
    return torch.cat(
        [torch.arange(c * chunk, (c + 1) * chunk, device=device) for c in chunk_ids(cp, rank)]
    )


def gathered_positions(
    seq_len: int, *, cp: int, device: torch.device | None = None
) -> torch.Tensor:
    """The global positions of the keys ``all_gather_sequence`` returns: every rank's tokens in
    rank order (``[seq_len]``, a permutation of ``0..seq_len-1``)."""
    return torch.cat([positions(seq_len, cp=cp, rank=r, device=device) for r in range(cp)])


def balance(tensor: torch.Tensor, dim: int, *, cp: int, rank: int) -> torch.Tensor:
    """CP rank ``rank``'s share of a full-sequence ``tensor`` (sequence along ``dim``): its two
    chunks, concatenated head first (see ``positions``)."""
    index = positions(tensor.shape[dim], cp=cp, rank=rank, device=tensor.device)
    return tensor.index_select(dim, index)


def unbalance(shards: Sequence[torch.Tensor], dim: int) -> torch.Tensor:
    """The full-sequence tensor from every CP rank's share (``shards[r]`` is rank ``r``'s, as
    ``balance`` cut it), tokens back in sequence order; the inverse of ``balance``."""
    cp = len(shards)
    if cp == 0:
        raise ValueError("unbalance needs every context parallel rank's shard, got none")
    gathered = torch.cat(list(shards), dim=dim)
    order = torch.argsort(gathered_positions(gathered.shape[dim], cp=cp, device=gathered.device))
    return gathered.index_select(dim, order)


class _GatherSequence(torch.autograd.Function):
    """All-gather along a dimension; the backward pass reduce-scatters the gradient, so each
    rank's shard gets the sum of what every rank's attention sent back to it."""

    @staticmethod
    def forward(ctx, local: torch.Tensor, dim: int, group: dist.ProcessGroup | None):
        """Concatenate every rank's ``local`` along ``dim`` in rank order."""
        ctx.dim, ctx.group = dim, group
        world = dist.get_world_size(group)
        # The collectives work on dim 0 of contiguous tensors; move the sequence there.
        front = local.movedim(dim, 0).contiguous()
        out = front.new_empty((world * front.shape[0], *front.shape[1:]))
        _ALL_GATHER(out, front, group=group)
        return out.movedim(0, dim)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        """Sum every rank's gradient of this rank's slice (reduce-scatter)."""
        world = dist.get_world_size(ctx.group)
        front = grad.movedim(ctx.dim, 0).contiguous()
        out = front.new_empty((front.shape[0] // world, *front.shape[1:]))
        _REDUCE_SCATTER(out, front, group=ctx.group)
        return out.movedim(0, ctx.dim), None, None


def all_gather_sequence(
    local: torch.Tensor, *, dim: int, group: dist.ProcessGroup | None = None
) -> torch.Tensor:
    """Every CP rank's ``local`` concatenated along ``dim`` in rank order, differentiable: the
    gradient is reduce-scattered back to each rank's slice. Every rank's ``local`` must have
    the same shape."""
    return _GatherSequence.apply(local, dim % local.dim(), group)


def check_local_lengths(local_len: int, *, group: dist.ProcessGroup | None = None) -> None:
    """Raise ``ValueError`` on every rank of the CP group unless all hold ``local_len`` tokens.

    One small all-gather: call it once per batch (or once per run) before ``cp_attention``,
    whose collectives need equal shapes on every rank (gloo aborts the process on a mismatch,
    NCCL may wait for ever).
    """
    cp = dist.get_world_size(group)
    lengths = torch.zeros(cp, dtype=torch.int64)
    _ALL_GATHER(lengths, torch.tensor([local_len], dtype=torch.int64), group=group)
    if len(set(lengths.tolist())) > 1:
        held = ", ".join(f"rank {r} {n}" for r, n in enumerate(lengths.tolist()))
        raise ValueError(
            f"context parallel ranks hold different numbers of tokens ({held}); every rank must "
            f"hold seq_len / cp tokens of the same batch, as balance cuts them"
        )


def cp_mask(
    mask_spec: MaskSpec,
    *,
    seq_len: int,
    cp: int,
    rank: int,
    device: torch.device,
    documents: torch.Tensor | None = None,
) -> torch.Tensor:
    """The boolean attention mask of CP rank ``rank``'s queries over the gathered keys.

    ``[bs, 1, seq_len / cp, seq_len]`` with ``documents`` (the *full* sequence's ``[bs,
    seq_len]`` document indices, see ``document_ids``), else ``[1, 1, seq_len / cp, seq_len]``;
    True where a query may attend to a key. It is the full-sequence mask ``mask_spec.build``
    makes, restricted to this rank's query rows and with the keys in gathered order.
    """
    query = positions(seq_len, cp=cp, rank=rank, device=device)[:, None]
    key = gathered_positions(seq_len, cp=cp, device=device)[None, :]
    spec = mask_spec.for_length(seq_len)
    mask = query >= key
    if spec.chunk_size is not None:
        mask = mask & (query // spec.chunk_size == key // spec.chunk_size)
    if spec.window is not None:
        mask = mask & (query - key < spec.window)
    mask = mask[None, None]
    if not spec.documents:
        return mask
    if documents is None:
        raise ValueError("a block-causal mask needs the batch's document indices")
    if documents.shape[-1] != seq_len:
        raise ValueError(
            f"context parallel attention needs the full sequence's document indices "
            f"({seq_len} per row), got {documents.shape[-1]}"
        )
    query_docs = documents[:, query[:, 0]]
    key_docs = documents[:, key[0]]
    return mask & (query_docs[:, None, :, None] == key_docs[:, None, None, :])


def cp_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    *,
    group: dist.ProcessGroup | None = None,
    mask_spec: MaskSpec | None = None,
    documents: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """Attention of this CP rank's queries over every rank's keys and values.

    ``queries`` is ``[bs, heads, seq / cp, d]`` and ``keys`` / ``values`` ``[bs, kv_heads, seq /
    cp, dv]`` in SDPA's layout, this rank's tokens as ``balance`` gave them; ``heads`` must be a
    multiple of ``kv_heads`` (grouped-query attention: query head ``h`` uses key head ``h //
    (heads / kv_heads)``, as ``repeat_kv`` does; keys travel before they are repeated).
    Returns ``[bs, heads, seq / cp, dv]`` for this rank's queries.

    The mask is ``attention_mask`` when given (from ``cp_mask``, built once per batch and shared
    by the layers), else ``cp_mask(mask_spec or MaskSpec(), documents=documents)``: plain causal
    by default. ``scale`` is SDPA's (default ``1 / sqrt(d)``).
    """
    cp = dist.get_world_size(group)
    rank = dist.get_rank(group)
    heads, kv_heads = queries.shape[1], keys.shape[1]
    if heads % kv_heads:
        raise ValueError(f"{heads} query heads are not a multiple of {kv_heads} key/value heads")
    all_keys = all_gather_sequence(keys, dim=2, group=group)
    all_values = all_gather_sequence(values, dim=2, group=group)
    seq_len = all_keys.shape[2]
    if queries.shape[2] * cp != seq_len:
        raise ValueError(
            f"this rank holds {queries.shape[2]} queries but the gathered keys span {seq_len} "
            f"tokens over {cp} context parallel ranks"
        )
    if heads != kv_heads:
        all_keys = all_keys.repeat_interleave(heads // kv_heads, dim=1)
        all_values = all_values.repeat_interleave(heads // kv_heads, dim=1)
    if attention_mask is None:
        attention_mask = cp_mask(
            mask_spec or MaskSpec(),
            seq_len=seq_len,
            cp=cp,
            rank=rank,
            device=queries.device,
            documents=documents,
        )
    return F.scaled_dot_product_attention(
        queries, all_keys, all_values, attn_mask=attention_mask, scale=scale
    )


__all__ = [
    "all_gather_sequence",
    "balance",
    "check_local_lengths",
    "check_sequence_split",
    "chunk_ids",
    "cp_attention",
    "cp_mask",
    "gathered_positions",
    "positions",
    "unbalance",
]
