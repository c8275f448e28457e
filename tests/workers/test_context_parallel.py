"""Ring context parallelism on two real processes (gloo): each packed micro-batch's tokens
split over a ring of 2 in load-balanced chunks (rank r: chunks r and 3 - r of 4), attention
computed round the ring, equals the same roles with whole sequences on the same two
processes (two data-parallel ranks): log-probs, loss, gradient norm and updated weights
over two steps, for the actor, the actor with LoRA, a mixture of experts with one key/value
head (which Ulysses would have to repeat; the ring needs none), the reference and the
critic."""

import pytest

from ascent.controller import ResourcePool, Role, spawn_groups
from ascent.workers import (
    ActorWorker,
    CriticConfig,
    CriticWorker,
    ReferenceConfig,
    ReferenceWorker,
)
from tests.workers.data import rl_batch
from tests.workers.split_checks import MICRO, same_reference_and_critic, same_updates
from tests.workers.test_actor import SMOOTH_ADAM, config

pytestmark = pytest.mark.integration
PACKED = "packed"


def roles(tiny_model, tiny_moe):
    made = {}
    for cp in (1, 2):
        split = {"context": cp}
        for name, path, extra in (
            ("actor", tiny_model, {}),
            ("lora", tiny_model, {"lora": {"rank": 4, "alpha": 8}}),
            ("moe", tiny_moe, {}),
        ):
            model = {"path": path, "packing": PACKED, **extra}
            made[f"{name}{cp}"] = ActorWorker, config(path, model=model, parallel=split, **MICRO)
        packed = {"path": tiny_model, "packing": PACKED}
        made[f"ref{cp}"] = ReferenceWorker, ReferenceConfig(model=packed, parallel=split)
        made[f"critic{cp}"] = (
            CriticWorker,
            CriticConfig(model=packed, optim=SMOOTH_ADAM, parallel=split),
        )
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


@pytest.mark.parametrize("name", ["actor", "lora", "moe"])
def test_a_ring_gives_the_same_updates(groups, name):
    metrics = same_updates(groups[f"{name}1"], groups[f"{name}2"], rl_batch(rows=8, seed=71))
    if name == "moe":  # the load counts the whole micro-batch's real tokens, in order
        assert metrics["actor/moe/imbalance"] >= 1


def test_reference_and_critic_on_a_ring(groups):
    same_reference_and_critic(groups, rl_batch(rows=8, seed=72))
