"""Each new family trains: two GRPO steps of the toy task with the actor sharded by FSDP2
over two gloo ranks (Ray) and the native engine colocated, generating with the actor's
weights; the engine's log-probs agree with the trainer's on both ranks' samples, after the
first update too."""

import pytest

from ascent.trainer.rl.loop import train_rl
from tests.trainer.rl_setup import config, metric

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("name", ["gemma3", "phi3", "olmo2", "deepseek_v3", "llama3", "mixtral"])
def test_two_grpo_steps_on_two_ranks(family_checkpoint, name, prompts, tmp_path, local_ray):
    path = family_checkpoint(name)
    overrides = ("trainer.total_steps=2", "resources.devices_per_node=2")
    train_rl(config(path, prompts, tmp_path, *overrides))
    assert len(metric(tmp_path, "actor/pg_loss")) == 2
    # step 2 samples with the weights step 1 trained: the refresh reached the engine
    mismatch = metric(tmp_path, "actor/rollout_mismatch_max_abs")
    assert len(mismatch) == 2 and max(mismatch) < 1e-4, mismatch
