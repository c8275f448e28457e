"""Checkpoint directories are atomic and pruned; metrics reach the JSONL and TensorBoard."""

import json

import pytest
from pydantic import ValidationError

from ascent.trainer.checkpoints import Checkpoints
from ascent.trainer.tracking import Tracker, TrackingConfig


def write_role(directory):
    (directory / "actor").mkdir()
    (directory / "actor" / "weights").write_text("w")


def test_save_latest_and_keep_last(tmp_path):
    checkpoints = Checkpoints(tmp_path, keep_last=2)
    for step in (10, 20, 30):
        saved = checkpoints.save(step, write_role, {"epoch": step // 10})
        assert saved.name == f"step_{step:08d}"
    assert checkpoints.latest().name == "step_00000030"
    assert Checkpoints.state(checkpoints.latest()) == {"step": 30, "epoch": 3}
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("step_*")) == [
        "step_00000020",
        "step_00000030",
    ]


def test_a_crash_during_save_leaves_the_previous_checkpoint(tmp_path):
    checkpoints = Checkpoints(tmp_path)
    checkpoints.save(1, write_role, {})

    def crash(directory):
        write_role(directory)
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        checkpoints.save(2, crash, {})
    assert checkpoints.latest().name == "step_00000001"
    assert not (tmp_path / "checkpoints" / "step_00000002").exists()


def test_latest_ignores_incomplete_directories(tmp_path):
    checkpoints = Checkpoints(tmp_path)
    checkpoints.save(5, write_role, {})
    (tmp_path / "checkpoints" / "step_00000009").mkdir()  # no trainer_state.json
    (tmp_path / "checkpoints" / "latest").write_text("step_00000009")
    assert checkpoints.latest().name == "step_00000005"


def test_tracker_writes_jsonl_tensorboard_and_console(tmp_path, capsys):
    tracker = Tracker(tmp_path, TrackingConfig(console_every=2))
    for step in range(1, 5):
        tracker.log({"sft/loss": 1.0 / step, "val/loss": 2.0}, step)
    tracker.close()
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2, 3, 4] and lines[3]["sft/loss"] == 0.25
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    printed = capsys.readouterr().out.splitlines()
    assert printed == ["step 2 | sft/loss 0.5 | val/loss 2", "step 4 | sft/loss 0.25 | val/loss 2"]


def test_tracking_sinks_are_checked():
    with pytest.raises(ValidationError):
        TrackingConfig(sinks=["console", "neptune"])
