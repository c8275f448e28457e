"""Packing rows for the response log-probs, token-budget micro-batches, balancing, LR."""

import itertools

import pytest
import torch

from ascent.engine.config import OptimConfig
from ascent.engine.packing import pack_for_responses
from ascent.engine.schedule import lr_multiplier
from ascent.engine.token_budget import (
    balance_rows,
    data_parallel_order,
    plan_micro_batches,
    spread_rows,
    synchronized_micro_batches,
)
from tests.workers.data import rl_batch


def test_queries_point_at_the_token_before_each_response_token():
    batch = rl_batch(rows=6, prompt_length=5, response_length=4, seed=3)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    packed = pack_for_responses(ids, mask, 4)
    flat_ids = packed.input_ids[0].tolist()
    # Reference, the slow way: walk every row's valid tokens.
    expected = []
    for row in range(6):
        valid = [c for c in range(9) if mask[row, c]]
        for previous, current in itertools.pairwise(valid):
            if current >= 5:
                expected.append((row, current - 5, int(ids[row, current]), int(ids[row, previous])))
    got = list(
        zip(packed.rows.tolist(), packed.columns.tolist(), packed.targets.tolist(), strict=True)
    )
    assert got == [(r, c, t) for r, c, t, _ in expected]
    assert [flat_ids[i] for i in packed.query_index.tolist()] == [p for *_, p in expected]
    assert packed.num_tokens == int(mask.sum())


def test_position_ids_restart_for_every_row_and_skip_padding():
    ids = torch.tensor([[0, 0, 5, 6, 7, 0], [1, 2, 3, 4, 0, 0]])
    mask = torch.tensor([[0, 0, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0]])
    packed = pack_for_responses(ids, mask, 3)
    assert packed.input_ids.tolist() == [[5, 6, 7, 1, 2, 3, 4]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 0, 1, 2, 3]]
    # Response columns are 3, 4, 5: row 0 has tokens 6, 7 there; row 1 has token 4.
    assert packed.targets.tolist() == [6, 7, 4]
    assert packed.rows.tolist() == [0, 0, 1] and packed.columns.tolist() == [0, 1, 0]


def test_unpack_fills_the_cells_without_queries_and_keeps_gradient():
    ids = torch.tensor([[9, 1, 2]])
    mask = torch.tensor([[0, 1, 1]])  # prompt is empty after padding: token 1 has no prefix
    packed = pack_for_responses(ids, mask, 2)
    values = torch.tensor([0.5], requires_grad=True)
    out = packed.unpack(values, fill=-1.0)
    assert out.tolist() == [[-1.0, 0.5]]
    out.sum().backward()
    assert values.grad.tolist() == [1.0]


def test_micro_batches_respect_the_budget_and_cover_every_row_once():
    tokens = [7, 3, 12, 5, 5, 1, 9, 4]
    plan = plan_micro_batches(tokens, budget=12)
    assert sorted(r for b in plan for r in b) == list(range(8))
    assert all(sum(tokens[r] for r in b) <= 12 for b in plan)
    assert len(plan) == 4  # 46 tokens need at least 4 bins of 12
    more = plan_micro_batches(tokens, budget=12, min_count=6)
    assert len(more) == 6 and sorted(r for b in more for r in b) == list(range(8))
    assert plan_micro_batches([30, 2], budget=10) == [[0], [1]]  # a long row goes alone
    with pytest.raises(ValueError, match="micro-batches from 2 rows"):
        plan_micro_batches([1, 1], budget=10, min_count=3)


def test_balance_rows_evens_out_the_token_totals():
    tokens = [100, 1, 90, 2, 80, 3, 70, 4]
    order = balance_rows(tokens, 2)
    assert sorted(order) == list(range(8))
    halves = [sum(tokens[r] for r in order[:4]), sum(tokens[r] for r in order[4:])]
    naive = [sum(tokens[:4]), sum(tokens[4:])]
    assert abs(halves[0] - halves[1]) < abs(naive[0] - naive[1])
    assert abs(halves[0] - halves[1]) <= 20


def test_spread_rows_gives_every_row_once_by_load_and_may_leave_a_part_empty():
    tokens = [10, 5, 2, 9]
    parts = spread_rows(tokens, 2)
    assert parts == [[0, 2], [1, 3]]  # 10 + 2 against 9 + 5
    assert spread_rows([4], 3) == [[0], [], []]
    assert spread_rows([], 2) == [[], []]


