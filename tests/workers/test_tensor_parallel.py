"""Tensor parallelism on two real processes (gloo): every layer split over a tp axis of 2 by
the family's plan (heads and MLP columns; the vocabulary of embedding and head; norms on
tokens cut by sequence), equals the same roles unsplit on the same two processes (two
data-parallel ranks): log-probs, loss, gradient norm and updated weights after a first and
a second step. For the actor with padded rows (an odd length: filler columns) and packed
rows (a filler row), LoRA, a tied head, Qwen3's per-head q/k norms, a mixture of experts
(routed experts whole on each tensor rank, the shared expert split), the reference and the
critic; and a checkpoint saved split loads whole and back. Adam with eps = 1 makes a step
close to lr x gradient, so equal weights mean equal gradients."""

import pytest

from ascent.controller import ResourcePool, Role, spawn_groups
from ascent.workers import (
    ActorWorker,
    CriticConfig,
    CriticWorker,
    ReferenceConfig,
    ReferenceWorker,
)
from tests.families.models import build
from tests.workers.data import rl_batch
from tests.workers.split_checks import (
    MICRO,
    same_reference_and_critic,
    same_updates,
    tiny_moe_for_tensor_ranks,
)
from tests.workers.test_actor import SMOOTH_ADAM, assert_same_weights, config
from tests.workers.test_two_ranks import arranged

pytestmark = pytest.mark.integration
LORA = {"rank": 4, "alpha": 8}


def roles(paths):
    """name -> (role, config): each tp=2 role with its tp=1 twin."""
    made = {}
    for tp in (1, 2):
        split = {"tensor": tp}
        for name, path, model in (
            ("actor", paths["qwen2"], {}),
            ("packed", paths["qwen2"], {"packing": "packed"}),
            ("lora", paths["qwen2"], {"lora": LORA}),
            ("tied", paths["tied"], {}),
            ("qwen3", paths["qwen3"], {}),
            ("moe", paths["moe"], {"packing": "packed"}),  # its load metrics: real tokens
        ):
            model = {"path": path, **model}
            made[f"{name}{tp}"] = ActorWorker, config(path, model=model, parallel=split, **MICRO)
        made[f"ref{tp}"] = (
            ReferenceWorker,
            ReferenceConfig(model={"path": paths["qwen2"]}, parallel=split),
        )
        made[f"critic{tp}"] = (
            CriticWorker,
            CriticConfig(model={"path": paths["qwen2"]}, optim=SMOOTH_ADAM, parallel=split),
        )
    return made


@pytest.fixture(scope="module")
def paths(tiny_model, tiny_tied_model, tmp_path_factory):
    """Qwen2 (untied and tied), Qwen3 (q/k norms) and a Qwen2-MoE (a shared expert beside
    the routed ones) with two key/value heads, one per tensor rank."""
    qwen3 = build("qwen3", tmp_path_factory.mktemp("qwen3") / "model")
    moe = tiny_moe_for_tensor_ranks(tmp_path_factory.mktemp("moe") / "model")
    return {"qwen2": tiny_model, "tied": tiny_tied_model, "moe": moe, "qwen3": str(qwen3)}


@pytest.fixture(scope="module")
def groups(paths, local_ray):
    specs = {
        name: Role(cls, args=(cfg,), replica_size=cfg.parallel.replica)
        for name, (cls, cfg) in roles(paths).items()
    }
    spawned = spawn_groups(specs, ResourcePool(devices_per_node=2), backend="ray")
    yield spawned
    spawned["actor1"].shutdown()


@pytest.mark.parametrize("name", ["actor", "packed", "lora", "tied", "qwen3", "moe"])
def test_split_tensors_give_the_same_updates(groups, name):
    metrics = same_updates(groups[f"{name}1"], groups[f"{name}2"], rl_batch(rows=8, seed=41))
    if name == "moe":
        assert metrics["actor/moe/imbalance"] >= 1


def test_reference_and_critic_with_split_tensors(groups):
    same_reference_and_critic(groups, rl_batch(rows=8, seed=42))


def test_a_checkpoint_saved_split_loads_whole_and_back(groups, tmp_path):
    """tp=2 -> tp=1 and tp=1 -> tp=2: the same weights, and the optimiser state came along
    (the next updates agree)."""
    split, whole = groups["actor2"], groups["actor1"]
    split.update(arranged(rl_batch(rows=8, seed=43), 1))
    split.save_checkpoint(str(tmp_path / "split"))
    whole.load_checkpoint(str(tmp_path / "split"))
    assert_same_weights(split.full_weights()[0], whole.full_weights()[0], atol=0)
    batch = rl_batch(rows=8, seed=44)
    same_updates(whole, split, batch, steps=1)
    whole.save_checkpoint(str(tmp_path / "whole"))
    split.load_checkpoint(str(tmp_path / "whole"))
    assert_same_weights(whole.full_weights()[0], split.full_weights()[0], atol=0)
    same_updates(whole, split, rl_batch(rows=8, seed=45), steps=1)
