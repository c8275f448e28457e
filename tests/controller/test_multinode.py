"""A group spanning two Ray nodes (two raylets on this machine), reached by address."""

import pytest
import ray
from ray.cluster_utils import Cluster

from ascent.controller import ResourcePool, spawn_group
from tests.controller.workers import EchoWorker

pytestmark = pytest.mark.integration


@pytest.fixture
def two_node_cluster():
    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def test_ranks_land_on_both_nodes_and_a_collective_crosses_them(two_node_cluster):
    pool = ResourcePool(nodes=2, devices_per_node=1)
    with spawn_group(
        EchoWorker, pool, backend="ray", ray_address=two_node_cluster.address
    ) as group:
        nodes = [info.node_id for info in group.infos]
        assert len(set(nodes)) == 2, f"both ranks on one node: {nodes}"
        assert {n["NodeID"] for n in ray.nodes() if n["Alive"]} == set(nodes)
        assert group.all_reduce(1.0) == [3.0, 3.0]
        assert [i["rank"] for i in group.whoami()] == [0, 1]
