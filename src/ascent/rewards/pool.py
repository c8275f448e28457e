"""The scoring processes: a pebble pool that outlives stop signals and killed workers.

Signals meant for the driver (SIGTERM from Slurm or ``timeout``, Ctrl-C's SIGINT) reach every
process of its group, scorers included. The driver answers them by finishing the step with a
checkpoint, so the scorers ignore both: the step's samples still get their real scores. The
pool stops a worker itself (a sample past its time limit) with SIGKILL instead.

A worker can still die from outside (SIGKILL, the out-of-memory killer) or by a crash in the
scorer. Its sample is scored again in a fresh worker, up to ``RETRIES`` times, then the batch
fails with ``ScorerDied``: a sample is never scored 0 because its process died. When a worker
dies while none is running a task, pebble marks the whole pool broken (every later task
fails); such a pool is replaced by a new one.
"""

import signal
from collections.abc import Callable
from concurrent.futures import Future, wait
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.context import SpawnContext, SpawnProcess
from typing import Any

from pebble import ProcessExpired, ProcessPool

RETRIES = 2  # a sample whose worker died is scored at most 1 + RETRIES times
BROKEN_POOL_CHECK_S = 1.0  # how often a wait looks for a pool that broke under it


class ScorerDied(RuntimeError):
    """A sample's scoring process died on every attempt; ``index`` is its place in the calls."""

    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.index = index


class _KilledProcess(SpawnProcess):
    def terminate(self) -> None:
        # pebble stops a timed-out worker with terminate() and waits 3 s before SIGKILL; ours
        # ignore SIGTERM, so every timeout would cost those 3 s.
        self.kill()


class _Context(SpawnContext):
    Process = _KilledProcess


def _ignore_stop_signals() -> None:
    """Worker initializer: the driver's stop signals are the driver's business."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class ScoringPool:
    """``workers`` spawned processes running calls with a time limit of ``timeout_s`` each."""

    def __init__(self, workers: int, timeout_s: float) -> None:
        self.workers, self.timeout_s = workers, timeout_s
        self.pool = self._new_pool()

    def _new_pool(self) -> ProcessPool:
        return ProcessPool(
            max_workers=self.workers, initializer=_ignore_stop_signals, context=_Context()
        )

    def run(self, function: Callable[..., Any], calls: list[tuple]) -> list[Future]:
        """One finished future per call: its result, its exception, or TimeoutError past the
        time limit. A call whose worker died is run again; ScorerDied after RETRIES."""
        finished: dict[int, Future] = {}
        lost: dict[int, BaseException] = {}
        for _ in range(1 + RETRIES):
            futures = {
                i: self._schedule(function, call)
                for i, call in enumerate(calls)
                if i not in finished
            }
            self._wait(list(futures.values()))
            lost = {}
            for i, future in futures.items():
                error = future.exception() if future.done() else BrokenProcessPool()
                if isinstance(error, ProcessExpired | BrokenProcessPool):
                    lost[i] = error
                else:
                    finished[i] = future
            if not lost:
                return [finished[i] for i in range(len(calls))]
        index, error = next(iter(lost.items()))
        code = getattr(error, "exitcode", None)
        cause = f"exit code {code}" if code is not None else "its pool broke"
        raise ScorerDied(
            f"its scoring process died {1 + RETRIES} times (the last: {cause}); killed from "
            "outside, out of memory, or a crash in the scorer",
            index,
        )

    def _schedule(self, function: Callable[..., Any], call: tuple) -> Future:
        if not self.pool.active:  # a worker died while idle: pebble gave up on the pool
            self.pool.stop()
            self.pool.join()
            self.pool = self._new_pool()
        return self.pool.schedule(function, args=call, timeout=self.timeout_s)

    def _wait(self, futures: list[Future]) -> None:
        """Until every future is done, or the pool broke (its unfinished ones never will)."""
        pending = set(futures)
        while pending:
            pending = wait(pending, timeout=BROKEN_POOL_CHECK_S).not_done
            if pending and not self.pool.active:
                return

    def close(self) -> None:
        self.pool.close()
        self.pool.join()
