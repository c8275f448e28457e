"""Pipeline parallelism on two real processes (gloo): the decoder cut into two stages under
torch's 1F1B schedule equals the same roles unsplit on the same two processes (two
data-parallel ranks): log-probs, loss, gradient norm and updated weights after a first and a
second step, for the actor (a dense model, and a mixture of experts with three layers: stages
of two and one), the reference and the critic (values on the last stage); and a
checkpoint saved in stages loads whole and back; an export from stages is the whole model.
Adam with eps = 1 makes a step close to lr x gradient, so equal weights mean equal
gradients."""

import pytest

from ascent.controller import ResourcePool, Role, spawn_groups
from ascent.models import load_causal_lm
from ascent.workers import (
    ActorWorker,
    CriticConfig,
    CriticWorker,
    ReferenceConfig,
    ReferenceWorker,
)
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
PACKED = {"packing": "packed"}
# Micro-batches of about one row: several per mini-batch, so 1F1B interleaves them.
SMALL = MICRO | {"tokens_per_micro_batch": 16}


def roles(path, moe):
    """name -> (role, config): each pp=2 role with its pp=1 twin."""
    made = {}
    for pp in (1, 2):
        split = {"pipeline": pp}
        model = {"path": path, **PACKED}
        made[f"actor{pp}"] = ActorWorker, config(path, model=model, parallel=split, **SMALL)
        made[f"moe{pp}"] = (
            ActorWorker,
            config(moe, model={"path": moe, **PACKED}, parallel=split, **SMALL),
        )
        made[f"ref{pp}"] = (
            ReferenceWorker,
            ReferenceConfig(model=model, parallel=split, tokens_per_micro_batch=16),
        )
        made[f"critic{pp}"] = (
            CriticWorker,
            CriticConfig(model=model, optim=SMOOTH_ADAM, parallel=split, tokens_per_micro_batch=16),
        )
    return made


@pytest.fixture(scope="module")
def groups(tiny_model, tmp_path_factory, local_ray):
    moe = tiny_moe_for_tensor_ranks(tmp_path_factory.mktemp("moe") / "model")
    specs = {
        name: Role(cls, args=(cfg,), replica_size=cfg.parallel.replica)
        for name, (cls, cfg) in roles(tiny_model, moe).items()
    }
    spawned = spawn_groups(specs, ResourcePool(devices_per_node=2), backend="ray")
    yield spawned
    spawned["actor1"].shutdown()


@pytest.mark.parametrize("name", ["actor", "moe"])
def test_stages_give_the_same_updates(groups, name):
    same_updates(groups[f"{name}1"], groups[f"{name}2"], rl_batch(rows=8, seed=41))


def test_reference_and_critic_in_stages(groups):
    same_reference_and_critic(groups, rl_batch(rows=8, seed=42))


def test_a_checkpoint_saved_in_stages_loads_whole_and_back(groups, tmp_path):
    """pp=2 -> pp=1 and pp=1 -> pp=2: the same weights, and the optimiser state came along
    (the next updates agree)."""
    split, whole = groups["actor2"], groups["actor1"]
    split.update(arranged(rl_batch(rows=8, seed=43), 1))
    split.save_checkpoint(str(tmp_path / "split"))
    whole.load_checkpoint(str(tmp_path / "split"))
    assert_same_weights(split.full_weights()[0], whole.full_weights()[0], atol=0)
    same_updates(whole, split, rl_batch(rows=8, seed=44), steps=1)
    whole.save_checkpoint(str(tmp_path / "whole"))
    split.load_checkpoint(str(tmp_path / "whole"))
    assert_same_weights(whole.full_weights()[0], split.full_weights()[0], atol=0)
    same_updates(whole, split, rl_batch(rows=8, seed=45), steps=1)


def test_an_export_from_stages_is_the_whole_model(groups, tmp_path):
    """Every stage's weights, under the whole model's names, in one transformers
    checkpoint that loads as the model."""
    split = groups["actor2"]
    split.export(str(tmp_path / "export"))
    exported = load_causal_lm(str(tmp_path / "export")).state_dict()
    assert_same_weights(split.full_weights()[0], exported, atol=0)
