"""SwanLab: the resolved config as the run's config, scalars per step, sample generations
as a text table. ``tracking.mode=offline`` writes the run under ``RUN_DIR/swanlog`` for
``swanlab sync``. SwanLab resumes runs only online; an offline resumed run is a new run.
Online without an API key, SwanLab would ask at a terminal; it is told not to
(``interactive=False``), so the run stops at once with its "no API key" error."""

from ascent.trainer.tracking.sink import SinkContext, markdown_table, optional


class SwanLabSink:
    name = "swanlab"
    fix = (
        "Log in to SwanLab (`swanlab login`, or set SWANLAB_API_KEY) and check that its "
        "server is reachable, or set tracking.mode=offline to write the run under the run "
        "directory for `swanlab sync` later"
    )

    def __init__(self, context: SinkContext) -> None:
        self.swanlab = optional("swanlab")
        online = context.settings.mode == "online"
        resume = online and context.run_id is not None
        self.run = self.swanlab.init(
            project=context.settings.project,
            name=context.run_name,
            config=context.run_config,
            mode="online" if online else "offline",
            log_dir=str(context.run_dir / "swanlog"),
            id=context.run_id if resume else None,
            resume="allow" if resume else "never",
            reinit=True,
            settings=self.swanlab.Settings(interactive=False),
        )

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def log_samples(self, rows: list[dict], step: int) -> None:
        self.run.log({"generations": self.swanlab.Text(markdown_table(rows))}, step=step)

    def run_id(self) -> str | None:
        return getattr(self.run, "id", None)

    def close(self) -> None:
        self.run.finish()
