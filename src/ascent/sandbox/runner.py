"""The sandbox's first program, run inside it (``python -I runner.py``) with nothing of ascent
importable: it reads the job, writes the files, lowers the resource limits and becomes the
user's program.

stdin: one line of JSON, ``{"files": {name: text}, "argv": [...], "limits": {...}}``, then the
program's own stdin. Reading the header byte by byte leaves the rest of stdin unread for the
program that replaces this one (``os.execv`` keeps file descriptors and their offsets).
"""

import json
import os
import resource
import sys


def read_header() -> dict:
    line = bytearray()
    while not line.endswith(b"\n"):
        byte = os.read(0, 1)
        if not byte:
            break
        line += byte
    return json.loads(line)


def limit(kind: int, value: int | None) -> None:
    if value is not None:
        resource.setrlimit(kind, (value, value))


def main() -> None:
    job = read_header()
    for name, text in job["files"].items():
        path = os.path.join(os.getcwd(), name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as handle:
            handle.write(text)
    limits = job["limits"]
    cpu = limits["cpu_seconds"]
    # The soft CPU limit sends SIGXCPU; one more second and the hard limit kills.
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    limit(resource.RLIMIT_AS, limits["memory_bytes"])
    limit(resource.RLIMIT_FSIZE, limits["file_bytes"])
    limit(resource.RLIMIT_NOFILE, limits["open_files"])
    limit(resource.RLIMIT_CORE, 0)
    limit(resource.RLIMIT_NPROC, limits.get("processes"))
    argv = job["argv"]
    os.execv(argv[0], argv)


if __name__ == "__main__":
    try:
        main()
    except Exception as error:
        sys.stderr.write(f"sandbox setup failed: {type(error).__name__}: {error}\n")
        sys.exit(125)
