"""A live RL run with the actor's layers split over two tensor ranks: two GRPO steps with the
native engine colocated, generating with weights gathered from the split actor; the engine's
log-probs agree with the trainer's after the first update too (the refresh reached it)."""

import pytest

from ascent.trainer.rl.loop import train_rl
from tests.trainer.rl_setup import config, metric

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("packing", ["padded", "packed"])
def test_two_grpo_steps_with_split_tensors(tiny_model, packing, prompts, tmp_path, local_ray):
    overrides = (
        "trainer.total_steps=2",
        "resources.devices_per_node=2",
        "actor.parallel.tensor=2",
        f"model.packing={packing}",
    )
    train_rl(config(tiny_model, prompts, tmp_path, *overrides))
    assert len(metric(tmp_path, "actor/pg_loss")) == 2
    mismatch = metric(tmp_path, "actor/rollout_mismatch_max_abs")
    assert len(mismatch) == 2 and max(mismatch) < 1e-4, mismatch
