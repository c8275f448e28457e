"""The Ray backend: one Ray actor process per rank, placed by a placement group.

Start-up: reserve the pool (one bundle per node, on distinct nodes), start one host actor per
rank in its node's bundle, let rank 0 pick the rendezvous address, initialise
torch.distributed on all ranks at once, then create the role workers. Calls are actor method
calls; waiting is fail-fast: once any rank raises or dies, the wait ends within a few seconds
with an error naming the rank at fault (a dead rank before the peers whose collectives its
death broke), without waiting for ranks blocked in a collective with it.
"""

import functools
import os
from typing import Any

from ascent.controller.errors import WorkerDied, WorkerError, WorkerTimeout
from ascent.controller.host import HostInfo, Placement, WorkerHost
from ascent.controller.resources import ResourcePool
from ascent.controller.worker import Role

STACK_TIMEOUT_S = 10.0
# How long a failure waits for the other ranks to be found dead before it is reported.
DEATH_GRACE_S = 5.0


def ensure_ray(address: str | None = None) -> None:
    """Connect to the cluster at ``address`` (or $RAY_ADDRESS), else start a local Ray;
    nothing if this process is already connected.

    A local Ray's processes (GCS, raylet, agents) are started in process groups of their own:
    in the driver's group, a SIGTERM meant for the driver (``timeout``, ``kill -- -PGID``, a
    scheduler signalling the job's group) would stop Ray too while the driver finishes its
    step, and the run would hang on the lost GCS instead of saving. They still end with the
    driver (Ray ties them to it with PR_SET_PDEATHSIG); the actors have their own groups."""
    import ray

    if ray.is_initialized():
        return
    global _starting_ray
    _own_groups_at_fork()
    workers_at_normal_priority()
    _starting_ray = True
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=True)
    finally:
        _starting_ray = False


_starting_ray = False  # set while ray.init starts its processes


def workers_at_normal_priority() -> None:
    """Ray starts its workers at niceness 15, below its own processes; but here they are the
    run's ranks, and at 15 any other work on the machine (a build, another job) starves them
    while the driver, at 0, waits on them. A Ray started by this process runs them at 0; a
    cluster it connects to keeps its own setting, and so does $RAY_worker_niceness if set."""
    os.environ.setdefault("RAY_worker_niceness", "0")


@functools.cache
def _own_groups_at_fork() -> None:
    """Ray starts its processes with a ``preexec_fn``, so Python's fork hooks run in them."""

    def leave_the_group() -> None:
        if _starting_ray:
            os.setpgrp()

    os.register_at_fork(after_in_child=leave_the_group)


@functools.cache
def _host_actor_class() -> Any:
    import ray

    class RayWorkerHost(WorkerHost):
        # Its own thread: answers while the worker method runs (stack of a stuck call).
        @ray.method(concurrency_group="control")
        def stack(self) -> str:
            return super().stack()

    return ray.remote(concurrency_groups={"control": 1}, max_restarts=0)(RayWorkerHost)


