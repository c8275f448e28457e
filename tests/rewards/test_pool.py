"""The scoring pool outlives what happens to its processes: the driver's stop signals (which a
group signal also sends them) are ignored, a worker killed while idle or while scoring is
replaced, and its sample gets its real score (never 0); a sample whose process dies on every
try stops the step."""

import multiprocessing
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest

from ascent.rewards.manager import RewardConfig, RewardManager
from tests.rewards.batches import scored_batch

NO_FAILURES = {"reward/errors": 0.0, "reward/timeouts": 0.0, "reward/non_finite": 0.0}


@pytest.fixture
def manager(tokenizer, request):
    scorer = request.param
    manager = RewardManager(
        RewardConfig(function=f"tests.rewards.dying_scorers:{scorer}", workers=2), tokenizer
    )
    yield manager
    manager.close()


def worker_pids():
    return sorted(
        p.pid for p in multiprocessing.active_children() if p.name == "pebble_pool_worker"
    )


def wait_until_started(pids, timeout_s=120.0):
    """Until each worker ignores SIGTERM, as a started one does (a booting one cannot yet;
    on a loaded machine a spawned worker may take many seconds to get there)."""
    deadline = time.monotonic() + timeout_s
    while not all(map(ignores_sigterm, pids)):
        assert time.monotonic() < deadline, f"workers {pids} did not start in {timeout_s} s"
        time.sleep(0.05)


def ignores_sigterm(pid):
    status = Path(f"/proc/{pid}/status").read_text()
    ignored = int(re.search(r"^SigIgn:\s*([0-9a-f]+)", status, re.MULTILINE).group(1), 16)
    return bool(ignored >> (signal.SIGTERM - 1) & 1)


def stop_signals(pids):
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
        os.kill(pid, signal.SIGINT)


@pytest.mark.parametrize("manager", ["slow"], indirect=True)
def test_the_drivers_stop_signals_leave_the_scorers_alone(manager, tokenizer):
    manager.score(scored_batch(tokenizer, ["0", "0"]))
    workers = worker_pids()
    wait_until_started(workers)
    stop_signals(workers)  # idle: pebble would have given up on the whole pool
    time.sleep(0.5)
    busy = threading.Timer(0.5, stop_signals, [workers])  # while both are scoring
    busy.start()
    batch, counts = manager.score(scored_batch(tokenizer, ["1.5", "1.5"], ["abc", "de"]))
    busy.join()
    assert batch["scores"].tolist() == [3.0, 2.0] and counts == NO_FAILURES
    assert worker_pids() == workers


@pytest.mark.parametrize("manager", ["slow"], indirect=True)
def test_an_idle_worker_killed_from_outside_is_replaced(manager, tokenizer):
    manager.score(scored_batch(tokenizer, ["0", "0"]))
    os.kill(worker_pids()[0], signal.SIGKILL)
    time.sleep(0.5)  # pebble has seen it die with no task running: the pool is broken
    batch, counts = manager.score(scored_batch(tokenizer, ["0", "0"], ["abc", "de"]))
    assert batch["scores"].tolist() == [3.0, 2.0] and counts == NO_FAILURES


@pytest.mark.parametrize("manager", ["dies_once"], indirect=True)
def test_a_sample_whose_process_was_killed_is_scored_again(manager, tokenizer, tmp_path):
    marker = tmp_path / "killed"
    batch, counts = manager.score(scored_batch(tokenizer, [str(marker), ""], ["abcd", "ab"]))
    assert marker.exists()  # its first process died
    assert batch["scores"].tolist() == [4.0, 2.0] and counts == NO_FAILURES


@pytest.mark.parametrize("manager", ["dies_on_kill"], indirect=True)
def test_a_sample_whose_process_always_dies_stops_the_step(manager, tokenizer):
    with pytest.raises(RuntimeError, match=r"died \d+ times") as caught:
        manager.score(scored_batch(tokenizer, ["ok", "kill"], ["abc", "xyz"]))
    message = str(caught.value)
    assert "data_source='test'" in message and "response='xyz'" in message
    batch, counts = manager.score(scored_batch(tokenizer, ["ok"], ["abc"]))  # the pool works
    assert batch["scores"].tolist() == [3.0] and counts == NO_FAILURES
