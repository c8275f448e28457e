"""The training ranks as one torch DeviceMesh with named axes.

W ranks, sequence parallelism sp and expert parallelism ep (each 1 when off), where the
larger of sp and ep is a multiple of the smaller: the mesh is (outer, middle, inner) =
(W / big, big / small, small), consecutive ranks innermost, and

- ``fsdp``: every rank (all axes flattened): dense parameters are sharded over all W ranks;
- ``sp``: the ranks that split one micro-batch's tokens (``ascent.engine.ulysses``): the
  innermost axes whose product is sp. They are given the same rows (one data-parallel
  replica of consecutive ranks);
- ``dp``: the other axes, the replicas; what is counted over the data (loss denominators)
  sums over it;
- ``ep``: the ranks that split a sparse layer's experts (rank r of the axis holds experts
  [r E/ep, (r+1) E/ep)); tokens cross it by all-to-all. The innermost axes whose product is
  ep: with sp = ep, the very ranks that split a sequence split the experts;
- ``edp``: the other axes, the ranks holding the same experts; FSDP shards each split of
  the experts over them.

With neither, the mesh is the one axis ``fsdp`` (which is also ``dp``).
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
    """The mesh of this process group's ranks (module docstring); ValueError when an axis
    does not divide the number of ranks, or neither of the two divides the other."""
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
    if expert_parallel == sequence_parallel == 1:
        return TrainingMesh(fsdp=init_device_mesh(device_type, (world,), mesh_dim_names=("fsdp",)))
    small, big = sorted((expert_parallel, sequence_parallel))
    if big % small:
        raise ValueError(
            f"fsdp.expert_parallel={expert_parallel} and sequence_parallel={sequence_parallel}: "
            "one must divide the other (they share the mesh's inner axes)"
        )
    names = ("outer", "middle", "inner")
    mesh = init_device_mesh(device_type, (world // big, big // small, small), mesh_dim_names=names)
    flattened: dict[tuple[str, ...], DeviceMesh] = {}

    def axes(*dims: str) -> DeviceMesh:
        if len(dims) == 1:
            return mesh[dims[0]]
        if dims not in flattened:  # _flatten: torch's name for a product of axes (as torchtitan)
            flattened[dims] = mesh[dims]._flatten("_".join(dims))
        return flattened[dims]

    def inner(size: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(the innermost axes of product ``size``, the others)."""
        return (("inner",), ("outer", "middle")) if size == small else (names[1:], names[:1])

    sp, dp = inner(sequence_parallel)
    ep, edp = inner(expert_parallel)
    return TrainingMesh(
        fsdp=axes(*names),
        dp=axes(*dp) if sequence_parallel > 1 else None,
        sp=axes(*sp) if sequence_parallel > 1 else None,
        ep=axes(*ep) if expert_parallel > 1 else None,
        edp=axes(*edp) if expert_parallel > 1 else None,
    )
