"""Save and restore an engine's training state: sharded model and optimiser with
torch.distributed.checkpoint (so a run can resume on a different number of ranks), and the
schedule's position.

Every rank writes its own shards into ``directory`` (a filesystem all ranks see), under the
whole model's names (a pipeline stage's layers renumbered: ``TrainEngine.global_name``) and
with the optimiser's state flattened per parameter (``state.<name>.exp_avg``,
``param_groups.<name>.lr``), so that ranks holding different parameters (stages) write and
read their own keys and a checkpoint loads under another layout; rank 0 writes
``engine.json`` with the optimiser step count, the LR schedule's state and, in
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


def _state(engine: TrainEngine, with_optimizer: bool, flat: bool = True) -> tuple[dict, dict]:
    """The engine's model (and optimiser) state under the whole model's names, and each
    part's map from those names back to the module's own. ``flat=False``: the nested
    optimiser layout of checkpoints written before the flat one (read only)."""
    optimizers = [engine.optimizer] if with_optimizer and engine.optimizer is not None else []
    options = StateDictOptions(ignore_frozen_params=False, flatten_optimizer_state_dict=flat)
    model_state, optim_state = get_state_dict(engine.module, optimizers, options=options)
    parts = {"model": (model_state, engine.global_name)}
    if optimizers:
        parts["optim"] = (optim_state, lambda key: _optimizer_key(engine, key))
    state, own = {}, {}
    for part, (values, rename) in parts.items():
        own[part] = {rename(key): key for key in values}
        state[part] = {rename(key): value for key, value in values.items()}
    return state, own


def _optimizer_key(engine: TrainEngine, key: str) -> str:
    """``state.<name>.<field>`` / ``param_groups.<name>.<field>`` with the whole model's
    parameter name (a nested layout's keys are left as they are)."""
    kind, _, rest = key.partition(".")
    return f"{kind}.{engine.global_name(rest)}" if rest else key


def save_engine(engine: TrainEngine, directory: str | Path, *, with_optimizer: bool = True) -> None:
    """Write the engine's shards (all ranks) and its schedule state (rank 0)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    dcp.save(_state(engine, with_optimizer)[0], checkpoint_id=str(directory))
    if dist.get_rank() == 0:
        meta = {
            "steps": engine.steps,
            "optimizer_layout": "flat",
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
    flat = meta.get("optimizer_layout") == "flat"
    state, own = _state(engine, meta["with_optimizer"], flat)
    dcp.load(state, checkpoint_id=str(directory))
    optimizers = [engine.optimizer] if "optim" in state else []
    local = {
        part: {own[part][key]: value for key, value in values.items()}
        for part, values in state.items()
    }
    set_state_dict(
        engine.module,
        optimizers,
        model_state_dict=local["model"],
        optim_state_dict=local.get("optim", {}),
        options=StateDictOptions(flatten_optimizer_state_dict=flat),
    )
    engine.steps = meta["steps"]
    if engine.optimizer is not None and "scheduler" in meta:
        engine.scheduler.load_state_dict(meta["scheduler"])
    # A checkpoint of a bfloat16 or float32 run resumed in float16 starts from init_scale.
    if engine.scaler is not None and "loss_scale" in meta:
        engine.scaler.load_state_dict(meta["loss_scale"])
