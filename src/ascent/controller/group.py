"""WorkerGroup: a role's ranks, called from the driver as if they were one object.

    groups = spawn_groups({"actor": Role(ActorWorker), "ref": Role(RefWorker)}, pool)
    batch = groups["actor"].log_probs(batch)          # split over ranks, run, merged
    future = groups["actor"].log_probs.submit(batch)  # non-blocking
    batch = groups["ref"].log_probs(future)           # chained without the driver fetching

Each method's dispatch mode (``ascent.controller.dispatch``) decides how arguments are spread
over ranks and how results are merged. Roles spawned together share processes (colocation:
one process per device holds them all); separate ``spawn_groups`` calls with separate pools
place roles on separate devices.
"""

from collections.abc import Callable
from typing import Any, Literal

from ascent.batch import Batch
from ascent.controller.dispatch import (
    Dispatch,
    Layout,
    called_ranks,
    collect,
    registered_methods,
    returning_ranks,
)
from ascent.controller.refs import Gather, Reshard
from ascent.controller.resources import ResourcePool
from ascent.controller.worker import Role


class GroupFuture:
    """A call in flight on a group. ``result()`` waits; passing the future itself as an
    argument to another group's call hands over the shards without fetching them."""

    def __init__(self, group: "WorkerGroup", method: str, mode: Dispatch, handles: dict) -> None:
        self.group, self.method, self.mode, self.handles = group, method, mode, handles

    def result(self, timeout_s: float | None = None) -> Any:
        """The merged result; raises WorkerError / WorkerDied / WorkerTimeout naming the rank."""
        timeout = self.group.call_timeout_s if timeout_s is None else timeout_s
        results = self.group.hosts.wait(self.handles, self.group.role, self.method, timeout)
        return collect(
            self.mode, [results[r] for r in returning_ranks(self.mode, self.group.layout)]
        )

    def of_rank(self, rank: int) -> "GroupFuture":
        """This call's result on ``rank`` alone, as a future that can be passed on (e.g. the
        weights that rank 0 of an ALL call gathered)."""
        if rank not in self.handles:
            raise ValueError(f"{self.group.role}.{self.method} did not run on rank {rank}")
        return GroupFuture(self.group, self.method, Dispatch.RANK_ZERO, {0: self.handles[rank]})

    def as_argument(self, mode: Dispatch, layout: Layout) -> Callable[[int], Any]:
        """What each rank of a call with ``mode`` over ``layout`` receives for this future."""
        if self.mode not in (Dispatch.DP, Dispatch.RANK_ZERO):
            raise TypeError(
                f"a future of {self.group.role}.{self.method} ({self.mode.name}) returns one "
                "result per rank; pass future.result() (a list) instead"
            )
        if mode is Dispatch.PER_RANK:
            raise TypeError("PER_RANK methods take lists with one entry per rank, not futures")
        hosts = self.group.hosts
        shards = [
            hosts.argument(self.handles[r]) for r in returning_ranks(self.mode, self.group.layout)
        ]
        if mode is not Dispatch.DP:
            whole = Gather(shards)
            return lambda rank: whole
        if len(shards) == layout.dp_size:
            return lambda rank: shards[layout.dp_rank(rank)]
        return lambda rank: Reshard(shards, layout.dp_rank(rank), layout.dp_size)


class GroupMethod:
    """``group.name(...)`` calls and waits; ``group.name.submit(...)`` returns a future."""

    def __init__(self, group: "WorkerGroup", name: str, mode: Dispatch) -> None:
        self.group, self.name, self.mode = group, name, mode

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.submit(*args, **kwargs).result()

    def submit(self, *args: Any, **kwargs: Any) -> GroupFuture:
        return self.group.submit(self.name, *args, **kwargs)

    def __repr__(self) -> str:
        return f"<{self.group.role}.{self.name} ({self.mode.name})>"


