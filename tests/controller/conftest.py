import pytest
import ray

from ascent.controller import ResourcePool, Role, spawn_groups
from tests.controller.workers import EchoWorker, ShapeWorker

BACKENDS = {"ray": ResourcePool(devices_per_node=2), "in-process": ResourcePool()}


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray per test module (8 logical CPUs: workers mostly wait)."""
    if not ray.is_initialized():
        ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module", params=list(BACKENDS))
def colocated(request, local_ray):
    """Two roles colocated in one process per rank, on each backend."""
    groups = spawn_groups(
        {"actor": Role(EchoWorker), "ref": Role(ShapeWorker, kwargs={"tag": "reference"})},
        BACKENDS[request.param],
        backend=request.param,
    )
    yield groups
    groups["actor"].shutdown()
