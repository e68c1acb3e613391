"""What context parallel's attention computes per rank against one process's causal attention.

Under CP each rank attends with its ``seq / cp`` queries (head-tail chunks) over every rank's
keys through SDPA with an explicit boolean mask (``titan.distributed.context_parallel``); one
process attends with SDPA's causal kernel (``is_causal=True``), which skips the upper triangle.
The baseline is that one-process forward + backward; each CP rank's share is timed in this
one process on the keys it would gather (the collective itself is left out: on one machine it
measures the transport, not the algorithm). Printed per CP degree: each rank's time over the
baseline (the head-tail balance makes them equal), and the sum over ranks over the baseline
(the work CP adds: the mask forbids the kernel's triangle skipping).

    .venv/bin/python bench/cp_attention_cost.py [--seq 2048] [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from titan.distributed.context_parallel import balance, cp_mask, gathered_positions
from titan.models.common.attention_masks import MaskSpec


def _timed(fn, repeats: int) -> float:
    """Median seconds of ``fn()`` over ``repeats`` runs after one warm-up."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    """Print the per-rank and total ratios for CP 2 and 4."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    shape = (1, args.heads, args.seq, args.head_dim)
    q, k, v = (torch.randn(shape, requires_grad=True) for _ in range(3))

    def full() -> None:
        F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()

    baseline = _timed(full, args.repeats)
    print(f"one process, causal SDPA, seq {args.seq}: {baseline * 1e3:.1f} ms (forward+backward)")
    for cp in (2, 4):
        order = gathered_positions(args.seq, cp=cp)
        keys, values = k.detach()[:, :, order], v.detach()[:, :, order]
        keys.requires_grad_(True)
        values.requires_grad_(True)
        ranks = []
        for rank in range(cp):
            queries = balance(q.detach(), 2, cp=cp, rank=rank).requires_grad_(True)
            mask = cp_mask(MaskSpec(), seq_len=args.seq, cp=cp, rank=rank, device=q.device)

            def share(queries=queries, mask=mask, keys=keys, values=values) -> None:
                out = F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask)
                out.sum().backward()

            ranks.append(_timed(share, args.repeats))
        per_rank = ", ".join(f"rank {r} {t / baseline:.2f}x" for r, t in enumerate(ranks))
        print(
            f"CP {cp}: {per_rank} of the baseline; all ranks together "
            f"{sum(ranks) / baseline:.2f}x (max/min rank {max(ranks) / min(ranks):.2f})"
        )


if __name__ == "__main__":
    main()
