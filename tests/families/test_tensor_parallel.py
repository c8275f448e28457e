"""Every family with a tensor-parallel plan splits exactly: its actor with layers split over
two tensor ranks (gloo, Ray) equals the same actor unsplit on two data-parallel ranks over
two updates (log-probs, loss, gradient norm, weights). Gemma 3: four norms per layer, a
scaled embedding, sliding layers and a soft-capped head; Llama 3 and Mistral: the Llama
layer; Mixtral: routed experts whole on every tensor rank; DeepSeek-V3: latent attention
(the shared rotary key's gradient summed over the ranks) and shared experts split."""

import pytest

from ascent.controller import ResourcePool, Role, spawn_groups
from ascent.workers import ActorWorker
from tests.workers.data import rl_batch
from tests.workers.test_actor import config
from tests.workers.test_tensor_parallel import MICRO, same_updates

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("name", ["gemma3", "llama3", "mistral", "mixtral", "deepseek_v3"])
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
