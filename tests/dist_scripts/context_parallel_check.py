"""Run under ``torchrun --nproc-per-node N SCRIPT SCENARIO...`` (gloo, CPU): context parallel
attention over N ranks against one-process SDPA over the whole sequence.

Every rank makes the same full-sequence queries, keys, values and upstream gradient (one seed),
computes the reference on its own, then attends with ``cp_attention`` on its balanced share
only. The output and the gradients of q, k and v are gathered from every rank, unbalanced back
to sequence order and compared with the reference in fp32: at most ``TOLERANCE`` times
``max(1, largest reference value)`` apart. Rank 0 prints ``OK <scenario>: ...`` with the
largest differences (and the largest reference values).
"""

from __future__ import annotations

import dataclasses
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

from titan.distributed.context_parallel import (
    balance,
    check_local_lengths,
    cp_attention,
    cp_mask,
    unbalance,
)
from titan.distributed.process_group import destroy_distributed
from titan.models.common.attention_masks import MaskSpec, document_ids

# fp32 differences come from the order of the sums only (keys gathered in another order, key
# gradients summed over ranks): a few units in the last place. Allowed: 1e-6 of the largest
# reference value, at least 1e-6 absolute (measured at most 8.9e-7 on values up to 3.7).
TOLERANCE = 1e-6
SEQ = 24  # 2 * cp chunks of 6 tokens at cp 2, of 3 at cp 4
HEAD_DIM = 8
EOS = 0


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One attention to compare: its mask, head counts and how the mask reaches cp_attention."""

    spec: MaskSpec = MaskSpec()
    heads: int = 4
    kv_heads: int = 4
    batch: int = 2
    scale: float | None = None
    prebuilt_mask: bool = False
    """Pass ``cp_mask``'s mask as ``attention_mask`` instead of the spec and documents."""


SCENARIOS = {
    "causal": Scenario(),
    "causal_gqa_scaled": Scenario(heads=4, kv_heads=2, scale=0.3),
    "documents": Scenario(spec=MaskSpec(documents=True)),
    "documents_prebuilt_gqa": Scenario(
        spec=MaskSpec(documents=True), heads=6, kv_heads=2, prebuilt_mask=True
    ),
    "documents_chunked": Scenario(spec=MaskSpec(documents=True, chunk_size=5)),
    "sliding_window": Scenario(spec=MaskSpec(window=7), batch=1),
}

# Rows of token ids (EOS = 0): documents that end inside a chunk, on a chunk edge, an EOS first
# and last, two in a row, and a row without EOS.
TOKEN_ROWS = [
    [5, 6, 7, 0, 8, 9, 4, 3, 2, 0, 0, 5, 6, 7, 8, 9, 1, 2, 3, 4, 0, 5, 6, 7],
    [0, 5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 0, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 0],
    [5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 1],
]


def reference(scenario: Scenario, q, k, v, documents):
    """One-process SDPA over the full sequence: ``is_causal`` for plain causal attention, else
    the full mask ``MaskSpec.build`` makes."""
    n_rep = scenario.heads // scenario.kv_heads
    keys, values = k.repeat_interleave(n_rep, dim=1), v.repeat_interleave(n_rep, dim=1)
    if scenario.spec == MaskSpec():
        return F.scaled_dot_product_attention(q, keys, values, is_causal=True, scale=scenario.scale)
    mask = scenario.spec.build(seqlen=SEQ, device=q.device, documents=documents)
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=scenario.scale)


def gather_full(local: torch.Tensor, *, cp: int) -> torch.Tensor:
    """Every rank's share of a ``[bs, heads, seq / cp, d]`` tensor, back in sequence order."""
    shards = [torch.empty_like(local) for _ in range(cp)]
    dist.all_gather(shards, local.contiguous())
    return unbalance(shards, dim=2)


