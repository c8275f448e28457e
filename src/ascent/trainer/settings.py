"""Config pieces every trainer shares: the loop's checkpoints, resume and seeding (where
the workers run: ``ascent.workers.resources``)."""

from pydantic import Field, field_validator

from ascent.engine.config import Strict


class RunSettings(Strict):
    """What the RL and SFT loops share: checkpoints, resume, seeding, export, progress."""

    # Each trainer sets its own default; declared here so it comes first in every table.
    run_dir: str = Field("runs", description="Checkpoints, metrics and the export.")
    save_every: int = Field(0, ge=0, description="Checkpoint every N steps (0: at the end only).")
    keep_last: int | None = Field(2, ge=1, description="Checkpoints kept (None: all).")
    resume: str = Field(
        "auto",
        description="auto (newest intact checkpoint of run_dir), off, or a checkpoint or run "
        "directory.",
    )
    save_optimizer: bool = Field(
        True,
        description="Keep optimiser state in checkpoints (off: a third of the size; a "
        "resumed run restarts Adam's moments).",
    )
    checksum_checkpoints: bool = Field(
        True, description="sha256 of every checkpoint file, checked on resume (off: sizes only)."
    )
    export: bool = Field(True, description="Write the final model as a transformers checkpoint.")
    seed: int = Field(0, description="Seed of the data order, RL sampling and every worker's RNGs.")
    deterministic: bool = Field(
        False,
        description="Deterministic kernels everywhere (bitwise-repeatable runs; slower on GPU).",
    )
    progress_bar: bool = Field(True, description="Show a progress bar with ETA.")

    @field_validator("resume", mode="before")
    @classmethod
    def _yaml_off(cls, value: object) -> object:
        """YAML reads ``off`` and ``on`` as booleans; a resume setting means the words."""
        if value is False:
            return "off"
        if value is True:
            return "auto"
        return value
