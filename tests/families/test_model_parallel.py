"""Every family splits exactly. With a tensor-parallel plan: its actor with layers split over
two tensor ranks (gloo, Ray) equals the same actor unsplit on two data-parallel ranks over
two updates (log-probs, loss, gradient norm, weights). Gemma 3: four norms per layer, a
scaled embedding, sliding layers and a soft-capped head; OLMo 2: q/k norms over the whole
projection, split with it (their mean of squares summed over the ranks); Llama 3 and
Mistral: the Llama layer; Mixtral: routed experts whole on every tensor rank; DeepSeek-V3:
latent attention (the shared rotary key's gradient summed over the ranks) and shared experts
split. And a sliding-window family's sequences split by Ulysses or a ring keep the window."""

import pytest

from ascent.controller import ResourcePool, Role, spawn_groups
from ascent.workers import ActorWorker
from tests.workers.data import rl_batch
from tests.workers.split_checks import MICRO, same_updates
from tests.workers.test_actor import config

pytestmark = pytest.mark.integration


# The default run keeps the plans unlike the Qwen2 one tests/workers runs: Gemma 3's four
# norms and soft-cap, OLMo 2's q/k norms over all heads, DeepSeek-V3's latent attention;
# the rest run in test-slow.
FAMILIES = [
    "gemma3",
    "olmo2",
    "deepseek_v3",
    pytest.param("llama3", marks=pytest.mark.slow),
    pytest.param("mistral", marks=pytest.mark.slow),
    pytest.param("mixtral", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("name", FAMILIES)
def test_split_tensors_give_the_same_updates(family_checkpoint, name, local_ray):
    path = family_checkpoint(name)
    specs = {
        f"tp{tp}": Role(
            ActorWorker,
            args=(config(path, parallel={"tensor": tp}, **MICRO),),
            replica_size=tp,
        )
        for tp in (1, 2)
    }
    groups = spawn_groups(specs, ResourcePool(devices_per_node=2), backend="ray")
    try:
        same_updates(groups["tp1"], groups["tp2"], rl_batch(rows=8, seed=61))
    finally:
        groups["tp1"].shutdown()


@pytest.mark.parametrize("split", [{"sequence": 2}, {"context": 2}], ids=["ulysses", "ring"])
def test_split_sequences_keep_the_sliding_window(family_checkpoint, split, local_ray):
    """Gemma 3's sliding layers (window 8, shorter than the rows) under Ulysses and the ring
    attend within the window, as the unsplit model does."""
    path = family_checkpoint("gemma3")
    model = {"path": path, "packing": "packed"}
    specs = {
        name: Role(
            ActorWorker,
            args=(config(path, model=model, parallel=parallel, **MICRO),),
            replica_size=2 if parallel else 1,
        )
        for name, parallel in (("whole", {}), ("split", split))
    }
    groups = spawn_groups(specs, ResourcePool(devices_per_node=2), backend="ray")
    try:
        same_updates(groups["whole"], groups["split"], rl_batch(rows=8, seed=62), steps=1)
    finally:
        groups["whole"].shutdown()
