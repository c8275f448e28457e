"""The sandbox contains what a model (or a solution under test) might do: an infinite loop, a
sleep, a fork bomb, a 10 GB allocation, a huge file or endless output, writing outside its
directory, opening a socket. Each is stopped and reported, and the next run works. What is
enforced depends on the machine (``isolation()``); tests of the namespace and user parts
skip, naming what is missing, where they are not allowed."""

import dataclasses
import socket
import threading
import time
from pathlib import Path

import pytest

from ascent.agents.environment import ToolEnvironment
from ascent.agents.python_tool import python_tool
from ascent.sandbox.isolation import isolation
from ascent.sandbox.pool import SandboxPool
from ascent.sandbox.run import SandboxLimits, run_python

QUICK = SandboxLimits(wall_seconds=4, cpu_seconds=2, memory_bytes=512 << 20, file_bytes=1 << 20)
# A loop gets CPU time only as fast as the machine gives it (2 s of it took over 4 s of wall
# time beside another test run): a wall limit it cannot reach first, however loaded.
CPU_BOUND = dataclasses.replace(QUICK, wall_seconds=120, cpu_seconds=1)
namespaces = pytest.mark.skipif(not isolation().namespaces, reason=isolation().describe())
other_user = pytest.mark.skipif(not isolation().other_user, reason=isolation().describe())


def test_a_program_reads_its_input_and_prints():
    result = run_python("import sys\nprint(sum(map(int, sys.stdin.read().split())))", "3 4 5")
    assert (result.status, result.stdout, result.returncode) == ("ok", "12\n", 0)
    files = run_python("print(open('data.txt').read())", files={"data.txt": "hello"})
    assert files.stdout == "hello\n"


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("while True: pass", "cpu_limit"),
        ("import time\ntime.sleep(60)", "timeout"),
        ("x = bytearray(10 * 2**30)", "memory_limit"),
        ("open('big', 'wb').write(b'x' * (10 << 20))", "file_limit"),
        ("while True: print('x' * 1000)", "file_limit"),
        ("raise SystemExit(3)", "error"),
        ("import json\njson.loads('{')", "error"),
    ],
)
def test_runaway_code_is_stopped_and_reported(code, status):
    """The status names the limit that stopped the code; none outlives its wall limit (the
    sleep is stopped long before its 60 s)."""
    limits = CPU_BOUND if status == "cpu_limit" else QUICK
    result = run_python(code, limits=limits)
    assert result.status == status, result
    assert result.wall_seconds < limits.wall_seconds + 10
    assert len(result.stdout) <= QUICK.output_bytes
    assert result.report().count("Error: the code") == 1  # one line saying what happened


@other_user
def test_a_fork_bomb_stops_at_the_process_limit_and_leaves_nothing_behind():
    bomb = "import os\nwhile True:\n    os.fork()"
    result = run_python(bomb, limits=QUICK)
    assert result.status in ("error", "cpu_limit", "timeout") and result.wall_seconds < 6
    assert "Resource temporarily unavailable" in result.stderr or result.status != "error"
    time.sleep(0.5)
    assert not _running_as_nobody(), "processes of the fork bomb outlived the sandbox"
    assert run_python("print(1)").stdout == "1\n"  # the machine still works


def _running_as_nobody() -> list[str]:
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue
        if "\nUid:\t65534\t" in text:
            found.append(status.parent.name)
    return found


@other_user
def test_code_cannot_write_outside_its_directory():
    # The home directory: the caller's (root's), never under /tmp, which the sandbox replaces.
    target = Path.home() / f"ascent-escaped-{time.time_ns()}"
    result = run_python(f"open({str(target)!r}, 'w').write('x')", limits=QUICK)
    assert result.status == "error" and "PermissionError" in result.stderr, result
    assert not target.exists()
    inside = run_python("open('mine.txt', 'w').write('x'); print(open('mine.txt').read())")
    assert inside.stdout == "x\n"


@namespaces
def test_temporary_files_written_inside_vanish_with_the_sandbox():
    marker = f"/tmp/ascent-sandbox-marker-{time.time_ns()}"
    assert run_python(f"open({marker!r}, 'w').write('x')\nprint('ok')").stdout == "ok\n"
    assert not Path(marker).exists()


@namespaces
def test_code_cannot_open_a_socket_to_this_machine_or_beyond():
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    accepted = []
    threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
    try:
        code = (
            "import socket\n"
            f"for host in ['127.0.0.1', '1.1.1.1']:\n"
            "    try:\n"
            f"        socket.create_connection((host, {port}), timeout=2)\n"
            "        print('reached', host)\n"
            "    except OSError as error:\n"
            "        print('refused', host, error.errno)\n"
        )
        result = run_python(code, limits=QUICK)
    finally:
        server.close()
    assert "reached" not in result.stdout and result.stdout.count("refused") == 2
    assert not accepted


def test_a_pool_runs_sandboxes_at_once_and_a_python_tool_reports_to_the_model():
    pool = SandboxPool(workers=4, limits=QUICK)
    try:
        began = time.perf_counter()
        results = pool.map([(f"import time; time.sleep(1); print({i})", "") for i in range(4)])
        assert [r.stdout for r in results] == ["0\n", "1\n", "2\n", "3\n"]
        assert time.perf_counter() - began < 3  # four 1-second sleeps, side by side
        environment = ToolEnvironment([python_tool(pool)])
        environment.reset({"prompt": [{"role": "user", "content": "compute"}]})
        call = '<tool_call>{"name": "python", "arguments": {"code": "%s"}}</tool_call>'
        answer = environment.step({"role": "assistant", "content": call % "print(12 * 34)"})
        assert answer.observations == [{"role": "tool", "content": "408"}]
        runaway = environment.step({"role": "assistant", "content": call % "while True: pass"})
        assert "CPU time limit" in runaway.observations[0]["content"]
        assert not runaway.done  # the run goes on; the model hears what happened
    finally:
        pool.close()
