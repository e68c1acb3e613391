"""Context parallel: the head-tail split of the sequence (positions by hand, balance / unbalance
round trips), the sequence length check's messages, each rank's mask against the full-sequence
mask for every mask kind, and (real ``torchrun`` over gloo, 2 ranks; 4 ranks marked slow)
``cp_attention``'s output and q/k/v gradients against one-process SDPA over the whole sequence,
fp32, within 1e-6 of the largest reference value (measured at most 8.9e-7 on values up to 3.7),
and ranks holding different token counts refused on every rank with each one's count.
"""

from __future__ import annotations

import pytest
import torch

from tests.dist_scripts.context_parallel_check import CHECKS, SCENARIOS
from tests.training_runs import REPO, parallel_check
from titan.distributed.context_parallel import (
    balance,
    check_sequence_split,
    chunk_ids,
    cp_mask,
    gathered_positions,
    positions,
    unbalance,
)
from titan.models.common.attention_masks import MaskSpec, document_ids

CPU = torch.device("cpu")
SCRIPT = REPO / "tests" / "dist_scripts" / "context_parallel_check.py"


# ----------------------------------------------------------------------------- the split by hand


@pytest.mark.parametrize(
    ("seq_len", "cp", "expected"),
    [
        (8, 2, [[0, 1, 6, 7], [2, 3, 4, 5]]),
        (12, 3, [[0, 1, 10, 11], [2, 3, 8, 9], [4, 5, 6, 7]]),
        (8, 4, [[0, 7], [1, 6], [2, 5], [3, 4]]),
        (4, 1, [[0, 1, 2, 3]]),
        (12, 2, [[0, 1, 2, 9, 10, 11], [3, 4, 5, 6, 7, 8]]),
    ],
)
def test_each_rank_holds_its_head_and_tail_chunk(seq_len, cp, expected):
    assert [positions(seq_len, cp=cp, rank=r).tolist() for r in range(cp)] == expected
    assert gathered_positions(seq_len, cp=cp).tolist() == sum(expected, [])


def test_chunk_ids_pair_the_first_with_the_last():
    assert [chunk_ids(4, r) for r in range(4)] == [(0, 7), (1, 6), (2, 5), (3, 4)]


def test_balance_takes_the_tokens_at_the_rank_positions():
    tokens = torch.tensor([[10, 11, 12, 13, 14, 15, 16, 17]])
    assert balance(tokens, 1, cp=2, rank=0).tolist() == [[10, 11, 16, 17]]
    assert balance(tokens, 1, cp=2, rank=1).tolist() == [[12, 13, 14, 15]]
    assert balance(tokens, -1, cp=2, rank=1).tolist() == [[12, 13, 14, 15]]


