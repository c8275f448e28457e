"""Ulysses sequence parallelism on two real processes (gloo): each packed micro-batch's
tokens split over an sp axis of 2, heads exchanged around attention, equals the same roles
with whole sequences (sp = 1) on the same two processes: log-probs, loss, gradient norm and
updated weights, for the actor (GQA with a key/value head per rank; LoRA; a log-prob head
chunked finer than a rank's share), the reference and the critic, and a mixture of experts
whose one key/value head is repeated for both ranks, its experts whole or split over the
same two ranks. Adam with eps = 1 makes the first
step close to lr x gradient, so equal updated weights mean equal gradients."""

import pytest

from ascent.controller import ResourcePool, Role, spawn_groups
from ascent.workers import (
    ActorWorker,
    CriticConfig,
    CriticWorker,
    ReferenceConfig,
    ReferenceWorker,
)
from tests.moe.test_router_replay import other_experts, rollouts_of
from tests.workers.data import rl_batch
from tests.workers.split_checks import same_reference_and_critic, same_updates
from tests.workers.test_actor import SMOOTH_ADAM, config

pytestmark = pytest.mark.integration
PACKED = "packed"
LORA = {"rank": 4, "alpha": 8}


def roles(tiny_model, tiny_moe):
    """name -> (role, sequence_parallel): each sp=2 role with its sp=1 twin."""
    actor = {"tokens_per_micro_batch": 40, "chunk_tokens": 7}
    lora = {"path": tiny_model, "packing": PACKED, "lora": LORA}
    critic = {"model": {"path": tiny_model, "packing": PACKED}, "optim": SMOOTH_ADAM}
    made = {}
    for sp in (1, 2):
        made[f"actor{sp}"] = (
            ActorWorker,
            config(
                tiny_model,
                model={"path": tiny_model, "packing": PACKED},
                parallel={"sequence": sp},
                **actor,
            ),
        )
        made[f"lora{sp}"] = (
            ActorWorker,
            config(tiny_model, model=lora, parallel={"sequence": sp}, **actor),
        )
        made[f"moe{sp}"] = (
            ActorWorker,
            config(
                tiny_moe,
                model={"path": tiny_moe, "packing": PACKED},
                parallel={"sequence": sp},
                **actor,
            ),
        )
        # experts split over the same two ranks that split the sequences (ep = sp)
        made[f"moe_ep{sp}"] = (
            ActorWorker,
            config(
                tiny_moe,
                model={"path": tiny_moe, "packing": PACKED},
                parallel={"sequence": sp, "expert": 2},
                **actor,
            ),
        )
        made[f"replay{sp}"] = (
            ActorWorker,
            config(
                tiny_moe,
                model={"path": tiny_moe, "packing": PACKED},
                parallel={"sequence": sp},
                router_replay="rollout",
                **actor,
            ),
        )
        made[f"ref{sp}"] = (
            ReferenceWorker,
            ReferenceConfig(
                model={"path": tiny_model, "packing": PACKED}, parallel={"sequence": sp}
            ),
        )
        made[f"critic{sp}"] = CriticWorker, CriticConfig(**critic, parallel={"sequence": sp})
    return made


@pytest.fixture(scope="module")
def groups(tiny_model, tiny_moe, local_ray):
    specs = {
        name: Role(cls, args=(cfg,), replica_size=cfg.parallel.replica)
        for name, (cls, cfg) in roles(tiny_model, tiny_moe).items()
    }
    spawned = spawn_groups(specs, ResourcePool(devices_per_node=2), backend="ray")
    yield spawned
    spawned["actor1"].shutdown()


def same_update(whole, split, batch):
    """Old log-probs, then one update on each: the same metrics and weights."""
    return same_updates(whole, split, batch, steps=1)


@pytest.mark.parametrize("name", ["actor", "lora", "moe"])
def test_split_sequences_give_the_same_update(groups, name):
    metrics = same_update(groups[f"{name}1"], groups[f"{name}2"], rl_batch(rows=8, seed=31))
    if name == "moe":
        assert metrics["actor/moe/imbalance"] >= 1


def test_split_sequences_and_split_experts_give_the_same_update(groups):
    """sp = 2 with ep = 2 (both over the same two ranks) against whole sequences, experts
    split as well (which equals every expert on every rank: tests/moe)."""
    same_update(groups["moe_ep1"], groups["moe_ep2"], rl_batch(rows=8, seed=33))


def test_reference_and_critic_with_split_sequences(groups):
    same_reference_and_critic(groups, rl_batch(rows=8, seed=32))


def test_split_sequences_replay_the_rollouts_routes(groups, tiny_moe):
    """Router replay: each rank replays the routes of its own tokens, and the mismatch
    metrics count the whole micro-batch's."""
    rollouts = rollouts_of(tiny_moe)
    changed, _ = other_experts(rollouts["routed_experts"], slice(0, 4))
    metrics = same_update(
        groups["replay1"], groups["replay2"], rollouts.assign(routed_experts=changed)
    )
    assert metrics["actor/moe/routing_mismatch"] == 0
    assert metrics["actor/moe/routing_mismatch_natural"] > 0
