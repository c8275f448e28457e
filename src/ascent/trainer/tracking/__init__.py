"""Metrics of a run: the console line, JSONL in the run directory, TensorBoard, wandb,
mlflow and swanlab (``tracker.py``; each tool in a module of its own)."""

from ascent.trainer.tracking.config import Sink, TrackingConfig
from ascent.trainer.tracking.records import console_line, keep_records_up_to
from ascent.trainer.tracking.tracker import Tracker, TrackingCannotStart

__all__ = [
    "Sink",
    "Tracker",
    "TrackingCannotStart",
    "TrackingConfig",
    "console_line",
    "keep_records_up_to",
]
