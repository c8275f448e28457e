"""Where workers run: a pool of devices spread over nodes."""

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class ResourcePool:
    """``nodes`` x ``devices_per_node`` workers, one process per device.

    Rank r runs on node r // devices_per_node as its local rank r % devices_per_node, so
    ranks are packed per node and keep their place for the life of the group. With Ray the
    pool is one placement group with a bundle per node (spread over distinct nodes when
    nodes > 1), reserved before any worker starts.

    device: "cpu" (torch.distributed over gloo) or "cuda" (one GPU per worker, NCCL).
    cpus_per_worker: CPU cores reserved for each worker; it also sets the worker's torch
        thread count, so workers on one machine do not oversubscribe its cores.
    """

    nodes: int = 1
    devices_per_node: int = 1
    device: Literal["cpu", "cuda"] = "cpu"
    cpus_per_worker: float = 1.0

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.devices_per_node < 1:
            raise ValueError(
                f"a resource pool needs nodes >= 1 and devices_per_node >= 1, got "
                f"nodes={self.nodes}, devices_per_node={self.devices_per_node}"
            )
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda', got {self.device!r}")
        if self.cpus_per_worker <= 0:
            raise ValueError(f"cpus_per_worker must be > 0, got {self.cpus_per_worker}")

    @property
    def world_size(self) -> int:
        return self.nodes * self.devices_per_node

    def node_of(self, rank: int) -> int:
        return rank // self.devices_per_node

    def local_rank_of(self, rank: int) -> int:
        return rank % self.devices_per_node
