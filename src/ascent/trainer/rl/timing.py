"""Seconds per stage of an RL step, logged as ``timing_s/<stage>``."""

import time
from collections.abc import Iterator
from contextlib import contextmanager


class StageTimes:
    """``with times("gen"): ...`` adds the block's seconds to ``timing_s/gen``: a stage that
    runs several times in one step (dynamic sampling's refill rounds, ReMax's baselines) is
    summed over the step. ``take`` hands the step's times over and starts the next step."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        began = time.perf_counter()
        yield
        self.add(stage, time.perf_counter() - began)

    def add(self, stage: str, seconds: float) -> None:
        key = f"timing_s/{stage}"
        self.seconds[key] = self.seconds.get(key, 0.0) + seconds

    def take(self) -> dict[str, float]:
        taken, self.seconds = self.seconds, {}
        return taken
