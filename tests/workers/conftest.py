from ascent.controller import ResourcePool, spawn_group


def in_process(worker_class, config):
    """A one-rank group in this process (FSDP2 over a world of one)."""
    return spawn_group(worker_class, ResourcePool(), args=(config,), backend="in-process")
