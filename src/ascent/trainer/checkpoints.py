"""Checkpoint directories of a run: written atomically, found again on resume.

Layout: ``<run_dir>/checkpoints/step_00000042/`` holds one sub-directory per role (each
role's own sharded state) and ``trainer_state.json``; ``<run_dir>/checkpoints/latest`` names
the newest complete one. A checkpoint is written into a hidden temporary directory and
renamed into place only once every part is written, so a crash mid-save never leaves a
checkpoint that looks complete, and never touches the previous one.
"""

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

STATE_FILE = "trainer_state.json"


class Checkpoints:
    def __init__(self, run_dir: str | Path, keep_last: int | None = None) -> None:
        self.root = Path(run_dir) / "checkpoints"
        self.keep_last = keep_last

    def save(self, step: int, write_roles: Callable[[Path], None], state: dict[str, Any]) -> Path:
        """``write_roles(directory)`` writes every role's state; ``state`` is the trainer's
        own (step, data position, ...). Returns the checkpoint directory."""
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.root / f"step_{step:08d}"
        temporary = self.root / f".step_{step:08d}.tmp"
        shutil.rmtree(temporary, ignore_errors=True)
        temporary.mkdir()
        write_roles(temporary)
        _write_durably(temporary / STATE_FILE, json.dumps({"step": step, **state}))
        if final.exists():
            shutil.rmtree(final)
        os.replace(temporary, final)
        _write_durably(self.root / "latest", final.name)
        self._prune()
        return final

    def latest(self) -> Path | None:
        """The newest complete checkpoint, or None."""
        pointer = self.root / "latest"
        if pointer.is_file():
            candidate = self.root / pointer.read_text().strip()
            if (candidate / STATE_FILE).is_file():
                return candidate
        complete = sorted(p for p in self.root.glob("step_*") if (p / STATE_FILE).is_file())
        return complete[-1] if complete else None

    @staticmethod
    def state(checkpoint: Path) -> dict[str, Any]:
        return json.loads((checkpoint / STATE_FILE).read_text())

    def _prune(self) -> None:
        if not self.keep_last:
            return
        complete = sorted(p for p in self.root.glob("step_*") if (p / STATE_FILE).is_file())
        for old in complete[: -self.keep_last]:
            shutil.rmtree(old, ignore_errors=True)


def _write_durably(path: Path, text: str) -> None:
    """Write via a temporary file, fsync, and rename: readers see old or new, never half."""
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "w") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
