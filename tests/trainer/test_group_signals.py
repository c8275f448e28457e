"""``ascent train`` stopped by a SIGTERM to its whole process group, as ``timeout`` and
schedulers send it: the driver's helpers (reward scorers, Ray's processes) are not stopped
with it, so the step ends with its real scores and a checkpoint, the run exits 143, and the
rerun gives the same records as a run never stopped; nothing of the run is left behind."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ascent.config import dump_config
from ascent.trainer.rl.loop import train_rl
from tests.trainer.rl_setup import config, metric
from tests.trainer.test_interruptions import ROOT, wait_for_step
from tests.trainer.test_resume import records

SLOW_SCORER = "reward.function=tests.trainer.slow_scorers:slow_digit_share"


def start_in_own_session(config_file, **environment):
    """``python -m ascent train CONFIG`` as the leader of a new session and process group."""
    environment = os.environ | {"PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"} | environment
    return subprocess.Popen(
        [sys.executable, "-m", "ascent", "train", str(config_file)],
        cwd=ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def in_session(session):
    """The live processes of ``session`` (its zombies aside)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _, _, sid = stat.read_text().rsplit(")", 1)[1].split()[:4]
        except OSError:  # it ended meanwhile
            continue
        if int(sid) == session and state != "Z":
            found.append(int(stat.parent.name))
    return found


def stop_with_group_sigterm(process, timeout_s):
    """SIGTERM to the run's process group; (stdout, stderr) once it ended. Whatever is left of
    the session after it (nothing, if the run cleaned up) is killed and named."""
    os.killpg(process.pid, signal.SIGTERM)
    try:
        out, err = process.communicate(timeout=timeout_s)
    finally:
        deadline = time.monotonic() + 10
        while (left := in_session(process.pid)) and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        process.kill()
    assert not left, f"processes of the run left behind: {left}"
    return out, err


def stopped_step(out, run_dir):
    step = int(re.search(r"stopped by SIGTERM after step (\d+)", out).group(1))
    checkpoints = [p.name for p in (run_dir / "checkpoints").glob("step_*")]
    assert checkpoints == [f"step_{step:08d}"]
    return step


@pytest.mark.integration
@pytest.mark.slow
def test_a_group_sigterm_while_scoring_keeps_the_real_scores(tiny_model, prompts, tmp_path):
    steps = ["trainer.total_steps=2", "trainer.deterministic=true", "trainer.resume=auto"]
    train_rl(config(tiny_model, prompts, tmp_path / "straight", *steps))
    run_dir, config_file = tmp_path / "stopped", tmp_path / "stopped.yaml"
    dump_config(
        config(tiny_model, prompts, run_dir, *steps, "reward.workers=2", SLOW_SCORER), config_file
    )

    scoring = tmp_path / "scoring"
    process = start_in_own_session(config_file, SCORING_MARKER=str(scoring))
    deadline = time.monotonic() + 180
    while not scoring.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    if not scoring.exists():
        process.kill()
        pytest.fail(f"the run did not start scoring ({process.poll()}):\n{process.communicate()}")
    out, err = stop_with_group_sigterm(process, timeout_s=120)
    assert process.returncode == 128 + signal.SIGTERM, err
    stopped_at = stopped_step(out, run_dir)
    assert metric(run_dir, "reward/errors") == [0.0] * stopped_at  # no sample scored 0

    rerun = start_in_own_session(config_file)
    out, err = rerun.communicate(timeout=180)
    assert rerun.returncode == 0, err
    assert records(run_dir) == records(tmp_path / "straight")  # as if never stopped


@pytest.mark.integration
@pytest.mark.slow
def test_a_group_sigterm_on_two_ray_ranks_saves_and_exits(tiny_model, prompts, tmp_path):
    run_dir, config_file = tmp_path / "run", tmp_path / "run.yaml"
    settings = ["trainer.total_steps=50", "resources.devices_per_node=2"]
    dump_config(config(tiny_model, prompts, run_dir, *settings), config_file)

    process = start_in_own_session(config_file)
    wait_for_step(process, run_dir, 1)
    # Ray's processes stopped with the driver once left it waiting 60 s for a lost GCS.
    out, err = stop_with_group_sigterm(process, timeout_s=45)
    assert process.returncode == 128 + signal.SIGTERM, err
    stopped_step(out, run_dir)