class RayHosts:
    """The host actors of one resource pool, shared by the roles colocated on it."""

    kind = "ray"

    def __init__(
        self,
        roles: dict[str, Role],
        pool: ResourcePool,
        *,
        address: str | None = None,
        start_timeout_s: float = 180.0,
        seed: int | None = None,
        deterministic: bool = False,
    ) -> None:
        import ray
        from ray.util.placement_group import placement_group

        ensure_ray(address)
        self.world_size = pool.world_size
        self.infos: list[HostInfo | None] = [None] * pool.world_size
        self.handles: list[Any] = []
        gpus = pool.devices_per_node if pool.device == "cuda" else 0
        bundle = {"CPU": pool.cpus_per_worker * pool.devices_per_node} | (
            {"GPU": gpus} if gpus else {}
        )
        strategy = "STRICT_SPREAD" if pool.nodes > 1 else "STRICT_PACK"
        self.placement_group = placement_group([bundle] * pool.nodes, strategy=strategy)
        ready, _ = ray.wait([self.placement_group.ready()], timeout=start_timeout_s)
        if not ready:
            ray.util.remove_placement_group(self.placement_group)
            raise RuntimeError(
                f"could not reserve {pool.nodes} node(s) x {bundle} within {start_timeout_s:g} s "
                f"({strategy}); the cluster has {ray.cluster_resources()} on "
                f"{len(ray.nodes())} node(s). Lower the pool or add nodes."
            )
        try:
            self._start(roles, pool, gpus, start_timeout_s, seed, deterministic)
        except BaseException:
            self.shutdown()  # no half-started group keeps its reserved devices
            raise

    def _start(
        self,
        roles: dict[str, Role],
        pool: ResourcePool,
        gpus: int,
        timeout_s: float,
        seed: int | None,
        deterministic: bool,
    ) -> None:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        actor_class = _host_actor_class()
        self.handles = [
            actor_class.options(
                num_cpus=pool.cpus_per_worker,
                num_gpus=1 if gpus else 0,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    self.placement_group, placement_group_bundle_index=pool.node_of(rank)
                ),
            ).remote(
                Placement(
                    rank=rank,
                    world_size=pool.world_size,
                    local_rank=pool.local_rank_of(rank),
                    local_world_size=pool.devices_per_node,
                    device=pool.device,
                    cpus=pool.cpus_per_worker,
                    seed=seed,
                    deterministic=deterministic,
                )
            )
            for rank in range(pool.world_size)
        ]
        setup = "+".join(roles)
        address_ref = {0: self.handles[0].rendezvous_address.remote()}
        master = self.wait(address_ref, setup, "start", timeout_s)[0]
        self.wait(
            {r: h.setup_distributed.remote(*master) for r, h in self._ranks()},
            setup,
            "setup_distributed",
            timeout_s,
        )
        self.infos = list(
            self.wait(
                {r: h.info.remote() for r, h in self._ranks()}, setup, "info", timeout_s
            ).values()
        )
        self.wait(
            {r: h.create_workers.remote(roles) for r, h in self._ranks()},
            setup,
            "__init__",
            timeout_s,
        )

    def _ranks(self) -> list[tuple[int, Any]]:
        return list(enumerate(self.handles))

    def put(self, value: Any) -> Any:
        import ray

        return ray.put(value)

    def submit(
        self, rank: int, role: str, method: str, returns: bool, args: tuple, kwargs: dict
    ) -> Any:
        return self.handles[rank].execute.remote(role, method, returns, *args, **kwargs)

    def argument(self, handle: Any) -> Any:
        """A result handle passed on as another call's argument: the reference itself."""
        return handle

    def wait(
        self, handles: dict[int, Any], role: str, method: str, timeout_s: float | None
    ) -> dict[int, Any]:
        """Results by rank. Fail-fast: ``ray.get`` of the list raises as soon as any rank has
        failed (raised or died), even while others are blocked, for example in a collective
        with the dead one; the failing rank is then found and named (a dead rank before the
        peers whose collectives it broke). A call past
        ``timeout_s`` raises WorkerTimeout with the stuck ranks' stacks."""
        import ray
        from ray.exceptions import GetTimeoutError

        ranks, refs = list(handles), list(handles.values())
        try:
            return dict(zip(ranks, ray.get(refs, timeout=timeout_s), strict=True))
        except GetTimeoutError:
            _, running = ray.wait(refs, num_returns=len(refs), timeout=0)
            stuck = [rank for rank, ref in handles.items() if ref in running]
            raise WorkerTimeout(role, method, timeout_s or 0.0, self.stacks(stuck)) from None
        except Exception:
            failure = self._root_failure(handles, role, method)
            if failure is None:
                raise
            raise failure from None

    def _root_failure(
        self, handles: dict[int, Any], role: str, method: str
    ) -> WorkerError | WorkerDied | None:
        """The error to report once some rank has failed: a death before anything else.

        When a rank is killed while its peers wait for it in a collective, a peer's gloo or
        NCCL call can fail ("connection closed by peer") before Ray has noticed the death;
        reporting that peer's error would blame the wrong rank. So the other ranks get up to
        ``DEATH_GRACE_S`` to finish or be found dead, and a death, if any, is the error."""
        import ray

        refs = list(handles.values())
        _, pending = ray.wait(refs, num_returns=len(refs), timeout=0)
        if pending:
            ray.wait(pending, num_returns=len(pending), timeout=DEATH_GRACE_S)
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        failures: list[WorkerError | WorkerDied] = []
        for rank, ref in handles.items():
            if ref in ready:
                try:
                    self._get(ref, rank, role, method)
                except (WorkerError, WorkerDied) as failure:
                    failures.append(failure)
        deaths = [failure for failure in failures if isinstance(failure, WorkerDied)]
        return (deaths or failures or [None])[0]

    def _get(self, ref: Any, rank: int, role: str, method: str) -> Any:
        import ray
        from ray.exceptions import RayActorError, RayTaskError

        try:
            return ray.get(ref)
        except RayTaskError as error:
            if isinstance(error.cause, WorkerError):
                raise error.cause from None
            raise WorkerError(
                role, method, rank, self._where(rank)[0], self._where(rank)[1], str(error), ""
            ) from None
        except RayActorError as error:
            host, pid = self._where(rank)
            raise WorkerDied(role, method, rank, host, pid, str(error)) from None

    def _where(self, rank: int) -> tuple[str, int]:
        info = self.infos[rank]
        return (info.host, info.pid) if info is not None else ("unknown host", -1)

    def stacks(self, ranks: list[int]) -> dict[int, str]:
        """The current Python stack of each rank's running worker method."""
        import ray

        refs = {rank: self.handles[rank].stack.remote() for rank in ranks}
        stacks = {}
        for rank, ref in refs.items():
            try:
                stacks[rank] = ray.get(ref, timeout=STACK_TIMEOUT_S)
            except Exception as error:  # a dead or wedged process cannot report
                stacks[rank] = f"(no stack: {type(error).__name__}: {error})"
        return stacks

    def shutdown(self) -> None:
        import ray

        for handle in self.handles:
            ray.kill(handle)
        self.handles = []
        if self.placement_group is not None:
            ray.util.remove_placement_group(self.placement_group)
            self.placement_group = None
