"""Weights & Biases: the resolved config as the run's config, scalars per step, sample
generations as a ``wandb.Table``. ``tracking.mode=offline`` writes the run under
``RUN_DIR/wandb`` for ``wandb sync``; a resumed run reopens the run of the checkpoint's id."""

from ascent.trainer.tracking.sink import SinkContext, optional


class WandbSink:
    name = "wandb"

    def __init__(self, context: SinkContext) -> None:
        self.wandb = optional("wandb")
        self.run = self.wandb.init(
            project=context.settings.project,
            name=context.run_name,
            config=context.run_config,
            dir=str(context.run_dir),
            id=context.run_id,
            resume="allow" if context.run_id else None,
            mode=context.settings.mode,
            # ascent prints its own console lines; wandb need not wrap stdout for them
            settings=self.wandb.Settings(console="off", silent=True),
        )

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def log_samples(self, rows: list[dict], step: int) -> None:
        columns = list(rows[0])
        table = self.wandb.Table(columns=columns, data=[[row[c] for c in columns] for row in rows])
        self.run.log({"generations": table}, step=step)

    def run_id(self) -> str | None:
        return self.run.id

    def close(self) -> None:
        self.run.finish()
        # wandb writes through a service process; its teardown waits until that process has
        # written everything (an offline run file is complete when close returns).
        self.wandb.teardown()
