"""Errors a worker group raises on the driver. Each names the role, the rank and the host,
so a failure in a 16-process job says where it happened without digging through logs."""

from ascent.errors import UserError


class WorkerError(RuntimeError):
    """A worker method raised. Carries the worker's own traceback as text."""

    def __init__(
        self, role: str, method: str, rank: int, host: str, pid: int, error: str, traceback: str
    ) -> None:
        self.role, self.method, self.rank, self.host, self.pid = role, method, rank, host, pid
        self.error, self.traceback = error, traceback
        super().__init__(
            f"{role}.{method} failed on rank {rank} (host {host}, pid {pid}): {error}\n"
            f"--- worker traceback (rank {rank}) ---\n{traceback.rstrip()}"
        )

    def __reduce__(self) -> tuple:
        args = (self.role, self.method, self.rank, self.host, self.pid, self.error, self.traceback)
        return type(self), args


class WorkerInputError(WorkerError, UserError):
    """A worker method refused what the user gave (a ``UserError`` in the worker, such as a
    model path that holds no model): its message alone, as the driver's own user errors;
    the worker's traceback stays in ``traceback`` for ``--debug``."""

    def __init__(
        self, role: str, method: str, rank: int, host: str, pid: int, error: str, traceback: str
    ) -> None:
        super().__init__(role, method, rank, host, pid, error, traceback)
        self.args = (f"{role} (rank {rank}): {error}",)

    def __str__(self) -> str:
        return self.args[0]


class WorkerDied(RuntimeError):
    """A worker process ended (killed, out of memory, crashed) while the driver waited on it."""

    def __init__(self, role: str, method: str, rank: int, host: str, pid: int, detail: str) -> None:
        self.role, self.method, self.rank, self.host, self.pid = role, method, rank, host, pid
        self.detail = detail
        super().__init__(
            f"the {role} worker of rank {rank} (host {host}, pid {pid}) died during "
            f"{role}.{method}: {detail.strip().splitlines()[0] if detail.strip() else 'no detail'}"
        )

    def __reduce__(self) -> tuple:
        args = (self.role, self.method, self.rank, self.host, self.pid, self.detail)
        return type(self), args


class WorkerTimeout(TimeoutError):
    """A call did not finish in time; lists the ranks still running, with their Python stacks."""

    def __init__(self, role: str, method: str, timeout_s: float, stacks: dict[int, str]) -> None:
        self.role, self.method, self.timeout_s, self.stacks = role, method, timeout_s, stacks
        ranks = ", ".join(str(rank) for rank in sorted(stacks))
        details = "\n".join(
            f"--- rank {rank} is at ---\n{stack.rstrip()}" for rank, stack in sorted(stacks.items())
        )
        super().__init__(
            f"{role}.{method} did not finish within {timeout_s:g} s; still running on rank(s) "
            f"{ranks}\n{details}"
        )

    def __reduce__(self) -> tuple:
        return type(self), (self.role, self.method, self.timeout_s, self.stacks)
