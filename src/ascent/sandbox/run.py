"""Run untrusted code (a model's tool call, a solution under test) in a subprocess sandbox.

Always enforced (``resource`` limits, set by ``runner.py`` just before the program starts):
CPU seconds, address space, size of any file written (stdout and stderr included), open
files, no core dumps; a wall-clock limit, after which the whole process group is killed; a
fresh working directory; a bare environment; ``python -I`` (no user site, no PYTHON* vars).

Where the machine allows (``isolation()`` finds out once, by trying):

- namespaces (``unshare``, as root): a network namespace with no interface but a down
  loopback (no network at all), a PID namespace (every process the code starts dies with the
  sandbox, whatever it does to its process group), and a mount namespace with private tmpfs
  over ``/tmp``, ``/var/tmp`` and ``/dev/shm`` (the working directory lives there; nothing
  written outside it survives, and the host's temporary files are not visible);
- another user (``setpriv``, as root): the code runs as ``nobody`` with no privileges and no
  way to gain any (``--no-new-privs``); it cannot write the host's files, and the limit on
  processes (``RLIMIT_NPROC``, which root ignores) holds, so a fork bomb stops at it.

Without them the code runs as the calling user with the limits above and nothing else:
``Isolation.describe()`` says so, and a pool logs it once.
"""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ascent.sandbox.isolation import NOBODY, Isolation, isolation, sandbox_python

# The runner goes in as source (``-c``): nobody may not be able to read ascent's files.
RUNNER = Path(__file__).with_name("runner.py").read_text()
Status = Literal[
    "ok", "error", "timeout", "cpu_limit", "memory_limit", "file_limit", "setup_failed"
]


@dataclass(frozen=True)
class SandboxLimits:
    wall_seconds: float = 10.0
    cpu_seconds: int = 5
    memory_bytes: int = 1 << 30
    file_bytes: int = 16 << 20  # any one file, stdout and stderr included
    output_bytes: int = 16 << 10  # of stdout and of stderr, kept in the result
    processes: int = 32  # enforced only when the code runs as another user
    open_files: int = 64
    tmpfs_bytes: int = 64 << 20  # the private /tmp, where namespaces are allowed


@dataclass(frozen=True)
class SandboxResult:
    status: Status
    returncode: int | None
    stdout: str
    stderr: str
    wall_seconds: float

    def report(self) -> str:
        """What a tool tells the model: the output, and what went wrong if anything did."""
        problems = {
            "timeout": "Error: the code ran past its time limit and was stopped.",
            "cpu_limit": "Error: the code used up its CPU time limit and was stopped.",
            "memory_limit": "Error: the code ran out of memory.",
            "file_limit": "Error: the code wrote more than its file size limit.",
            "setup_failed": "Error: the sandbox could not start the code.",
            "error": f"Error: the code exited with status {self.returncode}.",
        }
        parts = [self.stdout.rstrip()] if self.stdout.strip() else []
        if self.status != "ok":
            parts.append(problems[self.status])
            if self.stderr.strip():
                parts.append(self.stderr.strip()[-2000:])
        return "\n".join(parts) if parts else "(no output)"


def run_python(
    code: str,
    stdin: str = "",
    *,
    files: dict[str, str] | None = None,
    limits: SandboxLimits = SandboxLimits(),
    python: str | None = None,
) -> SandboxResult:
    """Run ``code`` as ``main.py`` (with ``files`` beside it) and ``stdin`` as its input."""
    files = {**(files or {}), "main.py": code}
    python = python or sandbox_python()
    return run_program([python, "-I", "main.py"], stdin, files=files, limits=limits)


