"""Rollout on Ray: colocated with a 2-rank FSDP actor (each rank gathers the full weights),
and on its own device pool, fed bucket by bucket."""

import pytest
import torch

from ascent.controller import ResourcePool, Role, spawn_group, spawn_groups
from ascent.rollout import sync_weights
from ascent.workers import ActorConfig, ActorWorker
from ascent.workers.rollout import RolloutWorker
from tests.rollout.test_rollout_worker import prompts_batch, rollout_config

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_colocated_and_separate_rollouts_follow_a_two_rank_actor(local_ray, tiny_model):
    actor_cfg = ActorConfig(model={"path": tiny_model}, optim={"lr": 0.05})
    groups = spawn_groups(
        {
            "actor": Role(ActorWorker, args=(actor_cfg,)),
            "rollout": Role(RolloutWorker, args=(rollout_config(tiny_model),)),
        },
        ResourcePool(devices_per_node=2),
        backend="ray",
    )
    actor, rollout = groups["actor"], groups["rollout"]
    separate = spawn_group(
        RolloutWorker, ResourcePool(), args=(rollout_config(tiny_model),), backend="ray"
    )
    try:
        prompts = prompts_batch()
        batch = rollout.generate(prompts.index([0, 1, 2, 0]))  # 4 prompts over 2 ranks
        assert len(batch) == 8 and batch.meta["weight_version"] == 0
        batch = batch.union(actor.log_probs(batch)).assign(advantages=torch.ones(8, 8))
        actor.update(batch)
        results = rollout.sync_from_colocated("actor", check=True, version=1)
        assert results == [{"weight_version": 1, "max_weight_difference": 0.0}] * 2

        assert sync_weights(actor, separate, 1, bucket_bytes=128 * 1024) == 1
        weights = actor.full_weights()[0]
        assert separate.weight_difference(weights) == [0.0]
        greedy = {"temperature": 0.0, "n": 1}
        colocated_out = rollout.generate(prompts.index([0, 1]), sampling=greedy)
        separate_out = separate.generate(prompts.index([0, 1]), sampling=greedy)
        assert torch.equal(colocated_out["responses"], separate_out["responses"])
    finally:
        actor.shutdown()
        separate.shutdown()
