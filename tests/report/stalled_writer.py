"""A process that appends one record to a run's JSONL file as the run's writers do (the JSON and
its newline in one write, then a flush) but stops halfway through the line: the parent then
kills it there with SIGKILL, as a run killed mid-write, or lets it finish, as a run still
writing. The half line is flushed before the process says so, so it is in the file, and a
kill cannot land anywhere else; every wait is on the other side's word, not on a clock.

Run as a script, it is the writer: it reads the record's line from stdin, writes its first
half, says ``half``, waits for a line on stdin, writes the rest, says ``whole`` and waits for
stdin to close."""

import json
import select
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

WAIT_S = 120  # for the writer's word: generous, as a loaded machine can be slow to start it


class StalledWriter:
    """The parent's side: started, the writer has written the first half of ``record``'s
    line to ``path`` and waits."""

    def __init__(self, path: Path, record: dict[str, Any]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._tell(json.dumps(record))
        self._expect("half")

    def kill(self) -> None:
        """SIGKILL, halfway through the line; returns when the process is gone."""
        self.process.send_signal(signal.SIGKILL)
        assert self.process.wait(timeout=WAIT_S) == -signal.SIGKILL

    def finish(self) -> None:
        """Write the rest of the line; returns when it is flushed."""
        self._tell("go")
        self._expect("whole")

    def __enter__(self) -> "StalledWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()  # the writer's cue to exit
            self.process.wait(timeout=WAIT_S)
        self.process.stdout.close()

    def _tell(self, line: str) -> None:
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def _expect(self, word: str) -> None:
        ready, _, _ = select.select([self.process.stdout], [], [], WAIT_S)
        said = self.process.stdout.readline().strip() if ready else "nothing"
        assert said == word, f"the writer said {said!r} (exit code {self.process.poll()})"


def _write(path: Path) -> None:
    line = sys.stdin.readline()
    half = len(line) // 2
    with open(path, "a") as out:
        out.write(line[:half])
        out.flush()
        print("half", flush=True)
        sys.stdin.readline()
        out.write(line[half:])
        out.flush()
        print("whole", flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    _write(Path(sys.argv[1]))
