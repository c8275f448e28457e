"""``trainer.async_schedule=fixed``: async RL that a researcher can reproduce. Two
uninterrupted runs with one config and seed log the same metrics, timings apart (the
timing-driven default does not: which weights, and which batch-mates, sample a step depends
on when requests arrive); step s is sampled wholly by weight version max(0, s - k); and the
first step draws the same samples as trainer.mode=sync."""

import json

import pytest

from ascent.config import ConfigError
from ascent.trainer.rl.loop import train_rl
from ascent.trainer.rl.plan import make_plan
from tests.trainer.rl_setup import config, metric

FIXED = ("trainer.async_schedule=fixed", "trainer.total_steps=6")
TIMED = ("timing_s/", "perf/", "async/generation_busy_s")


def records(run_dir):
    """metrics.jsonl, without what measures time."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [
        {k: v for k, v in record.items() if not k.startswith(TIMED)}
        for record in map(json.loads, lines)
    ]


@pytest.mark.parametrize(
    "mode", [("trainer.mode=async", "trainer.max_staleness=2"), ("trainer.mode=one_step_off",)]
)
def test_two_fixed_schedule_runs_log_the_same_metrics(tiny_model, prompts, tmp_path, mode):
    for name in ("first", "second"):
        train_rl(config(tiny_model, prompts, tmp_path / name, *mode, *FIXED))
    first, second = records(tmp_path / "first"), records(tmp_path / "second")
    assert len(first) == 6 and first == second
    lag = 2 if "trainer.max_staleness=2" in mode else 1
    expected = [float(min(step, lag)) for step in range(6)]
    assert metric(tmp_path / "first", "async/staleness_max") == expected
    assert metric(tmp_path / "first", "async/staleness_mean") == expected
    assert set(metric(tmp_path / "first", "async/mixed_version_frac")) == {0.0}


def test_the_first_step_samples_as_sync_does(tiny_model, prompts, tmp_path):
    async_mode = ("trainer.mode=async", "trainer.max_staleness=2")
    train_rl(config(tiny_model, prompts, tmp_path / "fixed", *async_mode, *FIXED))
    train_rl(config(tiny_model, prompts, tmp_path / "sync", "trainer.total_steps=1"))
    for key in ("critic/score/mean", "response_length/mean"):
        assert metric(tmp_path / "fixed", key)[0] == metric(tmp_path / "sync", key)[0]


def test_a_fixed_schedule_needs_a_mode_that_generates_ahead(tiny_model, prompts, tmp_path):
    with pytest.raises(ConfigError, match=r"applies to trainer\.mode one_step_off or async"):
        make_plan(config(tiny_model, prompts, tmp_path, "trainer.async_schedule=fixed"))
