"""What only the Ray backend has: real collectives, data moving between worker processes
without the driver, replicas, separate pools, and failures of whole processes."""

import os
import signal
import time

import pytest
import torch

from ascent.batch import Batch
from ascent.controller import (
    ResourcePool,
    Role,
    WorkerDied,
    WorkerError,
    WorkerTimeout,
    spawn_group,
    spawn_groups,
)
from tests.controller.workers import CollectiveWorker, EchoWorker, LoggedOnUnpickle

pytestmark = pytest.mark.integration

TWO = ResourcePool(devices_per_node=2)


@pytest.fixture(scope="module")
def pair(local_ray):
    """Two groups on separate pools (separate processes)."""
    first = spawn_group(EchoWorker, TWO, role="actor", backend="ray")
    second = spawn_group(EchoWorker, TWO, role="reward", backend="ray")
    yield first, second
    first.shutdown()
    second.shutdown()


def test_gloo_all_reduce_across_two_ranks(pair):
    actor, _ = pair
    assert actor.all_reduce(1.0) == [3.0, 3.0]  # 1 * (0 + 1) + 1 * (1 + 1)


def test_separate_pools_are_separate_processes(pair):
    actor, reward = pair
    assert not set(actor.pid()) & set(reward.pid())


def test_chained_futures_move_data_without_the_driver(pair, tmp_path):
    actor, reward = pair
    log = tmp_path / "unpickled_by.txt"
    batch = Batch.from_dict(
        {"x": torch.arange(4.0), "tracer": [LoggedOnUnpickle(str(log)) for _ in range(4)]}
    )
    log.write_text("")  # the driver's own pickling for the first call does not count
    out_future = actor.double.submit(batch)
    reward.shard_size.submit(out_future).result()
    unpicklers = {int(line) for line in log.read_text().split()}
    assert os.getpid() not in unpicklers, "the driver fetched data it only passed on"
    assert unpicklers <= set(actor.pid()) | set(reward.pid())
    assert set(reward.pid()) <= unpicklers, "each reward rank received its shard directly"


def test_reshard_and_replicas(local_ray):
    """A dp=2 result fed to a group whose 2 ranks form one replica (dp=1): both ranks receive
    the whole batch, and only the first returns it."""
    with (
        spawn_group(EchoWorker, TWO, role="producer", backend="ray") as producer,
        spawn_group(EchoWorker, TWO, role="replica", replica_size=2, backend="ray") as replica,
    ):
        assert replica.dp_size == 1
        batch = Batch.from_dict({"x": torch.arange(6.0)})
        out = replica.double(producer.double.submit(batch))
        assert out["x"].tolist() == [4.0 * i for i in range(6)]
        assert out["seen_by"] == [0] * 6  # the replica's first rank returned
        assert replica.shard_size(batch) == [6]  # one replica, one result, the whole batch
        assert replica.remember(batch) == [[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]]  # returned once
        assert replica.recall() == [[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]] * 2  # both peers got it


# What a stuck rank waits: a failure must be reported long before it ends, on a loaded
# machine too (a bound of seconds would fail there without being wrong).
STUCK_S = 600.0


def kill_rank_while_running(group, future, rank: int) -> WorkerDied:
    """SIGKILL ``rank`` while ``future`` runs; the error must come without waiting it out."""
    victim = group.infos[rank].pid
    time.sleep(1.0)
    os.kill(victim, signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(WorkerDied) as caught:
        future.result()
    assert time.monotonic() - start < STUCK_S / 5
    assert (caught.value.rank, caught.value.pid) == (rank, victim)
    return caught.value


def test_a_killed_worker_is_reported_at_once(local_ray):
    with spawn_group(EchoWorker, TWO, role="actor", backend="ray") as group:
        died = kill_rank_while_running(group, group.sleep_on.submit(1, STUCK_S), rank=1)
        assert died.role == "actor" and "rank 1" in str(died)


def test_a_death_is_reported_while_another_rank_waits_for_it_in_a_collective(local_ray):
    with spawn_group(CollectiveWorker, TWO, role="actor", backend="ray") as group:
        future = group.reduce_after.submit([0.0, STUCK_S])  # rank 0 blocks in the all-reduce
        kill_rank_while_running(group, future, rank=1)


def test_a_death_is_reported_before_the_error_it_caused_on_a_peer(local_ray):
    """Rank 0's collective fails before Ray has noticed that rank 1 died: the death, not the
    peer's "connection closed", is what the driver reports."""
    with spawn_group(CollectiveWorker, TWO, role="actor", backend="ray") as group:
        victim = group.infos[1].pid
        with pytest.raises(WorkerDied) as caught:
            group.raise_or_exit([0.0, 0.5])
        assert (caught.value.rank, caught.value.pid) == (1, victim)


def test_a_stuck_call_times_out_with_the_stuck_ranks_stacks(local_ray):
    with spawn_group(EchoWorker, TWO, role="actor", backend="ray", call_timeout_s=2.0) as group:
        start = time.monotonic()
        with pytest.raises(WorkerTimeout) as caught:
            group.sleep_on(1, STUCK_S)
        assert 2.0 <= time.monotonic() - start < STUCK_S / 5
        assert list(caught.value.stacks) == [1], "rank 0 finished; only rank 1 is stuck"
        stack = caught.value.stacks[1]
        assert "wait_here" in stack and "sleep_on" in stack
        assert "rank(s) 1" in str(caught.value)


def test_a_failing_constructor_names_role_and_rank(local_ray):
    with pytest.raises(WorkerError) as caught:
        spawn_groups({"critic": Role(EchoWorker, kwargs={"unknown": 1})}, TWO, backend="ray")
    assert caught.value.role == "critic" and caught.value.method == "__init__"
    assert "unexpected keyword argument 'unknown'" in str(caught.value)


def test_a_pool_larger_than_the_cluster_fails_with_the_cluster_size(local_ray):
    with pytest.raises(RuntimeError, match="could not reserve"):
        spawn_group(EchoWorker, ResourcePool(nodes=3), backend="ray", start_timeout_s=1)
