"""The rollout-correction rejection modes in a run (``ascent.algos.rollout_correction``).

One step ahead (``trainer.mode=one_step_off``), the first step trains on the weights that
sampled, where the tiny model's engine and trainer agree to ~1e-6 in log-prob, and every later
step on samples one update old (per-token |log rho| up to ~0.4). Each mode's bound sits between
the two: nothing is rejected in step 1, some sequences are in the stale steps, and the run
trains on the rest. The run is anchored at the rollout (the default one step ahead): rejection
still applies there. A batch with everything rejected leaves no gradient:
``tests/workers/test_actor.py``; the math against float64 references:
``tests/algos/test_rollout_correction.py``."""

import math

import pytest

from ascent.trainer.rl.loop import train_rl
from tests.trainer.rl_setup import config, metric

MODES = {
    "geometric": ("mode=mask", "level=geometric", "lower=0.99", "upper=1.01"),
    "k1": ("mode=reject_k1", "reject_above=0.01"),
    "k3": ("mode=reject_k3", "reject_above=0.005"),
    "max_abs": ("mode=reject_max_abs", "reject_above=0.1"),
}


@pytest.mark.parametrize("name", sorted(MODES))
def test_each_rejection_mode_trains_and_logs_what_it_rejected(tiny_model, prompts, tmp_path, name):
    run = config(
        tiny_model,
        prompts,
        tmp_path,
        "trainer.mode=one_step_off",
        "trainer.total_steps=3",
        "data.prompts_per_step=4",
        "rollout.samples_per_prompt=4",
        *(f"actor.rollout_correction.{setting}" for setting in MODES[name]),
    )
    assert train_rl(run)["steps"] == 3
    sequences = metric(tmp_path, "actor/rollout_masked_seq_frac")
    tokens = metric(tmp_path, "actor/rollout_masked_frac")
    assert sequences[0] == tokens[0] == 0, "on the sampling weights nothing is rejected"
    assert max(sequences[1:]) > 0 and max(tokens[1:]) > 0, "stale samples are"
    assert all(0 <= share <= 1 for share in sequences + tokens)
    assert all(math.isfinite(loss) for loss in metric(tmp_path, "actor/pg_loss"))
    assert max(metric(tmp_path, "actor/rollout_mismatch_max_abs")[1:]) > 0.1
