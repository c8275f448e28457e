"""MLflow, through its client (no process-global active run): the run in experiment
``tracking.project``, the resolved config as its parameters, scalars per step in batches,
sample generations as a table artifact (``generations/step_NNNNNN.json``). The store is
``tracking.mlflow_uri``, else $MLFLOW_TRACKING_URI, else SQLite in the run directory
(``RUN_DIR/mlflow.db``, artifacts in ``RUN_DIR/mlflow-artifacts``)."""

import os
import time

from ascent.trainer.tracking.sink import SinkContext, flatten, optional

MAX_PARAM_LENGTH = 6000  # MLflow refuses longer parameter values
BATCH = 100  # MLflow takes at most this many parameters per call


class MlflowSink:
    name = "mlflow"

    def __init__(self, context: SinkContext) -> None:
        mlflow = optional("mlflow")
        from mlflow.entities import Metric, Param

        self.Metric = Metric
        uri = context.settings.mlflow_uri or os.environ.get("MLFLOW_TRACKING_URI")
        artifacts = None
        if uri is None:  # everything stays in the run directory
            uri = f"sqlite:///{context.run_dir.resolve() / 'mlflow.db'}"
            artifacts = (context.run_dir.resolve() / "mlflow-artifacts").as_uri()
        self.client = mlflow.MlflowClient(tracking_uri=uri)
        self.uri = uri
        if context.run_id is not None:  # a resumed run goes on in the same MLflow run
            self.id = context.run_id
            self.client.update_run(self.id, status="RUNNING")
            return
        name = context.settings.project
        experiment = self.client.get_experiment_by_name(name)
        experiment_id = (
            experiment.experiment_id
            if experiment is not None
            else self.client.create_experiment(name, artifact_location=artifacts)
        )
        self.id = self.client.create_run(experiment_id, run_name=context.run_name).info.run_id
        params = [
            Param(key, value[:MAX_PARAM_LENGTH])
            for key, value in flatten(context.run_config or {}).items()
        ]
        for start in range(0, len(params), BATCH):
            self.client.log_batch(self.id, params=params[start : start + BATCH])

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
