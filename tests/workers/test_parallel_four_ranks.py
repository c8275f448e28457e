"""The parallel axes composed on four real processes (gloo), each layout equal to the same
actor unsplit on four data-parallel ranks (log-probs, loss, gradient norm and updated
weights after two steps):

- fsdp x tp: the mesh (fsdp, tp) = (2, 2); each tensor split is sharded by FSDP over two
  ranks and its gradient averaged over them only;
- ep x tp: a Qwen2-MoE's routed experts split over the ep axis (two ranks outside the tensor
  axis, all-to-all), attention and its shared expert over tp;
- sequence x tp: each packed micro-batch's tokens split over two Ulysses ranks, and each of
  their heads over two tensor ranks (one key/value head per rank);
- context x sequence: a ring of two, Ulysses inside each ring rank's share;
- context x tp: a ring of two, each ring rank's layers split over two tensor ranks;
- context 4: a ring of four ranks over a model with two key/value heads (more ranks than
  Ulysses could take);
- tp x pp: two pipeline stages, each split over two tensor ranks (the stage boundary
  carries the gathered hidden states);
- dp x pp: two replicas of two stages, each stage sharded by FSDP over the replicas.
"""

import pytest

from ascent.controller import ResourcePool, Role, spawn_groups
from ascent.engine.config import ParallelConfig
from ascent.workers import ActorWorker
from tests.workers.data import rl_batch
from tests.workers.split_checks import MICRO, same_updates, tiny_moe_for_tensor_ranks
from tests.workers.test_actor import config

pytestmark = [pytest.mark.integration, pytest.mark.slow]
PACKED = {"packing": "packed"}

LAYOUTS = {
    "fsdp_tp": ("dense", {}, {"tensor": 2}),
    "ep_tp": ("moe", {}, {"tensor": 2, "expert": 2}),
    "sp_tp": ("dense", PACKED, {"tensor": 2, "sequence": 2}),
    "cp_sp": ("dense", PACKED, {"context": 2, "sequence": 2}),
    "cp_tp": ("dense", PACKED, {"context": 2, "tensor": 2}),
    "cp4": ("dense", PACKED, {"context": 4}),
    "tp_pp": ("dense", PACKED, {"tensor": 2, "pipeline": 2}),
    "dp_pp": ("dense", PACKED, {"pipeline": 2}),
}


@pytest.fixture(scope="module")
def paths(tiny_model, tmp_path_factory):
    moe = tiny_moe_for_tensor_ranks(tmp_path_factory.mktemp("moe") / "model")
    return {"dense": tiny_model, "moe": moe}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_the_axes_compose(paths, name, local_ray):
    kind, model, split = LAYOUTS[name]
    model = {"path": paths[kind], **model}
    specs = {}
    for tag, parallel in (("whole", {}), ("split", split)):
        settings = config(paths[kind], model=model, parallel=parallel, **MICRO)
        specs[tag] = Role(ActorWorker, args=(settings,), replica_size=settings.parallel.replica)
    groups = spawn_groups(specs, ResourcePool(devices_per_node=4), backend="ray")
    try:
        replicas = 4 // ParallelConfig(**split).replica
        same_updates(
            groups["whole"], groups["split"], rl_batch(rows=16, seed=51), dp_sizes=(4, replicas)
        )
    finally:
        groups["whole"].shutdown()
