"""The in-process backend: one rank, running in the driver's own thread.

No Ray, no extra process: ``breakpoint()`` inside a worker method stops in the driver's
terminal, and a plain debugger steps from the RL loop into the worker. Calls run when they
are submitted; a failure is kept and raised when the result is asked for, as with Ray.
Timeouts do not apply (a debugger session must not be cut short).
"""

from dataclasses import dataclass
from typing import Any

from ascent.controller.errors import WorkerError
from ascent.controller.host import Placement, WorkerHost
from ascent.controller.resources import ResourcePool
from ascent.controller.worker import Role


@dataclass(frozen=True)
class LocalResult:
    value: Any = None
    error: WorkerError | None = None

    def get(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


class LocalHosts:
    """The single host of an in-process group."""

    kind = "in-process"
    world_size = 1

    def __init__(
        self,
        roles: dict[str, Role],
        pool: ResourcePool,
        *,
        seed: int | None = None,
        deterministic: bool = False,
    ) -> None:
        if pool.world_size != 1:
            raise ValueError(
                f"the in-process backend runs one rank, but the pool has {pool.world_size}; "
                "use backend='ray' for more"
            )
        self.host = WorkerHost(
            Placement(0, 1, 0, 1, pool.device, None, seed=seed, deterministic=deterministic)
        )
        self.host.setup_single_process()
        self.host.create_workers(roles)
        self.infos = [self.host.info()]

    def put(self, value: Any) -> Any:
        return value

    def submit(
        self, rank: int, role: str, method: str, returns: bool, args: tuple, kwargs: dict
    ) -> Any:
        try:
            return LocalResult(self.host.execute(role, method, returns, *args, **kwargs))
        except WorkerError as error:
            return LocalResult(error=error)

    def argument(self, handle: Any) -> Any:
        """A result handle passed on as another call's argument: its value."""
        return handle.get() if isinstance(handle, LocalResult) else handle

    def wait(
        self, handles: dict[int, Any], role: str, method: str, timeout_s: float | None
    ) -> dict[int, Any]:
        return {rank: handle.get() for rank, handle in handles.items()}

    def shutdown(self) -> None:
        self.host.close()