def run(name: str) -> str:
    """Compare one scenario; returns the differences found (raises past the tolerance)."""
    scenario = SCENARIOS[name]
    cp, rank = dist.get_world_size(), dist.get_rank()
    generator = torch.Generator().manual_seed(1234)

    def full(heads: int) -> torch.Tensor:
        """A seeded ``[batch, heads, SEQ, HEAD_DIM]`` fp32 tensor, the same on every rank."""
        shape = (scenario.batch, heads, SEQ, HEAD_DIM)
        return torch.randn(shape, generator=generator, dtype=torch.float32)

    q, k, v = full(scenario.heads), full(scenario.kv_heads), full(scenario.kv_heads)
    upstream = full(scenario.heads)
    tokens = torch.tensor(TOKEN_ROWS[: scenario.batch])
    documents = document_ids(tokens, eos_id=EOS) if scenario.spec.documents else None

    q_ref, k_ref, v_ref = (t.clone().requires_grad_() for t in (q, k, v))
    out_ref = reference(scenario, q_ref, k_ref, v_ref, documents)
    (out_ref * upstream).sum().backward()

    q_cp, k_cp, v_cp = (balance(t, 2, cp=cp, rank=rank).clone().requires_grad_() for t in (q, k, v))
    if scenario.prebuilt_mask:
        mask = cp_mask(
            scenario.spec, seq_len=SEQ, cp=cp, rank=rank, device=q.device, documents=documents
        )
        out_cp = cp_attention(q_cp, k_cp, v_cp, attention_mask=mask, scale=scenario.scale)
    else:
        out_cp = cp_attention(
            q_cp, k_cp, v_cp, mask_spec=scenario.spec, documents=documents, scale=scenario.scale
        )
    (out_cp * balance(upstream, 2, cp=cp, rank=rank)).sum().backward()

    pairs = {
        "out": (out_cp.detach(), out_ref),
        "dq": (q_cp.grad, q_ref.grad),
        "dk": (k_cp.grad, k_ref.grad),
        "dv": (v_cp.grad, v_ref.grad),
    }
    diffs = {}
    for what, (local, expected) in pairs.items():
        got = gather_full(local, cp=cp)
        assert got.shape == expected.shape, (name, what, got.shape, expected.shape)
        diffs[what] = ((got - expected).abs().max().item(), expected.abs().max().item())
    worst = {what: d for what, (d, top) in diffs.items() if not d <= TOLERANCE * max(1.0, top)}
    assert not worst, f"{name}: differences past {TOLERANCE}: {worst}"
    return ", ".join(f"{what} {d:.1e} (of {top:.1f})" for what, (d, top) in diffs.items())


def uneven_lengths() -> str:
    """Ranks holding different numbers of tokens: ``check_local_lengths`` refuses on every rank
    with each rank's count (instead of a collective of mismatched sizes)."""
    cp, rank = dist.get_world_size(), dist.get_rank()
    local = 4 + 2 * (rank == cp - 1)
    try:
        check_local_lengths(local, group=None)
    except ValueError as refused:
        held = ", ".join(f"rank {r} {4 + 2 * (r == cp - 1)}" for r in range(cp))
        assert f"hold different numbers of tokens ({held})" in str(refused), refused
    else:
        raise AssertionError("uneven token counts passed check_local_lengths")
    check_local_lengths(4, group=None)  # equal counts pass
    return "refused with every rank's count"


# Checks other than an attention comparison, by name.
CHECKS = {"uneven_lengths": uneven_lengths}


def main() -> None:
    """Run every scenario named on the command line on every rank."""
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    lines = [
        f"OK {name}: cp {dist.get_world_size()}, {CHECKS[name]() if name in CHECKS else run(name)}"
        for name in sys.argv[1:]
    ]
    destroy_distributed()  # every rank past its last collective before any closes
    if rank == 0:
        print("\n".join(lines))


if __name__ == "__main__":
    from script_exit import run_and_leave  # beside this script: the first entry of sys.path

    run_and_leave(main)
