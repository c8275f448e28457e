"""Actor, critic and reference colocated on two real processes (FSDP2 over gloo) agree with
one rank: same loss, gradient norm and weights after an update."""

import pytest
import torch

from ascent.controller import ResourcePool, Role, spawn_groups
from ascent.engine import data_parallel_order
from ascent.workers import (
    ActorWorker,
    CriticConfig,
    CriticWorker,
    ReferenceConfig,
    ReferenceWorker,
)
from tests.workers.conftest import in_process
from tests.workers.data import rl_batch
from tests.workers.test_actor import (
    SMOOTH_ADAM,
    assert_same_weights,
    config,
    reference_log_probs,
)

pytestmark = pytest.mark.integration
MINI_BATCHES = 2


@pytest.fixture(scope="module")
def two_ranks(tiny_model, local_ray):
    groups = spawn_groups(
        {
            "actor": Role(ActorWorker, args=(config(tiny_model, tokens_per_micro_batch=20),)),
            "critic": Role(
                CriticWorker,
                args=(CriticConfig(model={"path": tiny_model}, optim=SMOOTH_ADAM),),
            ),
            "ref": Role(ReferenceWorker, args=(ReferenceConfig(model={"path": tiny_model}),)),
        },
        ResourcePool(devices_per_node=2),
        backend="ray",
    )
    yield groups
    groups["actor"].shutdown()


def arranged(batch, dp_size):
    """Rows in dispatch order: the same global mini-batches on any number of ranks."""
    tokens = batch["attention_mask"].sum(-1).tolist()
    return batch.index(data_parallel_order(tokens, dp_size, MINI_BATCHES))


def test_one_and_two_ranks_give_the_same_update(two_ranks, tiny_model):
    batch = rl_batch(rows=8, seed=11)
    with in_process(ActorWorker, config(tiny_model, tokens_per_micro_batch=40)) as one:
        old = one.log_probs(batch)["old_log_probs"]
        batch = batch.assign(old_log_probs=old)
        metrics_one = one.update(arranged(batch, 1))[0]
        weights_one = one.full_weights()[0]

    actor = two_ranks["actor"]
    torch.testing.assert_close(actor.log_probs(batch)["old_log_probs"], old, atol=1e-6, rtol=0)
    per_rank = actor.update(arranged(batch, 2))
    assert per_rank[0] == per_rank[1], "every rank returns the same reduced metrics"
    for key in ("actor/pg_loss", "actor/grad_norm", "actor/entropy", "actor/ppo_kl"):
        assert per_rank[0][key] == pytest.approx(metrics_one[key], rel=1e-5, abs=1e-7), key
    weights_two = actor.full_weights()
    assert weights_two[1] is None
    assert_same_weights(weights_one, weights_two[0], atol=1e-6)


def test_reference_and_critic_on_two_ranks(two_ranks, tiny_model):
    batch = rl_batch(rows=8, seed=12)
    ref = two_ranks["ref"].log_probs(batch)["ref_log_probs"]
    expected = reference_log_probs(tiny_model, batch, 1.0)
    valid = batch["attention_mask"][:, -5:].bool()
    torch.testing.assert_close(ref[valid].double(), expected[valid], atol=2e-5, rtol=0)

    critic = two_ranks["critic"]
    values = critic.values(batch)["values"]
    target = torch.where(batch["response_mask"].bool(), 1.0, 0.0)
    first = critic.update(batch.assign(values=values, returns=target))[0]["critic/vf_loss"]
    for _ in range(5):
        values = critic.values(batch)["values"]
        last = critic.update(batch.assign(values=values, returns=target))[0]["critic/vf_loss"]
    assert last < first
