"""Save and restore an engine's training state: sharded model and optimiser with
torch.distributed.checkpoint (so a run can resume on a different number of ranks), and the
schedule's position.

Every rank writes its own shards into ``directory`` (a filesystem all ranks see); rank 0
writes ``engine.json`` with the optimiser step count, the LR schedule's state and, in
float16, the loss scaler's (scale and clean steps in a row: a resumed run scales as the
uninterrupted one would have).
"""

import json
from pathlib import Path

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_state_dict,
)

from ascent.engine.fsdp import TrainEngine


def _state(engine: TrainEngine, with_optimizer: bool) -> dict:
    optimizers = [engine.optimizer] if with_optimizer and engine.optimizer is not None else []
    model_state, optim_state = get_state_dict(
        engine.module, optimizers, options=StateDictOptions(ignore_frozen_params=False)
    )
    state = {"model": model_state}
    if optimizers:
        state["optim"] = optim_state
    return state


def save_engine(engine: TrainEngine, directory: str | Path, *, with_optimizer: bool = True) -> None:
    """Write the engine's shards (all ranks) and its schedule state (rank 0)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    dcp.save(_state(engine, with_optimizer), checkpoint_id=str(directory))
    if dist.get_rank() == 0:
        meta = {
            "steps": engine.steps,
            "with_optimizer": with_optimizer and engine.optimizer is not None,
        }
        if engine.optimizer is not None:
            meta["scheduler"] = engine.scheduler.state_dict()
        if engine.scaler is not None:
            meta["loss_scale"] = engine.scaler.state_dict()
        (directory / "engine.json").write_text(json.dumps(meta))
    dist.barrier()


def load_engine(engine: TrainEngine, directory: str | Path) -> None:
    """Restore what ``save_engine`` wrote (resharded to this run's ranks)."""
    directory = Path(directory)
    meta_file = directory / "engine.json"
    if not meta_file.is_file():
        raise FileNotFoundError(f"{directory} is not an engine checkpoint (no engine.json)")
    meta = json.loads(meta_file.read_text())
    state = _state(engine, meta["with_optimizer"])
    dcp.load(state, checkpoint_id=str(directory))
    optimizers = [engine.optimizer] if "optim" in state else []
    set_state_dict(
        engine.module,
        optimizers,
        model_state_dict=state["model"],
        optim_state_dict=state.get("optim", {}),
    )
    engine.steps = meta["steps"]
    if engine.optimizer is not None and "scheduler" in meta:
        engine.scheduler.load_state_dict(meta["scheduler"])
    # A checkpoint of a bfloat16 or float32 run resumed in float16 starts from init_scale.
    if engine.scaler is not None and "loss_scale" in meta:
        engine.scaler.load_state_dict(meta["loss_scale"])
