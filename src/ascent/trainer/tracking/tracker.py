"""The run's metrics to every selected sink: one ``log(metrics, step)`` call feeds them all.

The console line and the JSONL file (``RUN_DIR/metrics.jsonl``) are the run directory's own
records; TensorBoard, wandb, mlflow and swanlab are sinks (``ascent.trainer.tracking.sink``).

A sink that cannot start (no credentials, no server, a bad URI) stops the run with a
``TrackingCannotStart`` that names the sink, the reason and the fix, before the trainer
spawns a worker: a user who asked for a tracker would rather know in seconds than find an
empty dashboard after a two-day run. ``tracking.best_effort=true`` reports it on stderr,
turns it off and trains on. A sink that fails later (a full disk, a deleted run, the server
going away) is reported once and turned off in either mode, and training goes on: a run
days in should not die for a dashboard. A sink whose package is missing is a configuration
error, raised at start.

A resumed run continues the same records: the JSONL file and TensorBoard drop what was
logged after the checkpoint's step (those steps are run again), and wandb / mlflow reopen the
run whose id the checkpoint kept.
"""

import contextlib
import json
import sys
from pathlib import Path
from typing import Any

from ascent.trainer.run_dir import CannotStart
from ascent.trainer.tracking.config import TrackingConfig
from ascent.trainer.tracking.mlflow_sink import MlflowSink
from ascent.trainer.tracking.records import console_line, keep_records_up_to
from ascent.trainer.tracking.sink import MetricSink, SinkContext
from ascent.trainer.tracking.swanlab_sink import SwanLabSink
from ascent.trainer.tracking.tensorboard_sink import TensorBoardSink
from ascent.trainer.tracking.wandb_sink import WandbSink

# Each a MetricSink class with its ``fix``. Opened in this order: the tools that may not
# start (credentials, a server) before TensorBoard writes an event file, which would mark the
# run directory as used (``trainer.resume=off`` then refuses the corrected run).
SINKS: dict[str, type] = {
    "wandb": WandbSink,
    "mlflow": MlflowSink,
    "swanlab": SwanLabSink,
    "tensorboard": TensorBoardSink,
}


class TrackingCannotStart(CannotStart):
    """A selected sink could not start and ``tracking.best_effort`` is off; the message names
    the sink, the reason and what to do."""


class Tracker:
    def __init__(
        self,
        run_dir: str | Path,
        config: TrackingConfig,
        run_config: dict | None = None,
        console_keys: list[str] | None = None,
        *,
        resume_step: int | None = None,
        run_ids: dict[str, str] | None = None,
    ) -> None:
        """Open the selected sinks; a ``TrackingCannotStart`` (after closing those already
        open) when one cannot, unless ``config.best_effort``. ``resume_step``: the step of
        the checkpoint this run resumes from, whose later records are dropped (None: a new
        run; -1: a restart from step 0 that drops every earlier record); ``run_ids``: what
        ``run_ids()`` returned when that checkpoint was saved."""
        self.run_dir = Path(run_dir)
        self.config = config
        self.console_keys = config.console_keys or console_keys
        self.run_dir.mkdir(parents=True, exist_ok=True)
        run_ids = run_ids or {}
        self.sinks: list[MetricSink] = []
        self._jsonl = None
        for name in (name for name in SINKS if name in config.sinks):
            context = SinkContext(
                run_dir=self.run_dir,
                settings=config,
                run_name=config.run_name or self.run_dir.name,
                run_config=run_config,
                resume_step=resume_step,
                run_id=run_ids.get(name),
            )
            try:
                self.sinks.append(SINKS[name](context))
            except ImportError:  # a configuration error: the run does not start
                self.close()
                raise
            except Exception as error:
                if not config.best_effort:
                    self.close()
                    raise TrackingCannotStart(_cannot_start(name, error)) from error
                _report(name, "could not start", error)
        if resume_step is not None:
            keep_records_up_to(self.run_dir / "metrics.jsonl", resume_step)
        if "jsonl" in config.sinks:  # kept open for the run; closed by close()
            self._jsonl = open(self.run_dir / "metrics.jsonl", "a")  # noqa: SIM115

    def run_ids(self) -> dict[str, str]:
        """The ids of the sinks' runs, kept in checkpoints to reopen them on resume."""
        ids = {}
        for sink in self.sinks:
            run_id = self._guarded(sink, "run_id")
            if run_id is not None:
                ids[sink.name] = run_id
        return ids

    def log(self, metrics: dict[str, float], step: int, *, printer: Any = print) -> None:
        """Write ``metrics`` of ``step`` to every sink (``printer`` shows the console line,
        e.g. ``tqdm.write`` under a progress bar)."""
        clean = {k: float(v) for k, v in metrics.items()}
        if self._jsonl is not None:
            self._jsonl.write(json.dumps({"step": step, **clean}) + "\n")
            self._jsonl.flush()
        for sink in list(self.sinks):
            self._guarded(sink, "log", clean, step)
        if "console" in self.config.sinks and step % self.config.console_every == 0:
            printer(console_line(step, self._console(clean)))

    def log_samples(self, rows: list[dict], step: int) -> None:
        """Sample generations of ``step`` (dicts with the same keys) to the sinks with a
        table or text view (the JSONL records keep them in ``generations.jsonl``)."""
        if rows:
            cells = [{key: _cell(value) for key, value in row.items()} for row in rows]
            for sink in list(self.sinks):
                self._guarded(sink, "log_samples", cells, step)

    def _guarded(self, sink: MetricSink, method: str, *args: Any) -> Any:
        try:
            return getattr(sink, method)(*args)
        except Exception as error:  # any tool's failure: reported once, then the sink is off
            _report(sink.name, f"failed in {method}", error)
            self.sinks.remove(sink)
            with contextlib.suppress(Exception):  # it is dropped for failing already
                sink.close()
            return None

    def _console(self, metrics: dict[str, float]) -> dict[str, float]:
        if not self.console_keys:
            return metrics
        keys = self.console_keys
        return {
            k: v
            for k, v in metrics.items()
            if k in keys or any(p.endswith("/") and k.startswith(p) for p in keys)
        }

    def close(self) -> None:
        if self._jsonl is not None:
            self._jsonl.close()
        for sink in list(self.sinks):
            self._guarded(sink, "close")


def _cell(value: Any) -> Any:
    """A table cell every tool takes: numbers, text, booleans; anything else as JSON."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return json.dumps(value, default=str)


def _cannot_start(name: str, error: Exception) -> str:
    return (
        f"tracking: the {name} sink could not start ({type(error).__name__}: {error}). "
        f"{SINKS[name].fix}; or remove {name} from tracking.sinks, or set "
        "tracking.best_effort=true to report it and train without it"
    )


def _report(name: str, what: str, error: Exception) -> None:
    print(
        f"tracking: the {name} sink {what} ({type(error).__name__}: {error}); it is off for "
        "the rest of the run, and training goes on",
        file=sys.stderr,
    )
