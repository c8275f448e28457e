"""TensorBoard: scalars per step, the resolved config and sample generations as text, in
``RUN_DIR/tensorboard``. A resumed run purges the events after the checkpoint's step."""

import json

from ascent.trainer.tracking.sink import SinkContext, markdown_table


class TensorBoardSink:
    name = "tensorboard"
    fix = "Check that the run directory is writable and its disk not full"

    def __init__(self, context: SinkContext) -> None:
        from torch.utils.tensorboard import SummaryWriter

        purge = None if context.resume_step is None else context.resume_step + 1
        self.writer = SummaryWriter(str(context.run_dir / "tensorboard"), purge_step=purge)
        if context.run_config and context.resume_step is None:
            config = json.dumps(context.run_config, indent=1, default=str)
            self.writer.add_text("config", f"```\n{config}\n```", 0)

    def log(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)

    def log_samples(self, rows: list[dict], step: int) -> None:
        self.writer.add_text("generations", markdown_table(rows), step)

    def run_id(self) -> str | None:
        return None

    def close(self) -> None:
        self.writer.close()
