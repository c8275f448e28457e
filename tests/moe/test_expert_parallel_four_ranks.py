"""Expert parallelism composed with FSDP over the rest: on four real processes the mesh is
(edp, ep) = (2, 2), so each split of the experts is itself sharded over two ranks and its
gradient is reduced over them; ep = 2 still equals ep = 1 (log-probs, loss, gradient norm,
updated weights)."""

import pytest
import torch

from ascent.controller import ResourcePool, Role, spawn_groups
from ascent.workers import ActorWorker
from tests.moe.test_expert_parallel import actor_config
from tests.workers.data import rl_batch
from tests.workers.test_actor import assert_same_weights
from tests.workers.test_two_ranks import arranged

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_experts_split_over_two_and_sharded_over_two_give_the_same_update(tiny_moe, local_ray):
    groups = spawn_groups(
        {
            "ep1": Role(ActorWorker, args=(actor_config(tiny_moe, 1),)),
            "ep2": Role(ActorWorker, args=(actor_config(tiny_moe, 2),)),
        },
        ResourcePool(devices_per_node=4),
        backend="ray",
    )
    try:
        ep1, ep2 = groups["ep1"], groups["ep2"]
        batch = rl_batch(rows=16, seed=41)
        old = ep1.log_probs(batch)["old_log_probs"]
        torch.testing.assert_close(ep2.log_probs(batch)["old_log_probs"], old, atol=1e-6, rtol=0)
        batch = arranged(batch.assign(old_log_probs=old), 4)
        metrics_ep1, metrics_ep2 = ep1.update(batch)[0], ep2.update(batch)[0]
        for key in ("actor/pg_loss", "actor/grad_norm", "actor/moe/aux_loss"):
            assert metrics_ep2[key] == pytest.approx(metrics_ep1[key], rel=1e-5, abs=1e-7), key
        assert_same_weights(ep1.full_weights()[0], ep2.full_weights()[0], atol=1e-6)
    finally:
        groups["ep1"].shutdown()
