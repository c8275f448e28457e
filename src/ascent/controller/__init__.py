"""The single controller: worker groups over Ray (or in one process), called from the driver.

See ``group`` for the API, ``dispatch`` for how calls are spread over ranks, ``resources``
for placement, ``host`` for what each worker process sets up.
"""

from ascent.controller.dispatch import Dispatch, register
from ascent.controller.errors import WorkerDied, WorkerError, WorkerTimeout
from ascent.controller.group import GroupFuture, WorkerGroup, spawn_group, spawn_groups
from ascent.controller.resources import ResourcePool
from ascent.controller.worker import Role, Worker, WorkerContext

__all__ = [
    "Dispatch",
    "GroupFuture",
    "ResourcePool",
    "Role",
    "Worker",
    "WorkerContext",
    "WorkerDied",
    "WorkerError",
    "WorkerGroup",
    "WorkerTimeout",
    "register",
    "spawn_group",
    "spawn_groups",
]
