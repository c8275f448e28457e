"""Metrics sinks: console, JSONL in the run directory, TensorBoard, and wandb / mlflow when
installed and selected. One ``log(metrics, step)`` call feeds them all.

A resumed run continues the same records: the JSONL file and TensorBoard drop what was
logged after the checkpoint's step (those steps are run again), and wandb / mlflow reopen the
run whose id the checkpoint kept.
"""

import json
import math
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from ascent.engine.config import Strict

Sink = Literal["console", "jsonl", "tensorboard", "wandb", "mlflow"]


class TrackingConfig(Strict):
    """Where metrics go."""

    sinks: list[Sink] = Field(
        ["console", "jsonl", "tensorboard"], description="Metric sinks to write to."
    )
    project: str = Field("ascent", description="Project name (wandb, mlflow).")
    run_name: str | None = Field(None, description="Run name; default: the run directory's name.")
    console_every: int = Field(1, ge=1, description="Print a console line every N steps.")
    console_keys: list[str] | None = Field(
        None,
        description="Metrics on the console line (a key, or a prefix ending in '/'); "
        "None: the trainer's choice.",
    )


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
        """``resume_step``: the step of the checkpoint this run resumes from, whose later
        records are dropped (None: a new run; -1: a restart from step 0 that drops every
        earlier record); ``run_ids``: what ``run_ids()`` returned when that checkpoint was
        saved."""
        self.run_dir = Path(run_dir)
        self.config = config
        self.console_keys = config.console_keys or console_keys
        self.run_dir.mkdir(parents=True, exist_ok=True)
        name = config.run_name or self.run_dir.name
        run_ids = run_ids or {}
        self._jsonl = None
        if resume_step is not None:
            keep_records_up_to(self.run_dir / "metrics.jsonl", resume_step)
        if "jsonl" in config.sinks:  # kept open for the run; closed by close()
            self._jsonl = open(self.run_dir / "metrics.jsonl", "a")  # noqa: SIM115
        self._tensorboard = None
        if "tensorboard" in config.sinks:
            from torch.utils.tensorboard import SummaryWriter

            purge = None if resume_step is None else resume_step + 1
            self._tensorboard = SummaryWriter(str(self.run_dir / "tensorboard"), purge_step=purge)
        self._wandb = self._mlflow = None
        if "wandb" in config.sinks:
            wandb = _optional("wandb")
            self._wandb = wandb.init(
                project=config.project,
                name=name,
                config=run_config,
                dir=str(self.run_dir),
                id=run_ids.get("wandb"),
                resume="allow" if "wandb" in run_ids else None,
            )
        if "mlflow" in config.sinks:
            self._mlflow = _optional("mlflow")
            self._mlflow.set_experiment(config.project)
            self._mlflow.start_run(run_name=name, run_id=run_ids.get("mlflow"))
            if run_config and "mlflow" not in run_ids:
                self._mlflow.log_params(_flatten(run_config))

    def run_ids(self) -> dict[str, str]:
        """The ids of the wandb / mlflow runs, kept in checkpoints to reopen them on resume."""
        ids = {}
        if self._wandb is not None:
            ids["wandb"] = self._wandb.id
        if self._mlflow is not None:
            ids["mlflow"] = self._mlflow.active_run().info.run_id
        return ids

    def log(self, metrics: dict[str, float], step: int, *, printer: Any = print) -> None:
        """Write ``metrics`` of ``step`` to every sink (``printer`` shows the console line,
        e.g. ``tqdm.write`` under a progress bar)."""
        clean = {k: float(v) for k, v in metrics.items()}
        if self._jsonl is not None:
            self._jsonl.write(json.dumps({"step": step, **clean}) + "\n")
            self._jsonl.flush()
        if self._tensorboard is not None:
            for key, value in clean.items():
                self._tensorboard.add_scalar(key, value, step)
        if self._wandb is not None:
            self._wandb.log(clean, step=step)
        if self._mlflow is not None:
            self._mlflow.log_metrics({k.replace("/", "."): v for k, v in clean.items()}, step=step)
        if "console" in self.config.sinks and step % self.config.console_every == 0:
            printer(console_line(step, self._console(clean)))

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
        if self._tensorboard is not None:
            self._tensorboard.close()
        if self._wandb is not None:
            self._wandb.finish()
        if self._mlflow is not None:
            self._mlflow.end_run()


def keep_records_up_to(path: Path, step: int) -> None:
    """Drop the JSONL records of steps after ``step`` (written by an attempt that did not
    reach its next checkpoint), atomically."""
    if not path.is_file():
        return
    lines = path.read_text().splitlines(keepends=True)
    kept = [line for line in lines if line.strip() and json.loads(line).get("step", 0) <= step]
    if len(kept) != len(lines):
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_text("".join(kept))
        temporary.replace(path)


def console_line(step: int, metrics: dict[str, float]) -> str:
    """``step 12 | sft/loss 1.234 | sft/grad_norm 0.56 | ...`` with compact numbers."""
    return " | ".join([f"step {step}", *(f"{k} {_compact(v)}" for k, v in metrics.items())])


def _compact(value: float) -> str:
    if math.isnan(value) or math.isinf(value):
        return str(value)
    if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e5):
        return f"{value:.2e}"
    return f"{value:.4g}"


def _optional(module: str) -> Any:
    try:
        return __import__(module)
    except ImportError:
        raise ImportError(
            f"tracking sink {module!r} is selected but {module} is not installed; "
            f"pip install {module}, or remove it from tracking.sinks"
        ) from None


def _flatten(tree: dict, prefix: str = "") -> dict[str, str]:
    flat = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat |= _flatten(value, name + ".")
        else:
            flat[name] = str(value)
    return flat
