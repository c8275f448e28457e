"""``ascent quickstart --task moe``: the addition quickstart on a tiny Qwen3-MoE (every
layer routes each token to 2 of 4 experts) learns as the dense model does."""

import json

import pytest

from ascent.quickstart import run_quickstart


@pytest.mark.learning
@pytest.mark.slow
def test_a_mixture_of_experts_learns_addition(tmp_path):
    """Seed 0 gained +53.0 points (33.4% -> 86.4%) here with two threads, +43.8 with one
    (seed 1: +53.8), on the AMD EPYC of docs/guides/mixture-of-experts.md; the promise is
    the quickstart's +30, 13.8 points below the lowest."""
    assert run_quickstart(seed=0, out_dir=str(tmp_path), model="moe") == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["gain_points"] >= 30 and summary["model_kind"] == "moe"
    rows = (tmp_path / "rl" / "metrics.jsonl").read_text().splitlines()
    first = json.loads(rows[1])  # step 1 (row 0: the validation before it)
    assert first["actor/moe/imbalance"] >= 1 and "actor/moe/aux_loss" in first
