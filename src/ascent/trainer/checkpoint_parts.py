"""What a checkpoint holds besides the roles' sharded states, shared by the RL and SFT
trainers: the RNG states of the driver and of every worker process, the resolved config,
and the model's transformers config and tokenizer (so ``ascent export`` needs nothing but
the checkpoint directory).
"""

import shutil
import sys
from pathlib import Path

import torch

from ascent.controller import WorkerGroup
from ascent.controller.randomness import rng_state, set_rng_state
from ascent.engine.config import ModelConfig
from ascent.vision.processing import copy_processor_files

RNG_FILE = "rng_states.pt"
MODEL_FILES = "hf"  # config.json, generation_config.json, tokenizer and processor files
CONFIG_FILE = "config.yaml"


def save_run_parts(
    directory: Path,
    pools: dict[str, WorkerGroup],
    run_dir: Path,
    model: ModelConfig,
    tokenizer: object,
) -> None:
    """Everything but the roles' states: RNG states of the driver and of ``pools``, the
    run's resolved config, and the model's transformers config and tokenizer."""
    save_rng(directory, pools)
    save_config(directory, run_dir)
    save_model_files(directory, model.path, tokenizer, model.trust_remote_code)


def save_rng(directory: Path, pools: dict[str, WorkerGroup]) -> None:
    """The driver's generators and those of every process of each pool (one group per set
    of processes: colocated roles share their process's generators)."""
    states = {"driver": rng_state(), "pools": {name: g.rng_state() for name, g in pools.items()}}
    torch.save(states, directory / RNG_FILE)


def restore_rng(checkpoint: Path, pools: dict[str, WorkerGroup]) -> None:
    """Put back the generators saved by ``save_rng``. A pool now running on a different
    number of ranks keeps its freshly seeded generators (there is no one-to-one match)."""
    path = checkpoint / RNG_FILE
    if not path.is_file():
        print(f"note: {checkpoint} has no RNG states; generators stay seeded", file=sys.stderr)
        return
    states = torch.load(path, weights_only=False)  # our own file: Python and NumPy states
    set_rng_state(states["driver"])
    for name, group in pools.items():
        saved = states["pools"].get(name)
        if saved is not None and len(saved) == group.world_size:
            group.set_rng_state(saved)
        else:
            count = len(saved) if saved is not None else 0
            print(
                f"note: RNG states of {name} were saved for {count} rank(s), the run has "
                f"{group.world_size}; its generators stay seeded",
                file=sys.stderr,
            )


def save_model_files(
    directory: Path, model_path: str, tokenizer: object, trust_remote_code: bool = False
) -> None:
    """The transformers config (and generation config) of ``model_path`` and the tokenizer,
    into ``directory/hf``."""
    from transformers import AutoConfig

    target = directory / MODEL_FILES
    config = AutoConfig.from_pretrained(
        model_path, trust_remote_code=trust_remote_code, local_files_only=True
    )
    config.save_pretrained(target)
    generation = Path(model_path) / "generation_config.json"
    if generation.is_file():
        shutil.copy(generation, target / generation.name)
    tokenizer.save_pretrained(target)
    copy_processor_files(model_path, target)


def save_config(directory: Path, run_dir: Path) -> None:
    """The run's resolved config, as it was when the checkpoint was written."""
    shutil.copy(run_dir / CONFIG_FILE, directory / CONFIG_FILE)
