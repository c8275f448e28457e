"""Where a run starts in its directory: from a checkpoint, from step 0 again, or fresh; never
mixing two runs' checkpoints, records and export.

``trainer.resume``:

- ``auto``: the newest intact checkpoint of ``run_dir``. With none (the run was stopped before
  its first save, or every checkpoint is broken) the run restarts from step 0, says so and why,
  and drops what the earlier attempt recorded, as a resume drops what was recorded after its
  checkpoint.
- ``off``: a new run. A directory that already holds a run (checkpoints, metrics, generations,
  TensorBoard events or an export) is refused: appending to its records, pruning its
  checkpoints and overwriting its ``latest`` would leave neither run intact.
- a checkpoint or run directory: that checkpoint, which must be intact. A checkpoint of another
  run is refused when ``run_dir`` holds a run of its own, for the same reason.
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ascent.errors import InputError
from ascent.trainer.checkpoints import Checkpoints

RECORD_FILES = ("metrics.jsonl", "generations.jsonl")


class CannotStart(InputError):
    """A run that cannot start as configured; the message names the fields and what to do
    (``ascent train``/``sft`` print it and exit 2, before any worker starts)."""


class RunDirInUse(CannotStart):
    """``run_dir`` holds a run that the requested start would mix with a new one."""


@dataclass(frozen=True)
class RunStart:
    """checkpoint: where to resume from (None: step 0); state: its trainer state;
    records_up_to: the step whose records are kept, later ones dropped (None: nothing earlier
    to drop; -1: everything)."""

    checkpoint: Path | None = None
    state: dict[str, Any] = field(default_factory=dict)
    records_up_to: int | None = None

    @property
    def step(self) -> int:
        return self.state.get("step", 0)


def make_run_dir(run_dir: str | Path) -> Path:
    """``trainer.run_dir``, created if missing; a path that cannot be a directory (a file is
    there, or no permission) is refused with the reason."""
    run_dir = Path(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise CannotStart(
            f"trainer.run_dir={run_dir} is a file, or under one: give a directory"
        ) from None
    except OSError as error:
        raise CannotStart(
            f"trainer.run_dir={run_dir} cannot be created ({error.strerror}): give a "
            "directory this user can write"
        ) from None
    return run_dir


def earlier_run(run_dir: Path) -> list[str]:
    """What in ``run_dir`` a run left behind (empty: nothing, the directory is free)."""
    found = []
    saved = Checkpoints(run_dir).complete()
    if saved:
        found.append(f"{len(saved)} checkpoint(s) up to {saved[-1].name}")
    for name in RECORD_FILES:
        path = run_dir / name
        if path.is_file() and path.stat().st_size > 0:
            found.append(f"{name} ({len(path.read_text().splitlines())} records)")
    if any((run_dir / "tensorboard").glob("events.out.tfevents.*")):
        found.append("TensorBoard events")
    if (run_dir / "hf" / "config.json").is_file():
        found.append("an exported model (hf/)")
    return found


def start_run(run_dir: Path, checkpoints: Checkpoints, resume: str) -> RunStart:
    """Resolve ``trainer.resume`` for ``run_dir`` (see the module docstring), before any
    worker starts or any file of the run is written."""
    run_dir = Path(run_dir)
    found = earlier_run(run_dir)
    if resume == "off":
        if found:
            raise RunDirInUse(
                f"trainer.run_dir={run_dir} holds an earlier run ({'; '.join(found)}) and "
                "trainer.resume=off would mix a new run into it. Continue that run with "
                "trainer.resume=auto, start this one in another trainer.run_dir, or move the "
                "old one away first"
            )
        return RunStart()
    checkpoint = checkpoints.resolve(resume)
    if checkpoint is None:
        if not found:
            return RunStart()
        broken = Checkpoints(run_dir).complete()
        why = (
            f"none of its {len(broken)} checkpoint(s) is intact (see the warnings above)"
            if broken
            else "it was stopped before its first checkpoint"
        )
        print(
            f"{run_dir} holds an earlier attempt but no checkpoint to resume from: {why}. "
            "The run restarts from step 0 and the earlier attempt's metrics, generations and "
            "TensorBoard events are dropped",
            file=sys.stderr,
        )
        return RunStart(records_up_to=-1)
    own = checkpoint.resolve().is_relative_to(checkpoints.root.resolve())
    if not own and found:
        raise RunDirInUse(
            f"trainer.resume={resume} is a checkpoint of another run, and trainer.run_dir="
            f"{run_dir} holds a run of its own ({'; '.join(found)}); resuming there would mix "
            "the two. Choose an empty trainer.run_dir for the resumed run"
        )
    state = Checkpoints.state(checkpoint)
    return RunStart(checkpoint, state, records_up_to=state["step"])
