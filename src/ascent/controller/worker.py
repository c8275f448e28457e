"""The base class of role workers, what each worker knows about its place, and role specs."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ascent.controller import randomness
from ascent.controller.dispatch import Dispatch, register


@dataclass(frozen=True)
class WorkerContext:
    """A worker's place in its group; available as ``self.ctx`` from ``__init__`` on.

    rank / world_size: position in the group (one process per device).
    local_rank / local_world_size: position among the group's workers on this node.
    replica_size: ranks per data-parallel replica (tensor/sequence-parallel peers).
    device: this worker's device (cuda:0 under Ray's per-worker CUDA_VISIBLE_DEVICES, or cpu).
    host: name of the machine it runs on.
    peers: the other roles' workers in this process (see ``colocated``).
    """

    role: str
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    replica_size: int
    device: torch.device
    host: str
    peers: Mapping[str, "Worker"] = field(default_factory=dict, repr=False, compare=False)

    def colocated(self, role: str) -> "Worker":
        """The worker of ``role`` in this same process (roles spawned together): the
        rollout reads the actor's weights through it without any transfer."""
        if role not in self.peers:
            raise LookupError(
                f"no {role!r} worker in this process (colocated: {sorted(self.peers)}); "
                "spawn the roles together to colocate them"
            )
        return self.peers[role]

    @property
    def dp_rank(self) -> int:
        return self.rank // self.replica_size

    @property
    def dp_size(self) -> int:
        return self.world_size // self.replica_size


class Worker:
    """Subclass this for a role (actor, critic, rollout, ...) and mark the methods the driver
    may call with ``@register(Dispatch.X)``. ``self.ctx`` is set before ``__init__`` runs, and
    torch.distributed is already initialised over the group, so ``__init__`` can build and
    shard a model.
    """

    ctx: WorkerContext

    @property
    def rank(self) -> int:
        return self.ctx.rank

    @property
    def world_size(self) -> int:
        return self.ctx.world_size

    @property
    def device(self) -> torch.device:
        return self.ctx.device

    # Random generators belong to the process, not the role: call these on one role per
    # process (the roles colocated with it share the state).
    @register(Dispatch.ALL)
    def rng_state(self) -> dict[str, Any]:
        """This process's generator states (see ``ascent.controller.randomness``)."""
        return randomness.rng_state()

    @register(Dispatch.PER_RANK)
    def set_rng_state(self, state: dict[str, Any]) -> None:
        randomness.set_rng_state(state)


@dataclass(frozen=True)
class Role:
    """A role to start in every process of a pool: ``cls(*args, **kwargs)`` on each rank.

    replica_size: consecutive ranks that hold one model copy (tensor or sequence parallel);
        they receive the same data shard and only the first returns results.
    """

    cls: type
    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    replica_size: int = 1

    def __post_init__(self) -> None:
        if not (isinstance(self.cls, type) and issubclass(self.cls, Worker)):
            raise TypeError(f"Role needs a subclass of ascent.controller.Worker, got {self.cls!r}")

    def instantiate(self, ctx: WorkerContext) -> Worker:
        """Create the worker with ``ctx`` in place before its ``__init__`` runs."""
        worker = self.cls.__new__(self.cls)
        worker.ctx = ctx
        worker.__init__(*self.args, **self.kwargs)
        return worker
