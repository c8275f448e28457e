"""How a call on a worker group is spread over its ranks and how the results come back.

A worker class declares this once per method with ``@register(Dispatch.X)``:

- ``ALL``: every rank gets the same arguments; the result is the list of every rank's result.
- ``DP``: every ``Batch`` argument is split into one consecutive part per data-parallel rank
  (``Batch.split``: B must divide evenly); ranks of one replica (tensor/sequence-parallel
  peers) get the same part, and only the first rank of each replica returns its result. The
  results are concatenated in rank order when they are Batches, else returned as a list.
  Other arguments go to every rank unchanged.
- ``RANK_ZERO``: only rank 0 runs; its result is returned.
- ``PER_RANK``: every argument is a list with one entry per rank; rank r gets entry r; the
  result is the list of every rank's result.
"""

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable)
_ATTRIBUTE = "__ascent_dispatch__"


class Dispatch(enum.Enum):
    """Dispatch mode of a worker method; see the module docstring."""

    ALL = "all"
    DP = "dp"
    RANK_ZERO = "rank_zero"
    PER_RANK = "per_rank"


def register(mode: Dispatch) -> Callable[[F], F]:
    """Mark a worker method as callable from the driver, spread over ranks by ``mode``."""
    if not isinstance(mode, Dispatch):
        raise TypeError(f"register() takes a Dispatch mode, got {mode!r}")

    def mark(method: F) -> F:
        setattr(method, _ATTRIBUTE, mode)
        return method

    return mark


def registered_methods(cls: type) -> dict[str, Dispatch]:
    """Name -> dispatch mode of every method of ``cls`` marked with ``register``."""
    methods = {}
    for name in dir(cls):
        mode = getattr(getattr(cls, name, None), _ATTRIBUTE, None)
        if isinstance(mode, Dispatch):
            methods[name] = mode
    return methods


@dataclass(frozen=True)
class Layout:
    """Ranks of a role grouped into data-parallel replicas of ``replica_size`` consecutive
    ranks (the tensor/sequence-parallel peers of one model copy)."""

    world_size: int
    replica_size: int = 1

    def __post_init__(self) -> None:
        if self.replica_size < 1 or self.world_size % self.replica_size:
            raise ValueError(
                f"replica_size {self.replica_size} must be >= 1 and divide the world size "
                f"{self.world_size}"
            )

    @property
    def dp_size(self) -> int:
        return self.world_size // self.replica_size

    def dp_rank(self, rank: int) -> int:
        return rank // self.replica_size

    def collectors(self) -> list[int]:
        """The rank that returns each replica's result, in data-parallel order."""
        return list(range(0, self.world_size, self.replica_size))


def collect(mode: Dispatch, results: list[Any]) -> Any:
    """Merge the results of the ranks that return (see ``called_ranks``/``returning_ranks``)."""
    if mode is Dispatch.RANK_ZERO:
        return results[0]
    if mode is Dispatch.DP:
        from ascent.batch import Batch

        if results and all(isinstance(r, Batch) for r in results):
            return Batch.concat(results)
        if all(r is None for r in results):
            return None
    return list(results)


def called_ranks(mode: Dispatch, layout: Layout) -> list[int]:
    """Ranks that run a call of this mode."""
    return [0] if mode is Dispatch.RANK_ZERO else list(range(layout.world_size))


def returning_ranks(mode: Dispatch, layout: Layout) -> list[int]:
    """Ranks whose results make up the call's result, in order."""
    if mode is Dispatch.RANK_ZERO:
        return [0]
    if mode is Dispatch.DP:
        return layout.collectors()
    return list(range(layout.world_size))
