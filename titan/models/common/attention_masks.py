"""Attention masks as explicit boolean tensors: causal, per document, chunked, sliding window.

torchtitan serves ``attn_mask_type = "block_causal"`` (each token attends only to earlier
tokens of its own document), llama4's chunked iRoPE layers and gpt_oss's sliding windows with
FlexAttention block masks or varlen kernels. titan computes the same masks as dense boolean
tensors (True: the query may attend to the key) and runs them with PyTorch SDPA (or gpt_oss's
explicit sink softmax), so they work on CPU and GPU alike; the ``attn_type`` a config names
("flex", "varlen") is kept, and only the kernel differs.

What that costs: a mask holds ``local_batch_size × seq_len²`` booleans per distinct mask kind
(one byte each: 64 MiB for one row of 8192 tokens), made once per batch and shared by every
layer; and SDPA with an explicit mask cannot use the flash kernel, so on GPU it runs the
memory-efficient (or math) kernel, which computes every query-key block, masked or not, where
a causal kernel skips the upper half and FlexAttention / varlen skip every other document's.

Document boundaries follow torchtitan's ``get_document_mask_mod``: a document ends *with* its
EOS token (the EOS belongs to the document it closes), the next token starts a new one, and a
row without EOS is one document.
"""

from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass(frozen=True, slots=True)
class MaskSpec:
    """Which keys a query may see besides the earlier ones (every mask here is causal).

    An attention layer names its kind once; the decoder builds one mask per distinct kind per
    batch. The default (no restriction) is plain causal attention, run without a mask tensor.
    """

    documents: bool = False
    """Only keys of the query's own document (block-causal; needs the batch's tokens)."""
    chunk_size: int | None = None
    """Only keys in the query's fixed chunk of this many positions (llama4's chunked layers)."""
    window: int | None = None
    """Only the query itself and the ``window - 1`` keys before it (sliding window)."""

    def __post_init__(self) -> None:
        for name in ("chunk_size", "window"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"an attention mask's {name} must be at least 1, got {value}")

    def for_length(self, seqlen: int) -> MaskSpec:
        """The same mask for sequences of ``seqlen`` tokens, without the chunk or window when
        it spans the whole sequence (so equal masks are built once, and plain causal is
        ``MaskSpec()``)."""
        return MaskSpec(
            documents=self.documents,
            chunk_size=None
            if self.chunk_size is None or self.chunk_size >= seqlen
            else self.chunk_size,
            window=None if self.window is None or self.window >= seqlen else self.window,
        )

    def build(
        self, *, seqlen: int, device: torch.device, documents: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The boolean mask, ``[bs, 1, seq, seq]`` with ``documents`` (``[bs, seq]`` document
        indices, see ``document_ids``), else ``[1, 1, seq, seq]``; True where a query row may
        attend to a key column."""
        positions = torch.arange(seqlen, device=device)
        query, key = positions[:, None], positions[None, :]
        mask = query >= key
        if self.chunk_size is not None:
            mask = mask & (query // self.chunk_size == key // self.chunk_size)
        if self.window is not None:
            mask = mask & (query - key < self.window)
        mask = mask[None, None]
        if not self.documents:
            return mask
        if documents is None:
            raise ValueError("a block-causal mask needs the batch's document indices")
        same_document = documents[:, None, :, None] == documents[:, None, None, :]
        return mask & same_document


AttentionMasks = dict[MaskSpec, torch.Tensor]
"""One batch's masks by kind: what ``Decoder.attention_masks`` returns and ``forward`` takes."""


def document_ids(tokens: torch.Tensor, *, eos_id: int) -> torch.Tensor:
    """``[bs, seq]`` int64: each token's document index within its row, counted from 0.

    A token's index is the number of EOS tokens before it, so an EOS closes its own document
    and the token after it opens the next (torchtitan's document boundaries).
    """
    is_eos = (tokens == eos_id).long()
    return torch.cumsum(is_eos, dim=1) - is_eos


def build_attention_masks(
    specs: list[MaskSpec], *, tokens: torch.Tensor, eos_id: int | None
) -> AttentionMasks:
    """A mask for each spec in ``specs`` that is not plain causal at ``tokens``'s length; specs
    that come to the same mask there share one tensor.

    ``eos_id`` marks document ends; it is required when a spec masks by document.
    """
    seqlen = tokens.shape[1]
    effective = {spec: spec.for_length(seqlen) for spec in specs}
    effective = {spec: trimmed for spec, trimmed in effective.items() if trimmed != MaskSpec()}
    documents = None
    if any(spec.documents for spec in effective.values()):
        if eos_id is None:
            raise ValueError(
                "block_causal attention needs the id of the EOS token that ends each document: "
                "pass attention_masks=model.attention_masks(tokens, eos_id=...) to the model"
            )
        documents = document_ids(tokens, eos_id=eos_id)
    built = {
        trimmed: trimmed.build(seqlen=seqlen, device=tokens.device, documents=documents)
        for trimmed in set(effective.values())
    }
    return {spec: built[trimmed] for spec, trimmed in effective.items()}


__all__ = ["AttentionMasks", "MaskSpec", "build_attention_masks", "document_ids"]
