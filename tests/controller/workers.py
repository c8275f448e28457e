"""Worker classes used by the controller tests (importable by Ray worker processes)."""

import os
import threading
import time

import torch
import torch.distributed as dist

from ascent.batch import Batch
from ascent.controller import Dispatch, Worker, register


class EchoWorker(Worker):
    """Reports where it runs and echoes what it receives, for every dispatch mode."""

    def __init__(self, tag: str = "echo"):
        self.tag = tag

    @register(Dispatch.ALL)
    def whoami(self):
        return {
            "role": self.ctx.role,
            "tag": self.tag,
            "rank": self.rank,
            "world_size": self.world_size,
            "dp_rank": self.ctx.dp_rank,
            "pid": os.getpid(),
            "device": str(self.device),
            "threads": torch.get_num_threads(),
            "node_ip": os.environ.get("MASTER_ADDR"),
            "dist_world": dist.get_world_size(),
            "dist_rank": dist.get_rank(),
            "main_thread": threading.current_thread() is threading.main_thread(),
        }

    @register(Dispatch.DP)
    def double(self, batch: Batch, offset: float = 0.0) -> Batch:
        return batch.assign(x=batch["x"] * 2 + offset, seen_by=[self.rank] * len(batch))

    @register(Dispatch.DP)
    def shard_size(self, batch: Batch) -> int:
        return len(batch)

    @register(Dispatch.DP)
    def remember(self, batch: Batch) -> list:
        self.remembered = batch["x"].tolist()
        return self.remembered

    @register(Dispatch.ALL)
    def recall(self) -> list:
        return self.remembered

    @register(Dispatch.ALL)
    def total(self, batch: Batch) -> float:
        return float(batch["x"].sum())

    @register(Dispatch.RANK_ZERO)
    def on_rank_zero(self, value):
        return (self.rank, value)

    @register(Dispatch.PER_RANK)
    def per_rank(self, value):
        return (self.rank, value)

    @register(Dispatch.ALL)
    def all_reduce(self, value: float) -> float:
        tensor = torch.tensor([value * (self.rank + 1)], device=self.device)
        dist.all_reduce(tensor)
        return tensor.item()

    @register(Dispatch.ALL)
    def fail_on(self, rank: int) -> str:
        if self.rank == rank:
            raise ValueError(f"deliberate failure on rank {self.rank}")
        return "ok"

    @register(Dispatch.ALL)
    def pid(self) -> int:
        return os.getpid()

    @register(Dispatch.ALL)
    def sleep_on(self, rank: int, seconds: float) -> int:
        if self.rank == rank:
            wait_here(seconds)
        return self.rank

    def not_registered(self):
        return "the driver cannot call this"


def wait_here(seconds: float) -> None:
    """A recognisable frame for the stuck-worker stack test."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.05)


class ShapeWorker(EchoWorker):
    """A second role, to be colocated with EchoWorker."""


class LoggedOnUnpickle:
    """Appends the unpickling process's pid to a file: shows which processes received data."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return _record_unpickle, (self.path,)


def _record_unpickle(path: str) -> "LoggedOnUnpickle":
    with open(path, "a") as log:
        log.write(f"{os.getpid()}\n")
    return LoggedOnUnpickle(path)


class CollectiveWorker(EchoWorker):
    @register(Dispatch.ALL)
    def reduce_after(self, delays: list[float]) -> float:
        """Each rank waits its delay, then joins an all-reduce."""
        wait_here(delays[self.rank])
        tensor = torch.ones(1)
        dist.all_reduce(tensor)
        return tensor.item()

    @register(Dispatch.ALL)
    def raise_or_exit(self, delays: list[float]) -> None:
        """Rank 0 raises after its delay, as a collective does when its peer's connection
        closes; every other rank ends its process after its delay, as a killed one does."""
        wait_here(delays[self.rank])
        if self.rank == 0:
            raise RuntimeError("Connection closed by peer")
        os._exit(1)