@pytest.mark.parametrize(
    ("shape", "dim", "cp"),
    [((2, 3, 16, 4), 2, 2), ((2, 3, 16, 4), 2, 4), ((24, 5), 0, 3), ((3, 40), -1, 5), ((8,), 0, 1)],
)
def test_unbalance_restores_what_balance_split(shape, dim, cp):
    full = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    shards = [balance(full, dim, cp=cp, rank=r) for r in range(cp)]
    assert all(s.shape[dim] == full.shape[dim] // cp for s in shards)
    assert torch.equal(unbalance(shards, dim), full)


def test_a_balanced_rotary_table_holds_the_rows_of_the_rank_positions():
    # A [seq, d] rotary table balanced along the sequence gives each token its global position's row.
    table = torch.arange(16 * 3).view(16, 3)
    for rank in range(4):
        rows = balance(table, 0, cp=4, rank=rank)
        assert torch.equal(rows, table[positions(16, cp=4, rank=rank)])
        assert (rows[:, 0] // 3).tolist() == positions(16, cp=4, rank=rank).tolist()


@pytest.mark.parametrize("cp", [1, 2, 3, 4])
def test_causal_work_is_the_same_on_every_rank(cp):
    seq_len = 2 * cp * 5
    work = [
        int(cp_mask(MaskSpec(), seq_len=seq_len, cp=cp, rank=r, device=CPU).sum())
        for r in range(cp)
    ]
    assert len(set(work)) == 1
    assert sum(work) == seq_len * (seq_len + 1) // 2


# ----------------------------------------------------------------------------- the length check


@pytest.mark.parametrize(
    ("seq_len", "kwargs", "words"),
    [
        (10, {"cp": 2}, "seq_len 10 is not divisible by 2 * cp = 2 * 2 = 4"),
        (6, {"cp": 4}, "seq_len 6 is not divisible by 2 * cp = 2 * 4 = 8"),
        (7, {"cp": 1}, "seq_len 7 is not divisible by 2 * cp = 2 * 1 = 2"),
        (
            12,
            {"cp": 2, "tp": 2, "sequence_parallel": True},
            "seq_len 12 is not divisible by 2 * cp * tp = 2 * 2 * 2 = 8",
        ),
        (
            48,
            {"cp": 2, "tp": 8, "sequence_parallel": True},
            "seq_len 48 is not divisible by 2 * cp * tp = 2 * 2 * 8 = 32",
        ),
        (8, {"cp": 0}, "at least 1, got cp 0"),
        (8, {"cp": 2, "tp": 0}, "at least 1, got cp 2, tp 0"),
    ],
)
def test_a_sequence_that_does_not_split_is_refused_with_its_numbers(seq_len, kwargs, words):
    with pytest.raises(ValueError) as refused:
        check_sequence_split(seq_len, **kwargs)
    assert words in str(refused.value)


@pytest.mark.parametrize(
    ("seq_len", "kwargs"),
    [
        (8, {"cp": 2}),
        (24, {"cp": 3}),
        (12, {"cp": 2, "tp": 2}),  # tp without sequence parallel does not split the sequence
        (16, {"cp": 2, "tp": 2, "sequence_parallel": True}),
        (10, {"cp": 1, "tp": 4, "sequence_parallel": False}),
    ],
)
def test_a_sequence_that_splits_passes(seq_len, kwargs):
    check_sequence_split(seq_len, **kwargs)


def test_balance_refuses_an_uneven_sequence_and_a_rank_outside_the_group():
    with pytest.raises(ValueError, match=r"seq_len 6 is not divisible by 2 \* cp = 2 \* 2 = 4"):
        balance(torch.zeros(1, 6), 1, cp=2, rank=0)
    with pytest.raises(ValueError, match=r"rank 2 is outside 0\.\.1 \(cp 2\)"):
        balance(torch.zeros(1, 8), 1, cp=2, rank=2)
    with pytest.raises(ValueError, match="got none"):
        unbalance([], 0)


# ----------------------------------------------------------------------------- masks


def test_rank_masks_by_hand():
    # seq 8, cp 2: rank 0's queries are tokens 0 1 6 7; the gathered keys are 0 1 6 7 2 3 4 5.
    mask = cp_mask(MaskSpec(), seq_len=8, cp=2, rank=0, device=CPU)
    assert mask.shape == (1, 1, 4, 8)
    assert mask[0, 0].int().tolist() == [
        [1, 0, 0, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0, 0, 0],
        [1, 1, 1, 0, 1, 1, 1, 1],
        [1, 1, 1, 1, 1, 1, 1, 1],
    ]
    # Documents [5 6 0 | 7 8 9 0 | 4]: rank 1's queries (tokens 2 3 4 5) see their own document.
    documents = document_ids(torch.tensor([[5, 6, 0, 7, 8, 9, 0, 4]]), eos_id=0)
    mask = cp_mask(
        MaskSpec(documents=True), seq_len=8, cp=2, rank=1, device=CPU, documents=documents
    )
    assert mask.shape == (1, 1, 4, 8)
    assert mask[0, 0].int().tolist() == [
        [1, 1, 0, 0, 1, 0, 0, 0],  # token 2 (EOS closing doc 0): tokens 0 1 2
        [0, 0, 0, 0, 0, 1, 0, 0],  # token 3 opens doc 1
        [0, 0, 0, 0, 0, 1, 1, 0],
        [0, 0, 0, 0, 0, 1, 1, 1],
    ]


TOKENS = torch.tensor(
    [
        [5, 6, 7, 0, 8, 9, 4, 3, 2, 0, 0, 5, 6, 7, 8, 9, 1, 2, 3, 4, 0, 5, 6, 7],
        [0, 5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 0, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 0],
        [5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 1],
    ]
)
SPECS = [
    MaskSpec(),
    MaskSpec(documents=True),
    MaskSpec(chunk_size=5),
    MaskSpec(window=4),
    MaskSpec(documents=True, chunk_size=7),
    MaskSpec(documents=True, window=3),
    MaskSpec(chunk_size=100),  # spans the sequence: plain causal
]


@pytest.mark.parametrize("spec", SPECS, ids=repr)
@pytest.mark.parametrize("cp", [1, 2, 3, 4, 6])
def test_each_rank_mask_is_the_full_mask_at_its_queries_and_the_gathered_keys(spec, cp):
    seq_len = TOKENS.shape[1]
    documents = document_ids(TOKENS, eos_id=0) if spec.documents else None
    full = spec.for_length(seq_len).build(seqlen=seq_len, device=CPU, documents=documents)
    keys = gathered_positions(seq_len, cp=cp)
    for rank in range(cp):
        mask = cp_mask(spec, seq_len=seq_len, cp=cp, rank=rank, device=CPU, documents=documents)
        expected = full[:, :, positions(seq_len, cp=cp, rank=rank)][:, :, :, keys]
        assert mask.dtype == torch.bool
        assert torch.equal(mask, expected)


def test_a_document_mask_needs_the_full_sequence_document_indices():
    spec = MaskSpec(documents=True)
    with pytest.raises(ValueError, match="needs the batch's document indices"):
        cp_mask(spec, seq_len=8, cp=2, rank=0, device=CPU)
    local = document_ids(torch.tensor([[5, 0, 6, 7]]), eos_id=0)
    with pytest.raises(ValueError, match=r"full sequence's document indices \(8 per row\), got 4"):
        cp_mask(spec, seq_len=8, cp=2, rank=0, device=CPU, documents=local)


# ----------------------------------------------------------------------------- torchrun over gloo


def test_cp_attention_on_2_ranks_matches_one_process_sdpa():
    output = parallel_check(SCRIPT, [*SCENARIOS, *CHECKS], nproc=2)
    assert output.count("cp 2,") == len(SCENARIOS) + len(CHECKS)


@pytest.mark.slow
def test_cp_attention_on_4_ranks_matches_one_process_sdpa():
    output = parallel_check(SCRIPT, [*SCENARIOS, *CHECKS], nproc=4)
    assert output.count("cp 4,") == len(SCENARIOS) + len(CHECKS)
