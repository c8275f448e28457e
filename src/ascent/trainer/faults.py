"""Surviving faults in a long run: a stop request (SIGTERM from a scheduler, Ctrl-C) that
ends the run at the next step boundary with a checkpoint, and a guard that stops a run whose
updates keep being skipped for non-finite losses or gradients.

Why at a step boundary: a signal can arrive in the middle of an optimiser step on the
workers; stopping there would save weights that are half updated. The step finishes (the
scheduler's grace period must cover one step), the checkpoint is written, and the run exits.
A second Ctrl-C stops at once, without saving (the last checkpoint is untouched).
"""

import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from ascent.batch import Batch


class StopRequest:
    """Within ``with StopRequest() as stop:``, SIGTERM and SIGINT set ``stop.signal``
    instead of killing the process; the previous handlers come back on exit."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.signal: signal.Signals | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():  # handlers live there only
            for number in self.SIGNALS:
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)

    def _handle(self, number: int, frame: FrameType | None) -> None:
        if self.signal is not None and number == signal.SIGINT:
            raise KeyboardInterrupt  # asked twice: stop now, the last checkpoint stands
        self.signal = signal.Signals(number)
        print(
            f"\n{self.signal.name} received: stopping after this step with a checkpoint "
            "(Ctrl-C again to stop at once without one)",
            file=sys.stderr,
            flush=True,
        )

    @property
    def exit_code(self) -> int:
        """The shell's convention for a process ended by a signal: 128 + its number."""
        return 128 + int(self.signal) if self.signal is not None else 0


class NonFiniteUpdates(RuntimeError):
    """Too many steps in a row had their update skipped for non-finite values."""


class NonFiniteGuard:
    """Counts steps whose update was skipped (``<role>/skipped_steps`` > 0: the engine found
    the gradient non-finite and did not step); saves each such step's batch under
    ``dump_dir``; raises NonFiniteUpdates after ``limit`` in a row (0: never)."""

    def __init__(
        self, limit: int, dump_dir: Path, roles: tuple[str, ...] = ("actor", "critic", "prm")
    ):
        self.limit, self.dump_dir, self.roles = limit, dump_dir, roles
        self.consecutive = 0
        self.total = 0

    def check(self, step: int, batch: Batch, metrics: dict[str, float]) -> None:
        skipped = [r for r in self.roles if metrics.get(f"{r}/skipped_steps", 0.0) > 0]
        if not skipped:
            self.consecutive = 0
            return
        self.consecutive += 1
        self.total += 1
        saved = self.dump_dir / f"step_{step:08d}"
        batch.save(saved, overwrite=True)
        print(
            f"step {step}: non-finite loss or gradient in {', '.join(skipped)}; update skipped "
            f"({self.consecutive} in a row, {self.total} in all); batch saved to {saved}",
            file=sys.stderr,
        )
        if self.limit and self.consecutive >= self.limit:
            raise NonFiniteUpdates(
                f"{self.consecutive} steps in a row (up to step {step}) had non-finite losses "
                f"or gradients in {', '.join(skipped)}, so no update was made. Their batches "
                f"are in {self.dump_dir}; replay one with --replay-rollouts {self.dump_dir} "
                "to debug it. Lower the learning rate, check the rewards and advantages "
                "(critic/*), or raise trainer.max_consecutive_nonfinite."
            )

    def state_dict(self) -> dict[str, int]:
        return {"consecutive": self.consecutive, "total": self.total}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.consecutive, self.total = state["consecutive"], state["total"]
