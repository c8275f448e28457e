"""Tensor parallelism composed with the other axes on four real processes (gloo), each equal
to the same role unsplit on four ranks (log-probs, loss, gradient norm and updated weights
after two steps):

- fsdp x tp: the mesh (fsdp, tp) = (2, 2); each tensor split is sharded by FSDP over two
  ranks and its gradient averaged over them only;
- ep x tp: a Qwen2-MoE's routed experts split over the ep axis (two ranks outside the tensor
  axis, all-to-all), attention and its shared expert over tp;
- sequence x tp: each packed micro-batch's tokens split over two Ulysses ranks, and each of
  their heads over two tensor ranks (one key/value head per rank).
"""

import pytest

from ascent.controller import ResourcePool, Role, spawn_groups
from ascent.models.tiny_moe import build_tiny_moe
from ascent.workers import ActorWorker
from tests.workers.data import rl_batch
from tests.workers.test_actor import config
from tests.workers.test_tensor_parallel import MICRO, same_updates

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LAYOUTS = {
    "fsdp_tp": ("dense", {}, {"tensor": 2}),
    "ep_tp": ("moe", {}, {"tensor": 2, "expert": 2}),
    "sp_tp": ("dense", {"packing": "packed"}, {"tensor": 2, "sequence": 2}),
}


@pytest.fixture(scope="module")
def groups(tiny_model, tmp_path_factory, local_ray):
    moe = build_tiny_moe(
        tmp_path_factory.mktemp("moe") / "model",
        layers=3,
        dense_layers=(1,),
        kv_heads=2,
        family="qwen2_moe",
    )
    paths = {"dense": tiny_model, "moe": str(moe)}
    specs = {}
    for name, (kind, model, split) in LAYOUTS.items():
        model = {"path": paths[kind], **model}
        for tag, parallel in (("whole", {}), ("split", split)):
            settings = config(paths[kind], model=model, parallel=parallel, **MICRO)
            specs[f"{name}_{tag}"] = Role(
                ActorWorker, args=(settings,), replica_size=settings.parallel.replica
            )
    spawned = spawn_groups(specs, ResourcePool(devices_per_node=4), backend="ray")
    yield spawned
    next(iter(spawned.values())).shutdown()


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_tensor_parallel_composes_with_the_other_axes(groups, name):
    whole, split = groups[f"{name}_whole"], groups[f"{name}_split"]
    parallel = LAYOUTS[name][2]
    replicas = 4 // (parallel["tensor"] * parallel.get("sequence", 1))
    same_updates(whole, split, rl_batch(rows=16, seed=51), dp_sizes=(4, replicas))
