"""Where a role's workers run: the devices, and how their processes are started (every
trainer's ``resources`` section, and the Tinker service's)."""

from typing import Literal

from pydantic import Field

from ascent.controller import ResourcePool
from ascent.engine.config import Strict


class ResourcesConfig(Strict):
    """The devices of the run, and how processes are started on them."""

    nodes: int = Field(1, ge=1, description="Machines.")
    devices_per_node: int = Field(1, ge=1, description="Worker processes (devices) per machine.")
    device: Literal["cpu", "cuda"] = Field("cpu", description="cpu (gloo) or cuda (NCCL).")
    cpus_per_worker: float = Field(1.0, gt=0, description="CPU cores per worker process.")
    backend: Literal["auto", "ray", "in-process"] = Field(
        "auto", description="in-process for one device (debuggable), Ray otherwise."
    )
    ray_address: str | None = Field(None, description="Connect to this Ray cluster.")

    def pool(self) -> ResourcePool:
        return ResourcePool(
            nodes=self.nodes,
            devices_per_node=self.devices_per_node,
            device=self.device,
            cpus_per_worker=self.cpus_per_worker,
        )

    @property
    def world_size(self) -> int:
        return self.nodes * self.devices_per_node
