"""MLflow, through its client (no process-global active run): the run in experiment
``tracking.project``, the resolved config as its parameters, scalars per step in batches,
sample generations as a table artifact (``generations/step_NNNNNN.json``). The store is
``tracking.mlflow_uri``, else $MLFLOW_TRACKING_URI, else SQLite in the run directory
(``RUN_DIR/mlflow.db``, artifacts in ``RUN_DIR/mlflow-artifacts``).

MLflow's HTTP client retries a request 7 times with backoff, up to 120 s each: a server that
is down took 4.3 minutes to report. Its calls at start therefore get a short timeout and one
retry (``quick_requests``), so a wrong URI stops the run in seconds; later calls keep
MLflow's patience, since a server that was there may come back."""

import contextlib
import os
import time
from collections.abc import Iterator

from ascent.trainer.tracking.sink import SinkContext, flatten, optional

MAX_PARAM_LENGTH = 6000  # MLflow refuses longer parameter values
BATCH = 100  # MLflow takes at most this many parameters per call
# Per request while starting; read by MLflow's client on every request (mlflow-skinny 3.17).
START_REQUESTS = {"MLFLOW_HTTP_REQUEST_TIMEOUT": "10", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1"}


@contextlib.contextmanager
def quick_requests() -> Iterator[None]:
    """MLflow's HTTP calls inside fail in seconds: ``START_REQUESTS``, except those the user
    set in the environment, which stay theirs; removed again on the way out."""
    ours = [name for name in START_REQUESTS if name not in os.environ]
    os.environ.update({name: START_REQUESTS[name] for name in ours})
    try:
        yield
    finally:
        for name in ours:
            os.environ.pop(name, None)


class MlflowSink:
    name = "mlflow"
    fix = (
        "Check tracking.mlflow_uri (or $MLFLOW_TRACKING_URI) and that the MLflow server is up "
        "and reachable from here; or leave both unset for a SQLite store in the run directory"
    )

    def __init__(self, context: SinkContext) -> None:
        mlflow = optional("mlflow")
        from mlflow.entities import Metric

        self.Metric = Metric
        uri = context.settings.mlflow_uri or os.environ.get("MLFLOW_TRACKING_URI")
        artifacts = None
        if uri is None:  # everything stays in the run directory
            uri = f"sqlite:///{context.run_dir.resolve() / 'mlflow.db'}"
            artifacts = (context.run_dir.resolve() / "mlflow-artifacts").as_uri()
        self.client = mlflow.MlflowClient(tracking_uri=uri)
        self.uri = uri
        with quick_requests():
            self.id = self._open(context, artifacts)

    def _open(self, context: SinkContext, artifacts: str | None) -> str:
        """The MLflow run to log to: the checkpoint's run when resuming, else a new one in
        experiment ``tracking.project`` holding the config as its parameters."""
        from mlflow.entities import Param

        if context.run_id is not None:  # a resumed run goes on in the same MLflow run
            self.client.update_run(context.run_id, status="RUNNING")
            return context.run_id
        name = context.settings.project
        experiment = self.client.get_experiment_by_name(name)
        experiment_id = (
            experiment.experiment_id
            if experiment is not None
            else self.client.create_experiment(name, artifact_location=artifacts)
        )
        run_id = self.client.create_run(experiment_id, run_name=context.run_name).info.run_id
        params = [
            Param(key, value[:MAX_PARAM_LENGTH])
            for key, value in flatten(context.run_config or {}).items()
        ]
        for start in range(0, len(params), BATCH):
            self.client.log_batch(run_id, params=params[start : start + BATCH])
        return run_id

    def log(self, metrics: dict[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        entries = [self.Metric(key, value, now, step) for key, value in metrics.items()]
        for start in range(0, len(entries), BATCH * 10):
            self.client.log_batch(self.id, metrics=entries[start : start + BATCH * 10])

    def log_samples(self, rows: list[dict], step: int) -> None:
        columns = {key: [row[key] for row in rows] for key in rows[0]}
        self.client.log_table(self.id, columns, artifact_file=f"generations/step_{step:06d}.json")

    def run_id(self) -> str | None:
        return self.id

    def close(self) -> None:
        self.client.set_terminated(self.id)
