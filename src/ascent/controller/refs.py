"""Arguments that are other calls' results, fetched by the worker that needs them.

When a future from one group is passed to another group's call, the driver does not fetch
it: it sends the target workers references to the result shards, and each worker pulls what
it needs directly (from Ray's object store, possibly on another node). Three shapes:

- a shard reference itself, when the target's data-parallel size equals the number of
  shards: Ray resolves a top-level reference argument before the method runs;
- ``Reshard``: the target has a different data-parallel size, so each worker fetches all
  shards, concatenates them and keeps its own part;
- ``Gather``: the target wants the whole result (ALL or RANK_ZERO methods).
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Gather:
    """All shards of a data-parallel result, concatenated in order."""

    handles: Sequence[Any]

    def fetch(self) -> Any:
        from ascent.batch import Batch

        parts = [_fetch(h) for h in self.handles]
        if len(parts) == 1:  # one rank's result (a RANK_ZERO call, or future.of_rank(r))
            return parts[0]
        return Batch.concat(parts) if all(isinstance(p, Batch) for p in parts) else parts


@dataclass(frozen=True)
class Reshard:
    """Part ``index`` of ``parts`` of the concatenated shards."""

    handles: Sequence[Any]
    index: int
    parts: int

    def fetch(self) -> Any:
        return Gather(self.handles).fetch().split(self.parts)[self.index]


def resolve(value: Any) -> Any:
    """A worker-side argument: deferred ones are fetched, anything else is returned as is."""
    return value.fetch() if isinstance(value, Gather | Reshard) else value


def _fetch(handle: Any) -> Any:
    if type(handle).__name__ == "ObjectRef":
        import ray

        return ray.get(handle)
    return handle