def test_one_rank_with_no_rows_plans_no_micro_batch_when_it_may_fill():
    """(With several ranks the others' count is made up of empty micro-batches: the Tinker
    service's two-rank test.)"""
    assert synchronized_micro_batches([], 8, torch.device("cpu"), fill_empty=True) == []
    assert synchronized_micro_batches([3, 4], 8, torch.device("cpu"), fill_empty=True) == [[0, 1]]


def test_learning_rate_schedules():
    warm = OptimConfig(lr=1.0, warmup_steps=4)
    assert [lr_multiplier(s, warm) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    cosine = OptimConfig(
        lr=1.0, warmup_steps=2, schedule="cosine", total_steps=12, min_lr_ratio=0.1
    )
    values = [lr_multiplier(s, cosine) for s in range(14)]
    assert values[:3] == [0.5, 1.0, 1.0]
    assert values[7] == pytest.approx(0.1 + 0.9 * 0.5)  # halfway through the decay
    assert values[12] == pytest.approx(0.1) and values[13] == pytest.approx(0.1)
    assert all(a >= b for a, b in itertools.pairwise(values[2:]))
    with pytest.raises(ValueError, match="total_steps"):
        lr_multiplier(5, OptimConfig(schedule="cosine"))


def test_data_parallel_order_keeps_global_mini_batches_whatever_the_rank_count():
    tokens = [5, 9, 2, 7, 3, 8, 1, 6, 4, 10, 12, 11]
    for dp_size in (1, 2, 3):
        order = data_parallel_order(tokens, dp_size, mini_batches=2)
        assert sorted(order) == list(range(12))
        shards = [order[r * 12 // dp_size : (r + 1) * 12 // dp_size] for r in range(dp_size)]
        for j in range(2):  # each rank's j-th local slice holds rows of global mini-batch j
            local = [shard[j * len(shard) // 2 : (j + 1) * len(shard) // 2] for shard in shards]
            assert sorted(r for part in local for r in part) == list(range(j * 6, (j + 1) * 6))
    assert data_parallel_order(tokens, 1, 2) == list(range(12))
    with pytest.raises(ValueError, match="multiple of 8"):
        data_parallel_order(tokens, 4, 2)


def test_the_padded_layout_queries_the_same_tokens():
    batch = rl_batch(rows=5, prompt_length=6, response_length=4, seed=8)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    packed = pack_for_responses(ids, mask, 4)
    padded = pack_for_responses(ids, mask, 4, packed=False)
    assert torch.equal(packed.targets, padded.targets) and torch.equal(packed.rows, padded.rows)
    assert torch.equal(packed.columns, padded.columns) and padded.attention_mask is not None
    flat_ids = padded.input_ids.flatten()
    assert torch.equal(flat_ids[padded.query_index], packed.input_ids[0][packed.query_index])
    assert padded.input_ids.shape[1] <= ids.shape[1]  # trimmed to the columns in use


def test_padded_micro_batches_count_padding():
    tokens = [10, 9, 2, 2]
    assert plan_micro_batches(tokens, budget=20, padded=True) == [[0, 1], [2, 3]]
    assert plan_micro_batches(tokens, budget=20) == [[0, 1], [2, 3]]
    # Padded, the long row goes alone: 10 + 3 x 2 padded tokens, not 2 x 10 + 2 x 2.
    assert plan_micro_batches([10, 2, 2, 2], budget=20, padded=True) == [[0], [1, 2, 3]]
    assert plan_micro_batches([10, 2, 2, 2], budget=20) == [[0, 1, 2, 3]]


def test_padded_micro_batches_group_rows_of_similar_length():
    """Two lengths (a tool episode and a direct answer): one micro-batch would pad 64 rows to
    130 tokens (8,320); grouped by length they cost 32 x 130 + 32 x 35 (5,280), which saves
    more than a micro-batch's overhead. Rows of one length stay together."""
    tokens = [130 if row % 2 else 35 for row in range(64)]
    plan = plan_micro_batches(tokens, budget=8192, padded=True)
    assert sorted(plan) == [list(range(0, 64, 2)), list(range(1, 64, 2))]
    assert plan_micro_batches([30] * 64, budget=8192, padded=True) == [list(range(64))]
    # Never over the budget, whatever the lengths; every row exactly once.
    lengths = [(row * 37) % 200 + 1 for row in range(300)]
    plan = plan_micro_batches(lengths, budget=2000, padded=True)
    assert sorted(row for rows in plan for row in rows) == list(range(300))
    assert all(len(rows) * max(lengths[r] for r in rows) <= 2000 for rows in plan)
