"""The training ranks as one torch DeviceMesh with named axes.

W ranks, tensor parallelism tp, sequence parallelism sp and expert parallelism ep (each 1
when off; ``ascent.engine.config.ParallelConfig``), where the larger of sp and ep is a
multiple of the smaller: the mesh is (outer, middle, inner, tp) = (W / (big tp), big / small,
small, tp), consecutive ranks innermost (the tp axis is left out when tp = 1), and

- ``tp``: the ranks that split each layer's weights (``ascent.engine.tensor_parallel``):
  the innermost axis, consecutive ranks (on GPUs, the fastest links). They are given the
  same rows;
- ``fsdp``: every axis but tp, flattened: dense parameters (each tensor-parallel shard of
  them) are sharded over these W / tp ranks;
- ``sp``: the ranks that split one micro-batch's tokens (``ascent.engine.ulysses``): the
  innermost axes whose product is sp. They are given the same rows (one data-parallel
  replica of consecutive ranks);
- ``dp``: the axes but sp and tp, the replicas; what is counted over the data (loss
  denominators) sums over it;
- ``ep``: the ranks that split a sparse layer's experts (rank r of the axis holds experts
  [r E/ep, (r+1) E/ep)); tokens cross it by all-to-all. The innermost axes whose product is
  ep: with sp = ep, the very ranks that split a sequence split the experts;
- ``edp``: the other axes, the ranks holding the same experts; FSDP shards each split of
  the experts over them (and over tp: ``expert_shards``; a mixture's experts are whole on
  every tensor rank, so their states are sharded over the tensor ranks too).

Without sp and ep the mesh is (fsdp, tp), or the one axis ``fsdp`` (which is also ``dp``)
without tp either.

With ring context parallelism cp > 1 (``ascent.engine.context_parallel``) the mesh is
(dp, cp, sp, tp): ``cp`` the ring, sp Ulysses inside it, ``sequence`` their product (the
ranks that split one micro-batch's tokens and gather its results), ``fsdp`` every axis but
tp; experts are not split over it yet.

With pipeline parallelism pp > 1 (``ascent.engine.pipeline``) the mesh is (dp, pp, tp):
``pp`` the stages of one replica (consecutive ranks, as the controller hands a replica's
rows to consecutive ranks; tp inside each stage), ``fsdp`` = ``dp`` the replicas of a stage,
over which it shards its layers.
"""

from dataclasses import dataclass

import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from ascent.engine.config import NO_SPLIT, ParallelConfig


@dataclass(frozen=True)
class TrainingMesh:
    fsdp: DeviceMesh  # every rank but the tensor-parallel axis
    dp: DeviceMesh | None = None  # the data-parallel replicas (None: every rank is one)
    tp: DeviceMesh | None = None  # the tensor-parallel axis (None: weights are not split)
    sp: DeviceMesh | None = None  # the sequence-parallel axis (None: sequences stay whole)
    ep: DeviceMesh | None = None  # the expert-parallel axis (None: experts are not split)
    cp: DeviceMesh | None = None  # the ring's axis (None: no ring context parallelism)
    # What FSDP shards a mixture's experts over when they are their own units: edp with
    # expert parallelism, and the tp axis too (they are whole on every tensor rank); None:
    # they shard with their layer.
    expert_shards: DeviceMesh | None = None
    sequence: DeviceMesh | None = None  # ranks splitting a micro-batch (cp x sp; else sp)
    edp: DeviceMesh | None = None  # the ranks sharing an expert shard
    pp: DeviceMesh | None = None  # the pipeline's stages (None: one stage holds every layer)

    @property
    def data_parallel_size(self) -> int:
        """Replicas: ranks that are given different rows."""
        return (self.dp or self.fsdp).size()


def training_mesh(device_type: str, parallel: ParallelConfig = NO_SPLIT) -> TrainingMesh:
    """The mesh of this process group's ranks (module docstring); ValueError when the
    degrees cannot split them (``ParallelConfig.rank_problem``)."""
    world = dist.get_world_size()
    problem = parallel.rank_problem(world)
    if problem is not None:
        raise ValueError(problem)
    tensor, sequence, expert = parallel.tensor, parallel.sequence, parallel.expert
    rest = world // tensor
    small, big = sorted((expert, sequence))
    with_tp = ("tp",) if tensor > 1 else ()
    if parallel.context > 1:
        return _ring_mesh(device_type, parallel, world, with_tp)
    if parallel.pipeline > 1:
        return _pipeline_mesh(device_type, parallel, world, with_tp)
    if big == 1:
        names: tuple[str, ...] = ("fsdp",)
        mesh = init_device_mesh(
            device_type, (rest, tensor)[: 1 + len(with_tp)], mesh_dim_names=names + with_tp
        )
        return TrainingMesh(
            fsdp=mesh["fsdp"],
            dp=mesh["fsdp"] if with_tp else None,
            tp=mesh["tp"] if with_tp else None,
            expert_shards=mesh["fsdp", "tp"]._flatten("fsdp_tp") if with_tp else None,
        )
    names = ("outer", "middle", "inner")
    shape = (rest // big, big // small, small, tensor)[: 3 + len(with_tp)]
    mesh = init_device_mesh(device_type, shape, mesh_dim_names=names + with_tp)
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

    sp, dp = inner(sequence)
    ep, edp = inner(expert)
    shards = (edp if expert > 1 else names) + with_tp
    return TrainingMesh(
        fsdp=axes(*names),
        dp=axes(*dp) if sequence > 1 or with_tp else None,
        sp=axes(*sp) if sequence > 1 else None,
        sequence=axes(*sp) if sequence > 1 else None,
        ep=axes(*ep) if expert > 1 else None,
        edp=axes(*edp) if expert > 1 else None,
        tp=mesh["tp"] if with_tp else None,
        expert_shards=axes(*shards) if expert > 1 or with_tp else None,
    )


def _ring_mesh(
    device_type: str, parallel: ParallelConfig, world: int, with_tp: tuple[str, ...]
) -> TrainingMesh:
    """(dp, cp, sp[, tp]) for ring context parallelism (module docstring)."""
    ring, ulysses = parallel.context, parallel.sequence
    rest = world // parallel.tensor
    names = ("dp", "cp", "sp")
    shape = (rest // (ring * ulysses), ring, ulysses, parallel.tensor)[: 3 + len(with_tp)]
    mesh = init_device_mesh(device_type, shape, mesh_dim_names=names + with_tp)
    return TrainingMesh(
        fsdp=mesh[names]._flatten("dp_cp_sp"),
        dp=mesh["dp"],
        sp=mesh["sp"] if ulysses > 1 else None,
        cp=mesh["cp"],
        sequence=mesh["cp", "sp"]._flatten("cp_sp"),
        tp=mesh["tp"] if with_tp else None,
    )


def _pipeline_mesh(
    device_type: str, parallel: ParallelConfig, world: int, with_tp: tuple[str, ...]
) -> TrainingMesh:
    """(dp, pp[, tp]) for pipeline parallelism (module docstring)."""
    stages = parallel.pipeline
    shape = (world // (stages * parallel.tensor), stages, parallel.tensor)[: 2 + len(with_tp)]
    mesh = init_device_mesh(device_type, shape, mesh_dim_names=("dp", "pp", *with_tp))
    return TrainingMesh(
        fsdp=mesh["dp"],
        dp=mesh["dp"],
        pp=mesh["pp"],
        tp=mesh["tp"] if with_tp else None,
        expert_shards=mesh["dp", "tp"]._flatten("dp_tp") if with_tp else None,
    )
