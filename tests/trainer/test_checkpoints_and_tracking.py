"""Checkpoint directories are atomic, pruned and verified against their manifests; a failed
write leaves the last good one; metrics reach the JSONL and TensorBoard, and a resumed run's
records continue from its checkpoint."""

import json
import subprocess
import sys

import pytest
from pydantic import ValidationError

from ascent.errors import InputError
from ascent.trainer.checkpoints import CheckpointError, Checkpoints, verify
from ascent.trainer.tracking import Tracker, TrackingConfig
from tests.report.stalled_writer import StalledWriter


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


def test_verify_names_truncated_changed_and_missing_files(tmp_path):
    checkpoints = Checkpoints(tmp_path)
    saved = checkpoints.save(1, write_role, {})
    assert verify(saved) == []
    weights = saved / "actor" / "weights"
    weights.write_text("x")  # same size, other bytes
    assert verify(saved) == ["actor/weights changed since it was written (sha256 differs)"]
    weights.write_text("")
    assert verify(saved) == ["actor/weights has 0 bytes, 1 written"]
    weights.unlink()
    assert verify(saved) == ["actor/weights is missing"]
    with pytest.raises(CheckpointError, match="actor/weights is missing"):
        checkpoints.resolve(str(saved))
    assert checkpoints.resolve("auto") is None  # the only checkpoint is broken
    assert checkpoints.resolve("off") is None


def test_resolve_takes_a_run_directory_and_auto_falls_back(tmp_path, capsys):
    checkpoints = Checkpoints(tmp_path)
    for step in (1, 2):
        checkpoints.save(step, write_role, {})
    (tmp_path / "checkpoints" / "step_00000002" / "manifest.json").write_text("{not json")
    assert checkpoints.resolve("auto").name == "step_00000001"
    assert "skipping checkpoint" in capsys.readouterr().err
    assert Checkpoints(tmp_path / "elsewhere").resolve(str(tmp_path)).name == "step_00000001"
    with pytest.raises(CheckpointError, match="no such checkpoint directory"):
        checkpoints.resolve(str(tmp_path / "nope"))


FULL_DISK = """
import resource, sys
from pathlib import Path
from ascent.trainer.checkpoints import CheckpointError, Checkpoints

checkpoints = Checkpoints(sys.argv[1])
checkpoints.save(1, lambda d: (d / "weights").write_bytes(bytes(1000)), {})
# From here on no file may grow past 64 KiB: the kernel refuses the write (EFBIG), as a
# full disk would (ENOSPC).
resource.setrlimit(resource.RLIMIT_FSIZE, (65536, resource.RLIM_INFINITY))
try:
    checkpoints.save(2, lambda d: (d / "weights").write_bytes(bytes(1 << 20)), {})
except CheckpointError as error:
    print(error)
"""


def test_a_failed_write_never_replaces_the_last_good_checkpoint(tmp_path):
    """A real failed write (the process's file-size limit), not a simulated exception."""
    result = subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(tmp_path)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert "saving the checkpoint of step 2 failed (OSError" in result.stdout
    assert "the last good checkpoint is" in result.stdout and "step_00000001" in result.stdout
    checkpoints = Checkpoints(tmp_path)
    assert checkpoints.latest().name == "step_00000001" and verify(checkpoints.latest()) == []
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [
        "latest",
        "step_00000001",
    ]  # the partial step 2 was removed, its space given back


def test_a_resumed_tracker_drops_the_records_after_the_checkpoint(tmp_path):
    tracker = Tracker(tmp_path, TrackingConfig(sinks=["jsonl"]))
    for step in range(4):
        tracker.log({"loss": float(step)}, step)
    tracker.close()
    tracker = Tracker(tmp_path, TrackingConfig(sinks=["jsonl"]), resume_step=2)
    tracker.log({"loss": 30.0}, 3)
    tracker.close()
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(line["step"], line["loss"]) for line in lines] == [(0, 0), (1, 1), (2, 2), (3, 30)]


def test_a_run_killed_while_writing_a_record_resumes(tmp_path):
    """The record being written when the run was killed (a real SIGKILL halfway through the
    line) is dropped on resume, and the resumed run's records start lines of their own; a
    line cut anywhere else is refused, naming it."""
    tracker = Tracker(tmp_path, TrackingConfig(sinks=["jsonl"]))
    for step in range(3):
        tracker.log({"loss": float(step)}, step)
    tracker.close()
    with StalledWriter(tmp_path / "metrics.jsonl", {"step": 3, "loss": 3.0}) as writer:
        writer.kill()
    tracker = Tracker(tmp_path, TrackingConfig(sinks=["jsonl"]), resume_step=2)
    tracker.log({"loss": 30.0}, 3)
    tracker.close()
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(line["step"], line["loss"]) for line in lines] == [(0, 0), (1, 1), (2, 2), (3, 30)]

    with (tmp_path / "metrics.jsonl").open("a") as records:
        records.write('{"step": 4, "lo\n{"step": 5}\n')
    with pytest.raises(InputError, match=r"line 5 of .*metrics\.jsonl is not JSON"):
        Tracker(tmp_path, TrackingConfig(sinks=["jsonl"]), resume_step=5)
