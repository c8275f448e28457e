"""Config pieces every trainer shares: where the workers run, and the loop's checkpoints,
resume and seeding."""

from typing import Literal

from pydantic import Field, field_validator

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


class RunSettings(Strict):
    """What the RL and SFT loops share: checkpoints, resume, seeding, export, progress."""

    # Each trainer sets its own default; declared here so it comes first in every table.
    run_dir: str = Field("runs", description="Checkpoints, metrics and the export.")
    save_every: int = Field(0, ge=0, description="Checkpoint every N steps (0: at the end only).")
    keep_last: int | None = Field(2, ge=1, description="Checkpoints kept (None: all).")
    resume: str = Field(
        "auto",
        description="auto (newest intact checkpoint of run_dir), off, or a checkpoint or run "
        "directory.",
    )
    save_optimizer: bool = Field(
        True,
        description="Keep optimiser state in checkpoints (off: a third of the size; a "
        "resumed run restarts Adam's moments).",
    )
    checksum_checkpoints: bool = Field(
        True, description="sha256 of every checkpoint file, checked on resume (off: sizes only)."
    )
    export: bool = Field(True, description="Write the final model as a transformers checkpoint.")
    seed: int = Field(0, description="Seed of the data order, RL sampling and every worker's RNGs.")
    deterministic: bool = Field(
        False,
        description="Deterministic kernels everywhere (bitwise-repeatable runs; slower on GPU).",
    )
    progress_bar: bool = Field(True, description="Show a progress bar with ETA.")

    @field_validator("resume", mode="before")
    @classmethod
    def _yaml_off(cls, value: object) -> object:
        """YAML reads ``off`` and ``on`` as booleans; a resume setting means the words."""
        if value is False:
            return "off"
        if value is True:
            return "auto"
        return value
