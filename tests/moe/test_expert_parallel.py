"""Expert parallelism on two real processes (gloo): the tiny Qwen3-MoE's experts split over
an ep axis of 2, tokens exchanged by all-to-all, equals the same model with every expert
sharded by FSDP alone (ep = 1) on the same two processes: log-probs, loss, gradient norm
and updated weights. The optimiser is Adam with eps = 1, whose first step is close to
lr x gradient, so equal updated weights mean equal gradients."""

import pytest
import torch

from ascent.controller import ResourcePool, Role, spawn_groups
from ascent.workers import ActorWorker
from tests.workers.data import rl_batch
from tests.workers.test_actor import assert_same_weights, config
from tests.workers.test_two_ranks import arranged

pytestmark = pytest.mark.integration


def actor_config(path, expert_parallel):
    return config(path, tokens_per_micro_batch=30, parallel={"expert": expert_parallel})


@pytest.fixture(scope="module")
def two_ranks(tiny_moe, local_ray):
    groups = spawn_groups(
        {
            "ep1": Role(ActorWorker, args=(actor_config(tiny_moe, 1),)),
            "ep2": Role(ActorWorker, args=(actor_config(tiny_moe, 2),)),
        },
        ResourcePool(devices_per_node=2),
        backend="ray",
    )
    yield groups
    groups["ep1"].shutdown()


def test_experts_split_over_two_ranks_give_the_same_update(two_ranks):
    batch = rl_batch(rows=8, seed=21)
    ep1, ep2 = two_ranks["ep1"], two_ranks["ep2"]
    old = ep1.log_probs(batch)["old_log_probs"]
    torch.testing.assert_close(ep2.log_probs(batch)["old_log_probs"], old, atol=1e-6, rtol=0)

    batch = arranged(batch.assign(old_log_probs=old), 2)
    metrics_ep1, metrics_ep2 = ep1.update(batch)[0], ep2.update(batch)[0]
    for key in ("actor/pg_loss", "actor/grad_norm", "actor/moe/aux_loss", "actor/moe/imbalance"):
        assert metrics_ep2[key] == pytest.approx(metrics_ep1[key], rel=1e-5, abs=1e-7), key
    weights_ep1, weights_ep2 = ep1.full_weights()[0], ep2.full_weights()[0]
    assert_same_weights(weights_ep1, weights_ep2, atol=1e-6)
    experts = "model.layers.0.mlp.experts.gate_up_proj"
    assert weights_ep2[experts].shape[0] == 4, "full weights gather every rank's experts"


def test_after_an_update_both_still_agree(two_ranks):
    """The second step runs from Adam state and weights that each layout updated itself."""
    batch = arranged(rl_batch(rows=8, seed=22), 2)
    ep1, ep2 = two_ranks["ep1"], two_ranks["ep2"]
    assert ep2.update(batch)[0]["actor/grad_norm"] == pytest.approx(
        ep1.update(batch)[0]["actor/grad_norm"], rel=1e-5
    )
    assert_same_weights(ep1.full_weights()[0], ep2.full_weights()[0], atol=2e-6)


def test_a_checkpoint_saved_with_split_experts_loads_without(two_ranks, tmp_path):
    ep1, ep2 = two_ranks["ep1"], two_ranks["ep2"]
    ep2.update(arranged(rl_batch(rows=8, seed=23), 2))
    ep2.save_checkpoint(str(tmp_path / "ckpt"))
    ep1.load_checkpoint(str(tmp_path / "ckpt"))
    assert_same_weights(ep2.full_weights()[0], ep1.full_weights()[0], atol=0)
    batch = arranged(rl_batch(rows=8, seed=24), 2)  # and the optimiser state came along
    assert ep1.update(batch)[0] == pytest.approx(ep2.update(batch)[0], rel=1e-5, abs=1e-7)
    assert_same_weights(ep1.full_weights()[0], ep2.full_weights()[0], atol=2e-6)
