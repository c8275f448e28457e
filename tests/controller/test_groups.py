"""Behaviour of worker groups, the same on the Ray backend (2 ranks, real processes) and the
in-process backend (1 rank, the driver's own process)."""

import os
import socket

import pytest
import torch

from ascent.batch import Batch
from ascent.controller import Dispatch, WorkerError, register


def numbers(n: int) -> Batch:
    return Batch.from_dict({"x": torch.arange(float(n)), "uid": [f"u{i}" for i in range(n)]})


def test_every_rank_knows_its_place(colocated):
    actor = colocated["actor"]
    infos = actor.whoami()
    assert [i["rank"] for i in infos] == list(range(actor.world_size))
    for info in infos:
        assert info["world_size"] == info["dist_world"] == actor.world_size
        assert info["dist_rank"] == info["rank"] and info["device"] == "cpu"
        assert info["role"] == "actor" and info["tag"] == "echo"
    if actor.backend == "ray":
        assert len({i["pid"] for i in infos}) == 2 and os.getpid() not in {i["pid"] for i in infos}
        assert all(i["threads"] == 1 for i in infos), "cpus_per_worker=1 sets one torch thread"
    else:  # the driver's own process and thread: breakpoint() in a worker method just works
        assert infos[0]["pid"] == os.getpid() and infos[0]["main_thread"]


def test_dp_splits_batches_and_concatenates_in_order(colocated):
    actor = colocated["actor"]
    out = actor.double(numbers(6), offset=1.0)
    assert out["x"].tolist() == [1.0, 3.0, 5.0, 7.0, 9.0, 11.0]
    assert out["uid"] == [f"u{i}" for i in range(6)]
    per_rank = 6 // actor.world_size
    assert out["seen_by"] == [i // per_rank for i in range(6)]
    assert actor.shard_size(numbers(6)) == [per_rank] * actor.dp_size


def test_dp_refuses_a_batch_that_does_not_split_evenly(colocated):
    actor = colocated["actor"]
    if actor.dp_size == 1:
        pytest.skip("one rank: every batch splits")
    with pytest.raises(ValueError, match="allow_uneven"):
        actor.double(numbers(5))


def test_all_rank_zero_and_per_rank(colocated):
    actor = colocated["actor"]
    n = actor.world_size
    assert actor.total(numbers(4)) == [6.0] * n
    assert actor.on_rank_zero("z") == (0, "z")
    values = [f"v{r}" for r in range(n)]
    assert actor.per_rank(values) == [(r, values[r]) for r in range(n)]
    with pytest.raises(ValueError, match="one per rank"):
        actor.per_rank([*values, "extra"])


def test_only_registered_methods_are_callable(colocated):
    actor = colocated["actor"]
    assert not hasattr(actor, "not_registered")
    with pytest.raises(AttributeError, match="register"):
        actor.submit("not_registered")


def test_colocated_roles_share_process_and_device(colocated):
    actor, ref = colocated["actor"], colocated["ref"]
    ours, theirs = actor.whoami(), ref.whoami()
    assert [i["pid"] for i in ours] == [i["pid"] for i in theirs]
    assert [i["device"] for i in ours] == [i["device"] for i in theirs]
    assert {i["tag"] for i in theirs} == {"reference"} and {i["role"] for i in theirs} == {"ref"}


def test_futures_chain_between_groups(colocated):
    actor, ref = colocated["actor"], colocated["ref"]
    future = actor.double.submit(numbers(6))
    chained = ref.double(future, offset=0.5)  # DP -> DP
    assert chained["x"].tolist() == [4 * i + 0.5 for i in range(6)]
    assert ref.total(actor.double.submit(numbers(4))) == [12.0] * ref.world_size  # DP -> ALL
    assert future.result()["x"].tolist() == [2.0 * i for i in range(6)]


def test_a_raising_worker_names_role_rank_host_and_traceback(colocated):
    actor = colocated["actor"]
    failing_rank = actor.world_size - 1
    with pytest.raises(WorkerError) as caught:
        actor.fail_on(failing_rank)
    error = caught.value
    assert (error.role, error.method, error.rank) == ("actor", "fail_on", failing_rank)
    assert error.host == socket.gethostname()
    assert "deliberate failure on rank" in str(error)
    assert "workers.py" in error.traceback and "fail_on" in error.traceback
    # The group stays usable after a method raised.
    assert actor.on_rank_zero(1) == (0, 1)


def test_method_names_cannot_shadow_the_group_api(local_ray):
    from ascent.controller import ResourcePool, Worker, spawn_group

    class Clash(Worker):
        @register(Dispatch.ALL)
        def submit(self):
            return None

    with pytest.raises(ValueError, match="clashes"):
        spawn_group(Clash, ResourcePool(), backend="in-process")


@pytest.mark.gpu
def test_in_process_group_on_cuda():
    from ascent.controller import ResourcePool, spawn_group
    from tests.controller.workers import EchoWorker

    with spawn_group(EchoWorker, ResourcePool(device="cuda"), backend="in-process") as group:
        assert group.whoami()[0]["device"] == "cuda:0"
        assert group.all_reduce(2.0) == [2.0]
