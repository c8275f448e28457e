"""An engine checkpoint keeps its optimiser state flat, one key per parameter and field
(what lets pipeline stages, which hold different parameters, write and read their own),
and a checkpoint written before that (nested optimiser state) still loads."""

import json

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from ascent.engine import FSDPConfig, OptimConfig, PolicyModule, TrainEngine
from ascent.engine.state import _state, load_engine, save_engine
from ascent.models import load_causal_lm
from tests.engine.test_loss_scale import backward

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def one_process_group():
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)


def trained_engine(path: str) -> TrainEngine:
    module = PolicyModule(load_causal_lm(path))
    engine = TrainEngine(module, device=CPU, fsdp=FSDPConfig(), optim=OptimConfig(lr=1e-3))
    backward(engine, seed=0)
    engine.step()
    return engine


def optimizer_moments(engine: TrainEngine) -> list[torch.Tensor]:
    return [engine.optimizer.state[p]["exp_avg"].full_tensor().clone() for p in engine.trainable]


def test_the_optimizer_state_is_flat_per_parameter(tiny_model, tmp_path):
    engine = trained_engine(tiny_model)
    save_engine(engine, tmp_path)
    keys = dcp.FileSystemReader(str(tmp_path)).read_metadata().state_dict_metadata
    assert "optim.state.model.model.layers.1.mlp.up_proj.weight.exp_avg" in keys
    assert "optim.param_groups.model.model.layers.1.mlp.up_proj.weight.lr" in keys
    assert json.loads((tmp_path / "engine.json").read_text())["optimizer_layout"] == "flat"
    restored = trained_engine(tiny_model)
    load_engine(restored, tmp_path)
    for got, expected in zip(optimizer_moments(restored), optimizer_moments(engine), strict=True):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_a_checkpoint_with_nested_optimizer_state_still_loads(tiny_model, tmp_path):
    """As written before the flat layout: ``optim.state`` keyed by parameter position
    lists, no ``optimizer_layout`` in engine.json."""
    engine = trained_engine(tiny_model)
    dcp.save(_state(engine, True, flat=False)[0], checkpoint_id=str(tmp_path))
    (tmp_path / "engine.json").write_text(json.dumps({"steps": 1, "with_optimizer": True}))
    restored = TrainEngine(
        PolicyModule(load_causal_lm(tiny_model)),
        device=CPU,
        fsdp=FSDPConfig(),
        optim=OptimConfig(lr=1e-3),
    )
    load_engine(restored, tmp_path)
    assert restored.steps == 1
    for got, expected in zip(optimizer_moments(restored), optimizer_moments(engine), strict=True):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