def run_program(
    argv: list[str],
    stdin: str = "",
    *,
    files: dict[str, str] | None = None,
    limits: SandboxLimits = SandboxLimits(),
) -> SandboxResult:
    """Run ``argv`` in the sandbox (see the module docstring); never raises for what the code
    does."""
    allowed = isolation()
    header = {
        "files": files or {},
        "argv": argv,
        "limits": {
            "cpu_seconds": limits.cpu_seconds,
            "memory_bytes": limits.memory_bytes,
            "file_bytes": limits.file_bytes,
            "open_files": limits.open_files,
            "processes": limits.processes if allowed.other_user else None,
        },
    }
    payload = (json.dumps(header) + "\n" + stdin).encode()
    scratch = Path(tempfile.mkdtemp(prefix="ascent-sandbox-"))
    try:
        workdir = scratch / "work"
        workdir.mkdir()
        command = _command(allowed, limits, workdir)
        stdout_path, stderr_path = scratch / "stdout", scratch / "stderr"
        began = time.perf_counter()
        with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
            process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
                cwd=workdir,
                env=_environment(workdir),
                start_new_session=True,  # one process group to kill
            )
            timed_out = _feed_and_wait(process, payload, limits.wall_seconds)
        wall = time.perf_counter() - began
        stdout = _head(stdout_path, limits.output_bytes)
        stderr = _head(stderr_path, limits.output_bytes)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    status = _status(process.returncode, stderr, timed_out, allowed)
    return SandboxResult(status, process.returncode, stdout, stderr, wall)


def _command(allowed: Isolation, limits: SandboxLimits, workdir: Path) -> list[str]:
    program = [sandbox_python(), "-I", "-c", RUNNER]
    if allowed.other_user:
        uid = gid = str(NOBODY)
        drop = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]
        program = [*drop, "--inh-caps=-all", "--no-new-privs", *program]
        if not allowed.namespaces:
            os.chown(workdir, NOBODY, NOBODY)
    if not allowed.namespaces:
        return program
    # sh stays as PID 1 of the namespace (the program is its child, so signals act on the
    # program normally); when sh exits, the kernel kills whatever the program left behind.
    script = (
        "set -e; "
        f"for d in /tmp /var/tmp /dev/shm; do mount -t tmpfs -o size={limits.tmpfs_bytes},"
        "mode=1777 tmpfs $d; done; "
        f"mkdir /tmp/work; chown {NOBODY if allowed.other_user else 0} /tmp/work; cd /tmp/work; "
        'set +e; HOME=/tmp/work TMPDIR=/tmp/work "$@"; exit $?'
    )
    return [
        "unshare", "--mount-proc", "--net", "--pid", "--fork", "--kill-child",
        "sh", "-c", script, "sandbox", *program,
    ]  # fmt: skip


def _environment(workdir: Path) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(workdir),
        "TMPDIR": str(workdir),
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        # One thread each: threads count as processes, and a pool runs many sandboxes.
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


def _feed_and_wait(process: subprocess.Popen, payload: bytes, wall_seconds: float) -> bool:
    """Write stdin, wait; on the wall-clock limit kill the process group. True if killed."""
    try:
        process.communicate(payload, timeout=wall_seconds)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
    except BrokenPipeError:  # the program exited without reading all its input
        timed_out = False
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)  # also whatever the code left running
    process.wait()
    return timed_out


def _head(path: Path, limit: int) -> str:
    with open(path, "rb") as handle:
        return handle.read(limit).decode("utf-8", errors="replace")


def _status(returncode: int, stderr: str, timed_out: bool, allowed: Isolation) -> Status:
    if timed_out:
        return "timeout"
    # Under namespaces the program is sh's child: a signal N comes back as 128 + N.
    signal_number = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else 0
    if returncode == 125 and "sandbox setup failed" in stderr:
        return "setup_failed"
    if signal_number in (signal.SIGXCPU, signal.SIGKILL):
        return "cpu_limit"
    if signal_number == signal.SIGXFSZ or "File too large" in stderr:
        return "file_limit"
    if "MemoryError" in stderr or "Cannot allocate memory" in stderr:
        return "memory_limit"
    return "ok" if returncode == 0 else "error"
