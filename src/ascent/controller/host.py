"""WorkerHost: one per process, holding the role workers colocated in that process.

The same class runs inside a Ray actor (one process per device) and in the driver process
(in-process backend). It sets up the process (threads, device, torch.distributed), creates
the role workers, executes their methods and reports on itself (identity, Python stack).
"""

import os
import socket
import sys
import threading
import traceback
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from ascent.controller.errors import WorkerError, WorkerInputError
from ascent.controller.randomness import seed_everything, use_deterministic_kernels
from ascent.controller.refs import resolve
from ascent.controller.worker import Role, Worker, WorkerContext
from ascent.errors import UserError


@dataclass(frozen=True)
class Placement:
    """Where a host sits in its pool; ``cpus`` None leaves the thread count alone."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: str  # "cpu" or "cuda"
    cpus: float | None
    seed: int | None = None  # seeds every generator before each role is built
    deterministic: bool = False  # deterministic kernels only (see controller.randomness)


@dataclass(frozen=True)
class HostInfo:
    """What the driver knows about each rank's process."""

    rank: int
    pid: int
    host: str
    ip: str
    node_id: str  # Ray's node id ("local" in-process): tells apart nodes sharing an address
    device: str
    threads: int


class WorkerHost:
    """Runs the role workers of one rank. Methods are called by the backends."""

    def __init__(self, placement: Placement) -> None:
        self.placement = placement
        self.workers: dict[str, Worker] = {}
        self._executing: tuple[int, str] | None = None  # (thread id, "role.method")
        if placement.cpus is not None:
            # Ray reserves the cores; torch must also be told, or every worker on a machine
            # starts one thread per core and they fight over them.
            threads = max(1, int(placement.cpus))
            torch.set_num_threads(threads)
            os.environ["OMP_NUM_THREADS"] = str(threads)
        if placement.device == "cuda":
            # Ray gives each worker one GPU through CUDA_VISIBLE_DEVICES: it is cuda:0.
            self.device = torch.device("cuda", 0)
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device("cpu")
        self._was_deterministic = torch.are_deterministic_algorithms_enabled()
        if placement.deterministic:
            use_deterministic_kernels()

    def rendezvous_address(self) -> tuple[str, int]:
        """This node's address and a free port, for rank 0 to host torch.distributed's store."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("", 0))
            port = sock.getsockname()[1]
        return node_ip(), port

    def setup_distributed(self, master_addr: str, master_port: int) -> None:
        """Join the group's process group: gloo on CPU, NCCL for CUDA tensors (gloo kept for
        CPU tensors, e.g. offloaded state). Collectives keep torch's default timeout (30 min), a
        guard against hangs only: a rank may wait long for a slower peer (a save, a process
        starved on a loaded machine). The driver bounds the start itself (``start_timeout_s``)."""
        p = self.placement
        os.environ.update(
            MASTER_ADDR=master_addr,
            MASTER_PORT=str(master_port),
            RANK=str(p.rank),
            WORLD_SIZE=str(p.world_size),
            LOCAL_RANK=str(p.local_rank),
            LOCAL_WORLD_SIZE=str(p.local_world_size),
        )
        backend = "cpu:gloo,cuda:nccl" if p.device == "cuda" else "gloo"
        dist.init_process_group(
            backend=backend,
            init_method=f"tcp://{master_addr}:{master_port}",
            rank=p.rank,
            world_size=p.world_size,
        )

    def setup_single_process(self) -> None:
        """A world of one, in this process (in-process backend); kept if already set up."""
        if not dist.is_initialized():
            backend = "cpu:gloo,cuda:nccl" if self.placement.device == "cuda" else "gloo"
            dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)

    def create_workers(self, roles: dict[str, Role]) -> None:
        """Instantiate every role in this process, each knowing its place."""
        p = self.placement
        for name, role in roles.items():
            ctx = WorkerContext(
                role=name,
                rank=p.rank,
                world_size=p.world_size,
                local_rank=p.local_rank,
                local_world_size=p.local_world_size,
                replica_size=role.replica_size,
                device=self.device,
                host=socket.gethostname(),
                peers=self.workers,
            )
            if p.seed is not None:  # each role's random parts are the same in every run
                seed_everything(p.seed)
            self.workers[name] = self._guarded(name, "__init__", role.instantiate, ctx)

    def execute(self, role: str, method: str, returns: bool, *args: Any, **kwargs: Any) -> Any:
        """Run ``role.method`` with its arguments resolved (see ``ascent.controller.refs``).

        ``returns`` False (a replica peer whose result the driver does not collect) sends
        back None instead of the result, so it is not transferred for nothing.
        """
        bound = getattr(self.workers[role], method)
        args = tuple(resolve(a) for a in args)
        kwargs = {k: resolve(v) for k, v in kwargs.items()}
        result = self._guarded(role, method, bound, *args, **kwargs)
        return result if returns else None

    def _guarded(self, role: str, method: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        self._executing = (threading.get_ident(), f"{role}.{method}")
        try:
            return fn(*args, **kwargs)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as error:  # e.g. torch's CheckpointException on a full disk
            kind, text = WorkerError, f"{type(error).__name__}: {error}"
            if isinstance(error, UserError):  # the user's mistake: its message says it all
                kind, text = WorkerInputError, str(error)
            raise kind(
                role=role,
                method=method,
                rank=self.placement.rank,
                host=socket.gethostname(),
                pid=os.getpid(),
                error=text,
                traceback=traceback.format_exc(),
            ) from error
        finally:
            self._executing = None

    def stack(self) -> str:
        """The Python stack of the worker method running now (from its own frame down)."""
        executing = self._executing
        if executing is None:
            return "idle (no worker method running)"
        thread_id, name = executing
        frame = sys._current_frames().get(thread_id)
        if frame is None:
            return f"{name}: thread gone"
        frames = traceback.extract_stack(frame)
        # Drop the frames of Ray and of this host: start at the worker's own code.
        starts = [
            i for i, f in enumerate(frames) if f.filename == __file__ and f.name == "_guarded"
        ]
        frames = frames[starts[-1] + 1 :] if starts else frames
        return f"in {name}:\n" + "".join(traceback.format_list(frames))

    def info(self) -> HostInfo:
        return HostInfo(
            rank=self.placement.rank,
            pid=os.getpid(),
            host=socket.gethostname(),
            ip=node_ip(),
            node_id=_ray_node_id(),
            device=str(self.device),
            threads=torch.get_num_threads(),
        )

    def close(self) -> None:
        """Close the workers that hold outside resources (a ``close`` method: e.g. generation
        servers they started), then leave the process group (safe to call twice)."""
        for worker in self.workers.values():
            if callable(getattr(worker, "close", None)):
                worker.close()
        self.workers.clear()
        # In-process, this is the driver's own process: give it back as it was.
        torch.use_deterministic_algorithms(self._was_deterministic)
        if dist.is_initialized() and self.placement.world_size > 1:
            dist.destroy_process_group()


def node_ip() -> str:
    """This node's address as Ray sees it (the one other nodes can reach), else loopback."""
    ray = _connected_ray()
    return ray.util.get_node_ip_address() if ray else "127.0.0.1"


def _ray_node_id() -> str:
    ray = _connected_ray()
    return ray.get_runtime_context().get_node_id() if ray else "local"


def _connected_ray() -> Any:
    """The ray module if this process is connected to Ray (a Ray worker), else None."""
    if "ray" not in sys.modules:
        return None
    import ray

    return ray if ray.is_initialized() else None
