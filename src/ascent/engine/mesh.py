"""The training ranks as one torch DeviceMesh with named axes.

With W ranks and sequence parallelism sp (W = dp x sp), the mesh is (dp, sp):

- ``fsdp``: every rank (the axes flattened): parameters are sharded over all W ranks.
- ``sp``: the ranks that split one micro-batch's tokens (``ascent.engine.ulysses``); they
  are given the same rows (one data-parallel replica, consecutive ranks).
- ``dp``: the replicas; what is counted over the data (loss denominators) sums over it.

With expert parallelism ep (W = edp x ep), the mesh is (edp, ep):

- ``fsdp``: every rank (the axes flattened). Dense parameters are sharded over all W ranks,
  and the data (each rank's rows) is split over them too.
- ``ep``: the ranks that split one sparse layer's experts between them (rank r of the axis
  holds experts [r E/ep, (r+1) E/ep)); tokens cross this axis by all-to-all.
- ``edp``: the ranks holding the same experts; FSDP shards each expert shard over them.

Without either, the mesh is the one axis ``fsdp`` (which is also ``dp``). Both at once are
not built yet (an error says so).
"""

from dataclasses import dataclass

import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh


@dataclass(frozen=True)
class TrainingMesh:
    fsdp: DeviceMesh  # all ranks
    dp: DeviceMesh | None = None  # the data-parallel replicas (None: every rank is one)
    sp: DeviceMesh | None = None  # the sequence-parallel axis (None: sequences stay whole)
    ep: DeviceMesh | None = None  # the expert-parallel axis (None: experts are not split)
    edp: DeviceMesh | None = None  # the ranks sharing an expert shard

    @property
    def data_parallel_size(self) -> int:
        """Replicas: ranks that are given different rows."""
        return (self.dp or self.fsdp).size()


def training_mesh(
    device_type: str, expert_parallel: int = 1, sequence_parallel: int = 1
) -> TrainingMesh:
    """The mesh of this process group's ranks; ValueError when an axis does not divide the
    number of ranks."""
    world = dist.get_world_size()
    for field, size in (
        ("fsdp.expert_parallel", expert_parallel),
        ("sequence_parallel", sequence_parallel),
    ):
        if world % size:
            raise ValueError(
                f"{field}={size} does not divide the {world} ranks of the role; choose a "
                "divisor of the rank count"
            )
    if expert_parallel > 1 and sequence_parallel > 1:
        raise ValueError(
            "fsdp.expert_parallel and sequence_parallel are not combined yet; use one of them"
        )
    if sequence_parallel > 1:
        mesh = init_device_mesh(
            device_type,
            (world // sequence_parallel, sequence_parallel),
            mesh_dim_names=("dp", "sp"),
        )
        return TrainingMesh(fsdp=mesh["dp", "sp"]._flatten("fsdp"), dp=mesh["dp"], sp=mesh["sp"])
    if expert_parallel == 1:
        return TrainingMesh(fsdp=init_device_mesh(device_type, (world,), mesh_dim_names=("fsdp",)))
    mesh = init_device_mesh(
        device_type, (world // expert_parallel, expert_parallel), mesh_dim_names=("edp", "ep")
    )
    # _flatten is how torch names a product of axes as one axis (torchtitan does the same).
    return TrainingMesh(fsdp=mesh["edp", "ep"]._flatten("fsdp"), ep=mesh["ep"], edp=mesh["edp"])
