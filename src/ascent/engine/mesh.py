"""The training ranks as one torch DeviceMesh with named axes.

With W ranks and expert parallelism ep (W = edp x ep), the mesh is (edp, ep):

- ``fsdp``: every rank (the axes flattened). Dense parameters are sharded over all W ranks,
  and the data (each rank's rows) is split over them too.
- ``ep``: the ranks that split one sparse layer's experts between them (rank r of the axis
  holds experts [r E/ep, (r+1) E/ep)); tokens cross this axis by all-to-all.
- ``edp``: the ranks holding the same experts; FSDP shards each expert shard over them.

Without expert parallelism (ep = 1) the mesh is the one axis ``fsdp``.
"""

from dataclasses import dataclass

import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh


@dataclass(frozen=True)
class TrainingMesh:
    fsdp: DeviceMesh  # all ranks
    ep: DeviceMesh | None = None  # the expert-parallel axis (None: experts are not split)
    edp: DeviceMesh | None = None  # the ranks sharing an expert shard


def training_mesh(device_type: str, expert_parallel: int = 1) -> TrainingMesh:
    """The mesh of this process group's ranks; ValueError when ``expert_parallel`` does not
    divide the number of ranks."""
    world = dist.get_world_size()
    if expert_parallel == 1:
        return TrainingMesh(fsdp=init_device_mesh(device_type, (world,), mesh_dim_names=("fsdp",)))
    if world % expert_parallel:
        raise ValueError(
            f"fsdp.expert_parallel={expert_parallel} does not divide the {world} ranks of the "
            "role; choose a divisor of the rank count"
        )
    mesh = init_device_mesh(
        device_type, (world // expert_parallel, expert_parallel), mesh_dim_names=("edp", "ep")
    )
    # _flatten is how torch names a product of axes as one axis (torchtitan does the same).
    return TrainingMesh(fsdp=mesh["edp", "ep"]._flatten("fsdp"), ep=mesh["ep"], edp=mesh["edp"])
