"""Checkpoint directories of a run: written atomically, verified, found again on resume.

Layout: ``<run_dir>/checkpoints/step_00000042/`` holds one sub-directory per role (each
role's sharded state), the run's extras (RNG states, resolved config, tokenizer), then
``manifest.json`` (size and sha256 of every file) and last ``trainer_state.json``;
``<run_dir>/checkpoints/latest`` names the newest complete one.

A checkpoint is written into a hidden temporary directory and renamed into place only once
every part is written and flushed, so a crash, a full disk or a failed write mid-save never
leaves a checkpoint that looks complete and never touches the previous ones; the partial
directory is removed. On resume each candidate is checked against its manifest (a truncated
or overwritten file is caught before anything loads), and ``auto`` falls back past broken
ones with a warning.
"""

import hashlib
import json
import os
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ascent.batch.storage import fsync_path
from ascent.errors import InputError

OS_ERROR_LINE = re.compile(r"\w*Error: \[Errno \d+\][^\n]*")
STATE_FILE = "trainer_state.json"
MANIFEST = "manifest.json"


class CheckpointError(RuntimeError):
    """A checkpoint could not be written, or one asked for cannot be used."""


class CheckpointNotFound(CheckpointError, InputError):
    """A checkpoint the user named is not there: a user error (exit 2), not a fault."""


class SaveFailed(CheckpointError):
    """A checkpoint could not be written; the message names the last good one."""


class Checkpoints:
    def __init__(
        self, run_dir: str | Path, keep_last: int | None = None, checksums: bool = True
    ) -> None:
        self.root = Path(run_dir) / "checkpoints"
        self.keep_last = keep_last
        self.checksums = checksums

    def save(self, step: int, write_parts: Callable[[Path], None], state: dict[str, Any]) -> Path:
        """``write_parts(directory)`` writes every role's state and the run's extras;
        ``state`` is the trainer's own (data position, counters, ...). Returns the checkpoint
        directory. Raises CheckpointError, with the previous checkpoints intact, if any write
        fails."""
        self.root.mkdir(parents=True, exist_ok=True)
        for stale in self.root.glob(".step_*.tmp"):  # left by a crash mid-save
            shutil.rmtree(stale, ignore_errors=True)
        final = self.root / f"step_{step:08d}"
        temporary = self.root / f".step_{step:08d}.tmp"
        try:
            temporary.mkdir()
            write_parts(temporary)
            manifest = file_manifest(temporary, self.checksums)
            _write_durably(temporary / MANIFEST, json.dumps(manifest, indent=1))
            _write_durably(temporary / STATE_FILE, json.dumps({"step": step, **state}))
            _fsync_tree(temporary)
        except BaseException as error:  # torch's CheckpointException is a BaseException
            shutil.rmtree(temporary, ignore_errors=True)  # give the space back
            if isinstance(error, KeyboardInterrupt | SystemExit):
                raise
            previous = self.latest()
            raise SaveFailed(
                f"saving the checkpoint of step {step} failed ({root_cause(error)}"
                f"{_space_note(self.root, previous)}); nothing was replaced, the last good "
                f"checkpoint is {previous or 'none'}. Free disk space or fix the cause, then "
                "rerun with trainer.resume=auto"
            ) from error
        if final.exists():  # saved again after a resume: swap, never leave no copy
            replaced = self.root / f".step_{step:08d}.old"
            os.replace(final, replaced)
            os.replace(temporary, final)
            shutil.rmtree(replaced, ignore_errors=True)
        else:
            os.replace(temporary, final)
        fsync_path(self.root)
        _write_durably(self.root / "latest", final.name)
        self._prune()
        return final

    def complete(self) -> list[Path]:
        """Checkpoints whose save finished, oldest first."""
        return sorted(p for p in self.root.glob("step_*") if (p / STATE_FILE).is_file())

    def latest(self) -> Path | None:
        """The newest complete checkpoint (not verified), or None."""
        pointer = self.root / "latest"
        if pointer.is_file():
            candidate = self.root / pointer.read_text().strip()
            if (candidate / STATE_FILE).is_file():
                return candidate
        complete = self.complete()
        return complete[-1] if complete else None

    def newest_intact(self) -> Path | None:
        """The newest checkpoint that passes ``verify``; broken ones are skipped with a
        warning on stderr (the run resumes from an older one rather than not at all)."""
        for candidate in reversed(self.complete()):
            problems = verify(candidate)
            if not problems:
                return candidate
            print(
                f"warning: skipping checkpoint {candidate}: {'; '.join(problems[:3])}",
                file=sys.stderr,
            )
        return None

    def resolve(self, setting: str) -> Path | None:
        """Where to resume from: ``off`` -> None; ``auto`` -> the newest intact checkpoint of
        this run (None if there is none); a path -> that checkpoint (or the newest intact one
        of that run directory), which must be intact."""
        if setting == "off":
            return None
        if setting == "auto":
            return self.newest_intact()
        path = Path(setting)
        if (path / "checkpoints").is_dir():
            found = Checkpoints(path).newest_intact()
            if found is None:
                raise CheckpointError(f"trainer.resume={setting}: no intact checkpoint in it")
            return found
        if not path.is_dir():
            raise CheckpointNotFound(f"trainer.resume={setting}: no such checkpoint directory")
        problems = verify(path)
        if problems:
            raise CheckpointError(
                f"trainer.resume={setting} cannot be used: {'; '.join(problems[:5])}. Pick "
                "another checkpoint, or trainer.resume=auto to take the newest intact one"
            )
        return path

    @staticmethod
    def state(checkpoint: Path) -> dict[str, Any]:
        return json.loads((checkpoint / STATE_FILE).read_text())

    def _prune(self) -> None:
        if not self.keep_last:
            return
        for old in self.complete()[: -self.keep_last]:
            shutil.rmtree(old, ignore_errors=True)


