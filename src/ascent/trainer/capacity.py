"""What a run's worker pools ask Ray for, and whether a local Ray could ever give it.

A local Ray (no ``ray_address``) has this machine's cores and GPUs and no autoscaler: a pool
that asks for more waits for its placement group until the start timeout (minutes) and then
fails. So the demand is checked against the machine before Ray starts, with the message
``ascent doctor`` gives. A Ray cluster given by address (or already joined) is not checked
here: it may grow, and ``ascent doctor CONFIG`` reports what it has.
"""

import os
from typing import Any

from ascent.trainer.run_dir import CannotStart
from ascent.workers.resources import ResourcesConfig


class NotEnoughResources(CannotStart):
    """The run asks a local Ray for more CPUs, GPUs or nodes than this machine has."""


def pools(config: Any) -> list[tuple[str, ResourcesConfig]]:
    """The run's resource pools with their config field names: ``resources``, and
    ``rollout.resources`` and ``reward_model.resources`` when those roles have devices of
    their own."""
    found = [("resources", config.resources)]
    for role in ("rollout", "reward_model"):
        own = getattr(getattr(config, role, None), "resources", None)
        if own is not None:
            found.append((f"{role}.resources", own))
    return found


def demand(config: Any, *, ray_only: bool = False) -> tuple[float, int, str]:
    """CPUs and GPUs the run's pools ask Ray for, and the fields that set them:
    sum over pools of nodes x devices_per_node x cpus_per_worker (and one GPU per worker
    with device=cuda). ``ray_only``: only the pools that will run on Ray (``_on_ray``)."""
    chosen = [(name, pool) for name, pool in pools(config) if _on_ray(pool) or not ray_only]
    cpus = sum(pool.world_size * pool.cpus_per_worker for _, pool in chosen)
    gpus = sum(pool.world_size for _, pool in chosen if pool.device == "cuda")
    fields = " + ".join(
        f"{name}.nodes x {name}.devices_per_node x {name}.cpus_per_worker"
        + (" (and 1 GPU each: device=cuda)" if pool.device == "cuda" else "")
        for name, pool in chosen
    )
    return cpus, gpus, fields


def _on_ray(pool: ResourcesConfig) -> bool:
    """As ``spawn_groups`` decides: Ray when asked for, or for "auto" with several devices."""
    return pool.backend == "ray" or (
        pool.backend == "auto" and (pool.world_size > 1 or pool.ray_address is not None)
    )


def _starts_local_ray(config: Any) -> bool:
    """Whether spawning the run's pools would start a Ray on this machine."""
    if os.environ.get("RAY_ADDRESS") or config.resources.ray_address:
        return False
    if not any(_on_ray(pool) for _, pool in pools(config)):
        return False
    try:
        import ray
    except ImportError:
        return True  # the backend reports the missing package itself
    return not ray.is_initialized()


def machine() -> tuple[int, int]:
    """The CPUs this process may use (its affinity, as Ray counts them) and CUDA GPUs."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        import torch

        gpus = torch.cuda.device_count()
    except ImportError:
        gpus = 0
    return cpus or 1, gpus


def check_local_capacity(config: Any) -> None:
    """Raises NotEnoughResources when the run would start a local Ray that cannot place it."""
    if not _starts_local_ray(config):
        return
    need_cpus, need_gpus, fields = demand(config, ray_only=True)
    have_cpus, have_gpus = machine()
    nodes = max(pool.nodes for _, pool in pools(config) if _on_ray(pool))
    if nodes > 1:
        raise NotEnoughResources(
            f"resources.nodes={nodes} but no Ray cluster is given: a local Ray has this one "
            "machine; set resources.ray_address (or $RAY_ADDRESS) to the cluster's head, or "
            "nodes=1"
        )
    if need_cpus > have_cpus or need_gpus > have_gpus:
        raise NotEnoughResources(
            f"{fields} need {need_cpus:g} CPU and {need_gpus} GPU, this machine has "
            f"{have_cpus} and {have_gpus}: a local Ray would wait for them and fail; lower "
            "them (e.g. resources.devices_per_node, resources.cpus_per_worker) or set "
            "resources.ray_address to a cluster that has them (`ascent doctor CONFIG` checks)"
        )
