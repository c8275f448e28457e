"""Where a run's metrics go: the tracking settings."""

from typing import Literal

from pydantic import Field

from ascent.engine.config import Strict

Sink = Literal["console", "jsonl", "tensorboard", "wandb", "mlflow", "swanlab"]


class TrackingConfig(Strict):
    """Where metrics go. wandb, mlflow and swanlab are optional packages (pip install
    'ascent[tracking]'). A sink that cannot start stops the run before its first step, saying
    why and what to do (``best_effort`` runs on without it); one that fails later in the run
    is reported once and turned off, and the run goes on."""

    sinks: list[Sink] = Field(
        ["console", "jsonl", "tensorboard"], description="Metric sinks to write to."
    )
    project: str = Field("ascent", description="Project (wandb, swanlab) or experiment (mlflow).")
    run_name: str | None = Field(None, description="Run name; default: the run directory's name.")
    mode: Literal["online", "offline"] = Field(
        "online",
        description="wandb and swanlab: online uploads as the run goes; offline writes the run "
        "under the run directory (wandb/, swanlog/) for `wandb sync` / `swanlab sync` later.",
    )
    mlflow_uri: str | None = Field(
        None,
        description="MLflow tracking URI; None: $MLFLOW_TRACKING_URI if set, else a SQLite "
        "store in the run directory (mlflow.db, artifacts in mlflow-artifacts/).",
    )
    best_effort: bool = Field(
        False,
        description="A sink that cannot start (no credentials, no server) is reported and "
        "turned off and the run goes on; off: the run stops before its first step, saying why.",
    )
    console_every: int = Field(1, ge=1, description="Print a console line every N steps.")
    console_keys: list[str] | None = Field(
        None,
        description="Metrics on the console line (a key, or a prefix ending in '/'); "
        "None: the trainer's choice.",
    )
