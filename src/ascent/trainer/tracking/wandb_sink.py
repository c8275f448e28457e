"""Weights & Biases: the resolved config as the run's config, scalars per step, sample
generations as a ``wandb.Table``. ``tracking.mode=offline`` writes the run under
``RUN_DIR/wandb`` for ``wandb sync``; a resumed run reopens the run of the checkpoint's id.

Starting online fails fast rather than waits: without an API key wandb would ask for one at
a terminal (forever) and fail only where there is none, so wandb is set up silent, which
turns the prompt into its "No API key configured" error; and ``wandb.init`` gives up on an
unreachable server after ``INIT_TIMEOUT_S`` instead of wandb's 90 s, unless
$WANDB_INIT_TIMEOUT says otherwise. (Checked against wandb 0.31.)"""

import os

from ascent.trainer.tracking.sink import SinkContext, optional

INIT_TIMEOUT_S = 30.0


class WandbSink:
    name = "wandb"
    fix = (
        "Log in to W&B (`wandb login`, or set WANDB_API_KEY) and check that its server is "
        "reachable (give a slow one longer: WANDB_INIT_TIMEOUT=120), or set "
        "tracking.mode=offline to write the run under the run directory for `wandb sync` later"
    )

    def __init__(self, context: SinkContext) -> None:
        self.wandb = optional("wandb")
        # ascent prints its own console lines; wandb need not wrap stdout for them
        settings = {"console": "off", "silent": True}
        if "WANDB_INIT_TIMEOUT" not in os.environ:
            settings["init_timeout"] = INIT_TIMEOUT_S
        self.wandb.setup(self.wandb.Settings(silent=True))  # before init: no login prompt
        try:
            self.run = self.wandb.init(
                project=context.settings.project,
                name=context.run_name,
                config=context.run_config,
                dir=str(context.run_dir),
                id=context.run_id,
                resume="allow" if context.run_id else None,
                mode=context.settings.mode,
                settings=self.wandb.Settings(**settings),
            )
        except Exception:
            self.wandb.teardown()  # the service process it started
            raise

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
