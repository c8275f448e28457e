"""The actor with images on two real processes (FSDP2 over gloo, the vision tower sharded)
agrees with one rank: the same log-probs, loss, gradient norm and weights after an update."""

import pytest
import torch

from ascent.controller import ResourcePool, Role, spawn_groups
from ascent.workers import ActorWorker
from tests.vision.data import vision_rl_batch
from tests.workers.conftest import in_process
from tests.workers.test_actor import assert_same_weights, config
from tests.workers.test_two_ranks import arranged

pytestmark = pytest.mark.integration


def test_one_and_two_ranks_give_the_same_update_with_images(tiny_vlm, local_ray):
    batch = vision_rl_batch(tiny_vlm, rows=8, seed=21)
    settings = config(tiny_vlm, tokens_per_micro_batch=80)
    with in_process(ActorWorker, settings) as one:
        old = one.log_probs(batch)["old_log_probs"]
        batch = batch.assign(old_log_probs=old)
        metrics_one = one.update(arranged(batch, 1))[0]
        weights_one = one.full_weights()[0]

    groups = spawn_groups(
        {"actor": Role(ActorWorker, args=(settings,))},
        ResourcePool(devices_per_node=2),
        backend="ray",
    )
    try:
        actor = groups["actor"]
        torch.testing.assert_close(actor.log_probs(batch)["old_log_probs"], old, atol=1e-6, rtol=0)
        per_rank = actor.update(arranged(batch, 2))
        weights_two = actor.full_weights()[0]
    finally:
        actor.shutdown()
    for key in ("actor/pg_loss", "actor/grad_norm", "actor/entropy"):
        assert per_rank[0][key] == pytest.approx(metrics_one[key], rel=1e-5, abs=1e-7), key
    assert any(".visual." in name for name in weights_two)
    assert_same_weights(weights_one, weights_two, atol=1e-6)
