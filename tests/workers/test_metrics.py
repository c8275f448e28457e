"""How update metrics reduce: rates are averaged, loss shares summed within a mini-batch,
counts summed, and extremes (the largest mismatch, the importance ratio's min and max) stay
extremes over micro-batches, mini-batches and ranks."""

import json

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ascent.workers.metrics import MetricAccumulator

# rank -> mini-batches -> micro-batches
MICROS = {
    0: [
        [{"pg_clipfrac": 0.1, "pg_loss": 1.0, "rollout_ratio_max": 1.5, "rollout_ratio_min": 0.9}],
        [
            {
                "pg_clipfrac": 0.3,
                "pg_loss": 2.0,
                "rollout_ratio_max": 3.0,
                "rollout_ratio_min": 0.7,
            },
            {
                "pg_clipfrac": 0.5,
                "pg_loss": 4.0,
                "rollout_ratio_max": 1.1,
                "rollout_ratio_min": 0.8,
            },
        ],
    ],
    1: [
        [{"pg_clipfrac": 0.0, "pg_loss": 3.0, "rollout_ratio_max": 2.0, "rollout_ratio_min": 0.2}],
        [{"pg_clipfrac": 0.2, "pg_loss": 1.0, "rollout_ratio_max": 1.0, "rollout_ratio_min": 0.6}],
    ],
}


def reduce_rank(rank: int) -> dict[str, float]:
    accumulator = MetricAccumulator("actor")
    for mini in MICROS[rank]:
        for micro in mini:
            accumulator.add_micro(micro)
        accumulator.end_mini_batch(skipped_steps=1.0)
    return accumulator.result(torch.device("cpu"))


def test_one_rank_averages_rates_sums_shares_and_keeps_extremes():
    metrics = reduce_rank(0)
    assert metrics["actor/pg_clipfrac"] == pytest.approx((0.1 + (0.3 + 0.5) / 2) / 2)
    assert metrics["actor/pg_loss"] == pytest.approx((1.0 + 6.0) / 2)
    assert metrics["actor/skipped_steps"] == 2.0
    assert metrics["actor/rollout_ratio_max"] == 3.0
    assert metrics["actor/rollout_ratio_min"] == 0.7


def _two_ranks(rank: int, store: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        metrics = reduce_rank(rank)
    finally:
        dist.destroy_process_group()
    with open(f"{out}.{rank}", "w") as handle:
        json.dump(metrics, handle)


def test_two_ranks_agree_on_means_and_extremes(tmp_path):
    out = tmp_path / "metrics"
    mp.spawn(_two_ranks, args=(str(tmp_path / "store"), str(out)), nprocs=2)
    zero, one = (json.loads((tmp_path / f"metrics.{r}").read_text()) for r in (0, 1))
    assert zero == one
    assert zero["actor/pg_clipfrac"] == pytest.approx((0.25 + 0.1) / 2)
    assert zero["actor/rollout_ratio_max"] == 3.0
    assert zero["actor/rollout_ratio_min"] == 0.2
    assert zero["actor/skipped_steps"] == 2.0, "counts: summed over steps, averaged over ranks"
