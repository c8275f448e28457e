import pytest

from ascent.controller import ResourcePool, Role, spawn_groups
from tests.controller.workers import EchoWorker, ShapeWorker

BACKENDS = {"ray": ResourcePool(devices_per_node=2), "in-process": ResourcePool()}


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