class WorkerGroup:
    """The ranks of one role. Its registered worker methods are attributes of the group."""

    def __init__(self, role: str, spec: Role, hosts: Any, call_timeout_s: float | None) -> None:
        self.role, self.hosts, self.call_timeout_s = role, hosts, call_timeout_s
        self.layout = Layout(hosts.world_size, spec.replica_size)
        self.methods = registered_methods(spec.cls)
        for name, mode in self.methods.items():
            if hasattr(type(self), name):
                raise ValueError(
                    f"{spec.cls.__name__}.{name} clashes with WorkerGroup.{name}; rename it"
                )
            setattr(self, name, GroupMethod(self, name, mode))

    @property
    def world_size(self) -> int:
        return self.layout.world_size

    @property
    def dp_size(self) -> int:
        return self.layout.dp_size

    @property
    def backend(self) -> str:
        return self.hosts.kind

    @property
    def infos(self) -> list:
        """Per rank: pid, host, ip, device, threads."""
        return list(self.hosts.infos)

    def submit(self, method: str, *args: Any, **kwargs: Any) -> GroupFuture:
        """Start ``method`` on the ranks its dispatch mode names; returns at once."""
        mode = self.methods.get(method)
        if mode is None:
            raise AttributeError(
                f"{self.role} has no method {method!r} registered for the driver; decorate it "
                f"with @register(Dispatch...). Registered: {sorted(self.methods)}"
            )
        plans = [self._spread(mode, a) for a in args]
        keyword_plans = {k: self._spread(mode, v) for k, v in kwargs.items()}
        returning = set(returning_ranks(mode, self.layout))
        handles = {
            rank: self.hosts.submit(
                rank,
                self.role,
                method,
                rank in returning,
                tuple(plan(rank) for plan in plans),
                {k: plan(rank) for k, plan in keyword_plans.items()},
            )
            for rank in called_ranks(mode, self.layout)
        }
        return GroupFuture(self, method, mode, handles)

    def _spread(self, mode: Dispatch, value: Any) -> Callable[[int], Any]:
        """How one argument is given to each rank (see ascent.controller.dispatch)."""
        layout = self.layout
        if mode is Dispatch.PER_RANK:
            if not isinstance(value, list | tuple) or len(value) != layout.world_size:
                raise ValueError(
                    f"{self.role}: PER_RANK arguments must be lists of {layout.world_size} "
                    f"entries (one per rank), got {type(value).__name__}"
                )
            return lambda rank: value[rank]
        if isinstance(value, GroupFuture):
            return value.as_argument(mode, layout)
        if isinstance(value, Batch):
            if mode is Dispatch.DP:
                shards = [self.hosts.put(part) for part in value.split(layout.dp_size)]
                return lambda rank: shards[layout.dp_rank(rank)]
            shared = self.hosts.put(value)  # serialised once, however many ranks read it
            return lambda rank: shared
        return lambda rank: value

    def shutdown(self) -> None:
        """Stop the processes (and so every role colocated in them)."""
        self.hosts.shutdown()

    def __enter__(self) -> "WorkerGroup":
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return (
            f"WorkerGroup({self.role!r}, {self.backend}, world_size={self.world_size}, "
            f"dp_size={self.dp_size}, methods={sorted(self.methods)})"
        )


def resolve_backend(
    backend: Literal["auto", "ray", "in-process"], pool: ResourcePool, ray_address: str | None
) -> str:
    """The backend "auto" means: in-process for a one-device pool without a Ray address,
    else Ray."""
    if backend != "auto":
        return backend
    return "in-process" if pool.world_size == 1 and ray_address is None else "ray"


def spawn_groups(
    roles: dict[str, Role],
    pool: ResourcePool,
    *,
    backend: Literal["auto", "ray", "in-process"] = "auto",
    ray_address: str | None = None,
    call_timeout_s: float | None = None,
    start_timeout_s: float = 180.0,
    seed: int | None = None,
    deterministic: bool = False,
) -> dict[str, WorkerGroup]:
    """Start ``roles`` colocated on ``pool`` (one process per device holding all of them).

    backend "auto" is in-process for a one-device pool without a Ray address, else Ray (which
    connects to ``ray_address`` or $RAY_ADDRESS when given, else starts a local Ray).
    call_timeout_s bounds every call (None: no bound); a call past it raises WorkerTimeout
    with the stuck ranks' stacks. seed (when given) seeds every generator of every process
    before each role is built; deterministic selects deterministic kernels
    (see ``ascent.controller.randomness``).
    """
    if not roles:
        raise ValueError("spawn_groups needs at least one role")
    backend = resolve_backend(backend, pool, ray_address)
    if backend == "in-process":
        from ascent.controller.local_backend import LocalHosts

        hosts: Any = LocalHosts(roles, pool, seed=seed, deterministic=deterministic)
    elif backend == "ray":
        from ascent.controller.ray_backend import RayHosts

        hosts = RayHosts(
            roles,
            pool,
            address=ray_address,
            start_timeout_s=start_timeout_s,
            seed=seed,
            deterministic=deterministic,
        )
    else:
        raise ValueError(f"backend must be 'auto', 'ray' or 'in-process', got {backend!r}")
    return {name: WorkerGroup(name, spec, hosts, call_timeout_s) for name, spec in roles.items()}


def spawn_group(
    cls: type,
    pool: ResourcePool,
    *,
    role: str = "worker",
    replica_size: int = 1,
    args: tuple = (),
    kwargs: dict | None = None,
    **options: Any,
) -> WorkerGroup:
    """One role on its own pool; ``options`` as for ``spawn_groups``."""
    spec = Role(cls, args=args, kwargs=kwargs or {}, replica_size=replica_size)
    return spawn_groups({role: spec}, pool, **options)[role]