def root_cause(error: BaseException) -> str:
    """One line for a failed save: the first OS error in the chain of causes (a full disk, a
    permission, a quota: what the user can act on), else the error itself, first line only.
    Distributed-checkpoint and worker errors wrap it in pages of per-rank tracebacks."""
    seen, current, texts = set(), error, []
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError):
            return f"{type(current).__name__}: {current}"
        texts.append(str(current))
        current = current.__cause__ or current.__context__
    for text in texts:  # an OS error a worker reported in its traceback text
        found = OS_ERROR_LINE.search(text)
        if found:
            return found.group(0).strip()
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


def _space_note(root: Path, previous: Path | None) -> str:
    """'; 1.2 MiB free there, a checkpoint takes 3.4 MiB' when the disk looks too full (some
    writers report a full disk as a short write, not as an OS error)."""
    if previous is None:
        return ""
    needed = sum(p.stat().st_size for p in previous.rglob("*") if p.is_file())
    free = shutil.disk_usage(root).free
    if free >= needed:
        return ""
    return f"; {free / 2**20:.1f} MiB free in {root}, a checkpoint takes {needed / 2**20:.1f} MiB"


def verify(checkpoint: Path) -> list[str]:
    """What is wrong with ``checkpoint`` (empty: nothing): an unfinished save, an unreadable
    state or manifest, a file missing, truncated or changed since it was written."""
    if not (checkpoint / STATE_FILE).is_file():
        return [f"{checkpoint.name} is incomplete (no {STATE_FILE}: its save did not finish)"]
    try:
        json.loads((checkpoint / STATE_FILE).read_text())
        manifest = json.loads((checkpoint / MANIFEST).read_text())
    except (OSError, ValueError) as error:
        return [f"unreadable {STATE_FILE} or {MANIFEST} ({error})"]
    problems = []
    for name, entry in manifest.items():
        path = checkpoint / name
        if not path.is_file():
            problems.append(f"{name} is missing")
        elif path.stat().st_size != entry["size"]:
            problems.append(f"{name} has {path.stat().st_size} bytes, {entry['size']} written")
        elif entry.get("sha256") and _sha256(path) != entry["sha256"]:
            problems.append(f"{name} changed since it was written (sha256 differs)")
    return problems


def file_manifest(directory: Path, checksums: bool) -> dict[str, dict[str, Any]]:
    """Relative path -> size (and sha256) of every file under ``directory``."""
    manifest = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        entry: dict[str, Any] = {"size": path.stat().st_size}
        if checksums:
            entry["sha256"] = _sha256(path)
        manifest[str(path.relative_to(directory))] = entry
    return manifest


def _sha256(path: Path) -> str:
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def _write_durably(path: Path, text: str) -> None:
    """Write via a temporary file, fsync, and rename: readers see old or new, never half."""
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "w") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)


def _fsync_tree(directory: Path) -> None:
    """Flush every file the roles wrote (they may not have), so the rename that publishes
    the checkpoint cannot reach the disk before its contents."""
    for path in directory.rglob("*"):
        fsync_path(path)  # files and sub-directory entries
    fsync_path(directory)
