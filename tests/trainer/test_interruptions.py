"""``ascent train`` as a real process, interrupted: SIGTERM mid-run saves at the step
boundary and exits 143, and the rerun ends with the same metrics as a run never stopped; a
killed worker process is named (role, rank), nothing partial is saved, the driver exits 1,
and the rerun continues from the last checkpoint; a save on a full disk (a real, small
tmpfs) cleans up, names the last good checkpoint in a few lines and exits 1, and the rerun on
a larger disk continues."""

import contextlib
import json
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
from tests.trainer.test_resume import records

ROOT = Path(__file__).resolve().parents[2]


def start(config_file, *overrides, **environment):
    """``python -m ascent train CONFIG ...`` in its own process (tests' modules importable)."""
    environment = os.environ | {"PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"} | environment
    return subprocess.Popen(
        [sys.executable, "-m", "ascent", "train", str(config_file), *overrides],
        cwd=ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_step(process, run_dir, step, timeout_s=180):
    """Until the run has logged ``step`` (or it ended: then fail with its output)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            out, err = process.communicate()
            pytest.fail(f"the run ended early ({process.returncode}):\n{out}\n{err}")
        metrics = run_dir / "metrics.jsonl"
        if metrics.exists() and step in metric(run_dir, "step"):
            return
        time.sleep(0.01)  # a step takes about 60 ms: polling slower let runs finish first
    process.kill()
    pytest.fail(f"step {step} was not logged within {timeout_s} s")


def wait_for_file(process, path, timeout_s=180):
    """Until ``path`` exists (or the run ended: then fail with its output)."""
    deadline = time.monotonic() + timeout_s  # a guard against hangs only
    while not path.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            out, err = process.communicate()
            pytest.fail(f"no {path.name} ({process.returncode}):\n{out}\n{err}")
        time.sleep(0.01)


@pytest.mark.integration
def test_sigterm_saves_at_the_step_boundary_and_the_rerun_matches(tiny_model, prompts, tmp_path):
    """The signal lands while step 1 scores (its scorer held until the signal is sent)."""
    steps = [
        "trainer.total_steps=3",
        "trainer.deterministic=true",
        "trainer.resume=auto",
        "reward.function=tests.trainer.slow_scorers:gated_digit_share",
    ]
    train_rl(config(tiny_model, prompts, tmp_path / "straight", *steps))
    run_dir = tmp_path / "stopped"
    config_file = tmp_path / "stopped.yaml"
    dump_config(config(tiny_model, prompts, run_dir, *steps), config_file)

    gate = tmp_path / "gate"
    gate.mkdir()
    process = start(config_file, SCORING_GATE=str(gate))
    wait_for_file(process, gate / "waiting")
    process.send_signal(signal.SIGTERM)
    (gate / "open").touch()
    out, err = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, err
    assert "stopped by SIGTERM after step 1" in out
    assert [p.name for p in (run_dir / "checkpoints").glob("step_*")] == ["step_00000001"]

    rerun = start(config_file)
    out, err = rerun.communicate(timeout=180)
    assert rerun.returncode == 0, err
    assert "at step 1" in out
    assert records(run_dir) == records(tmp_path / "straight")  # nothing lost, nothing repeated


@pytest.mark.integration
@pytest.mark.slow
def test_a_killed_worker_is_named_and_the_rerun_continues(tiny_model, prompts, tmp_path):
    run_dir = tmp_path / "run"
    config_file = tmp_path / "run.yaml"
    settings = [
        "trainer.total_steps=5",
        "trainer.save_every=1",
        "trainer.resume=auto",
        "resources.devices_per_node=2",
    ]
    dump_config(config(tiny_model, prompts, run_dir, *settings), config_file)

    process = start(config_file)
    wait_for_step(process, run_dir, 2)
    processes = json.loads((run_dir / "processes.json").read_text())
    victim = next(p for p in processes if p["role"] == "actor" and p["rank"] == 1)
    os.kill(victim["pid"], signal.SIGKILL)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 1, err
    assert re.search(rf"worker of rank 1 \(host .*, pid {victim['pid']}\) died", err), err
    assert "the last checkpoint is" in err and "Traceback" not in err
    # Ours is printed last, after whatever Ray relays from the workers.
    assert err.strip().splitlines()[-1].startswith("ascent train: the last checkpoint is"), err
    checkpoints = run_dir / "checkpoints"
    assert not list(checkpoints.glob(".step_*"))  # nothing partial left behind
    saved = sorted(p.name for p in checkpoints.glob("step_*"))
    last = int(saved[-1].removeprefix("step_"))

    rerun = start(config_file)
    out, err = rerun.communicate(timeout=240)
    assert rerun.returncode == 0, err
    assert f"at step {last}" in out
    assert metric(run_dir, "step") == [1, 2, 3, 4, 5]  # each step logged once


@contextlib.contextmanager
def small_disk(path, size_bytes):
    """A tmpfs of ``size_bytes`` mounted at ``path`` (needs root; the test skips otherwise)."""
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield lambda size: subprocess.run(
            ["mount", "-o", f"remount,size={size}", str(path)], check=True
        )
    finally:
        subprocess.run(["umount", str(path)], check=False)


def disk_usage(path):
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_a_full_disk_during_a_save_names_the_last_checkpoint_and_cleans_up(
    tiny_model, prompts, tmp_path
):
    settings = ["trainer.save_every=1", "trainer.keep_last=null", "trainer.resume=auto"]
    probe = tmp_path / "probe"  # how much one step's run directory and checkpoint take
    train_rl(config(tiny_model, prompts, probe, "trainer.total_steps=1", *settings))
    checkpoint = disk_usage(probe / "checkpoints" / "step_00000001")
    room = disk_usage(probe) + checkpoint // 2  # one checkpoint fits, the second does not

    with small_disk(tmp_path / "disk", room) as resize:
        run_dir = tmp_path / "disk" / "run"
        config_file = tmp_path / "run.yaml"
        dump_config(
            config(tiny_model, prompts, run_dir, "trainer.total_steps=3", *settings), config_file
        )
        process = start(config_file)
        out, err = process.communicate(timeout=240)
        assert process.returncode == 1, err
        ours = [line for line in err.splitlines() if line.strip() and "Loading" not in line]
        assert "Traceback" not in err and len(ours) <= 3, err
        assert re.search(r"saving the checkpoint of step 2 failed \(.*(No space|MiB free)", err)
        assert (
            "the last good checkpoint is " + str(run_dir / "checkpoints" / "step_00000001") in err
        )
        checkpoints = run_dir / "checkpoints"
        assert not list(checkpoints.glob(".step_*"))  # the partial save gave its space back
        assert sorted(p.name for p in checkpoints.glob("step_*")) == ["step_00000001"]

        resize(4 * room)
        rerun = start(config_file)
        out, err = rerun.communicate(timeout=240)
        assert rerun.returncode == 0, err
        assert "at step 1" in out
        assert metric(run_dir, "step") == [1, 2, 3]
