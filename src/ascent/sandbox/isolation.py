"""What this machine lets the sandbox enforce beyond resource limits, found by trying once."""

import functools
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

NOBODY = 65534


@dataclass(frozen=True)
class Isolation:
    namespaces: bool  # network, PID and mount namespaces (unshare)
    other_user: bool  # runs as nobody without privileges (setpriv)

    def describe(self) -> str:
        enforced = ["CPU, memory, file-size and open-file limits", "a wall-clock kill"]
        missing = []
        if self.namespaces:
            enforced += ["no network", "a PID namespace", "a private /tmp"]
        else:
            missing += ["network isolation", "a PID namespace", "a private /tmp"]
        if self.other_user:
            enforced += ["user nobody with a process limit"]
        else:
            missing += ["another user (so no process limit and the host's files are writable)"]
        text = "sandbox enforces " + ", ".join(enforced)
        return text + ("; not available here: " + ", ".join(missing) if missing else "")


def reachable_by_others(path: str) -> bool:
    """Whether a user with no rights but "others'" can execute ``path`` (every directory on
    its real path searchable, the file executable)."""
    real = Path(os.path.realpath(path))
    if not real.is_file() or not real.stat().st_mode & stat.S_IXOTH:
        return False
    return all(parent.stat().st_mode & stat.S_IXOTH for parent in real.parents)


@functools.cache
def sandbox_python() -> str:
    """The interpreter sandboxed code runs with: this one, unless the sandbox runs code as
    nobody and nobody cannot reach it (a Python under /root), then the system's python3."""
    if not isolation().other_user or reachable_by_others(sys.executable):
        return sys.executable
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if reachable_by_others(candidate):
            return candidate
    raise FileNotFoundError(
        f"the sandbox runs code as nobody, who cannot run {sys.executable} (a directory on its "
        "path is closed to other users) and there is no /usr/bin/python3: install a system "
        "python3, or name one in sandbox.python"
    )


@functools.cache
def isolation() -> Isolation:
    """Try the namespaces and the user switch the sandbox would use (about 20 ms, once)."""
    other_user = os.geteuid() == 0 and shutil.which("setpriv") is not None
    probe = "mount -t tmpfs tmpfs /tmp && mkdir /tmp/probe"
    command = ["unshare", "--mount-proc", "--net", "--pid", "--fork", "sh", "-c", probe]
    namespaces = False
    if shutil.which("unshare") is not None:
        try:
            namespaces = subprocess.run(command, capture_output=True, timeout=10).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            namespaces = False
    return Isolation(namespaces, other_user)
