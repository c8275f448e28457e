"""``ascent service``'s settings come from ascent's config tree: a checkpoint directory or a
YAML file, dotted overrides, errors that name the key; what clients choose is refused in it;
the ranks' outputs are merged back in the call's order; sessions end once and then refuse."""

import asyncio
import subprocess
import sys

import pytest
import torch

from ascent.config import ConfigError
from ascent.service.config import load_service_config
from ascent.service.model_worker import RankOutputs, merge_outputs
from ascent.service.sessions import SessionFinished, Sessions


def test_a_checkpoint_directory_is_a_config_of_its_path(tiny_model):
    config = load_service_config(tiny_model, ["resources.devices_per_node=2"])
    assert config.model.path == tiny_model
    assert config.resources.world_size == 2
    assert config.training.tokens_per_micro_batch == 8192  # the default


def test_a_yaml_config_with_overrides(tiny_model, tmp_path):
    path = tmp_path / "service.yaml"
    path.write_text(
        f"model:\n  path: {tiny_model}\nname: mine\ntraining:\n  tokens_per_micro_batch: 512\n"
        "sampling:\n  max_model_len: 256\n  engines: 1\n"
    )
    config = load_service_config(str(path), ["training.chunk_tokens=64"])
    assert (config.name, config.served_name()) == ("mine", "mine")
    assert config.training.tokens_per_micro_batch == 512
    assert config.training.chunk_tokens == 64
    assert (config.sampling.max_model_len, config.sampling.engines) == (256, 1)


def test_bad_settings_name_the_key(tiny_model):
    with pytest.raises(ConfigError, match=r"training\.tokens_per_micro_batc.*did you mean"):
        load_service_config(tiny_model, ["training.tokens_per_micro_batc=4"])
    with pytest.raises(ConfigError, match="a Tinker client chooses LoRA"):
        load_service_config(tiny_model, ["model.lora.rank=8"])


def test_the_command_reports_a_bad_key_without_a_traceback(tiny_model):
    done = subprocess.run(
        [sys.executable, "-m", "ascent", "service", tiny_model, "resources.devices=2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "resources.devices" in done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_rank_outputs_go_back_in_the_calls_order():
    parts = [
        RankOutputs([2, 0], [torch.tensor([2.0]), torch.tensor([0.0])], 1.5),
        RankOutputs([1], [torch.tensor([1.0])], 0.5),
        RankOutputs([], [], 0.0),  # a rank that only ran filler passes
    ]
    outputs, metrics = merge_outputs(parts, 3)
    assert [float(out) for out in outputs] == [0.0, 1.0, 2.0]
    assert metrics == {"loss:sum": 2.0}
    with pytest.raises(RuntimeError, match=r"no rank scored datums \[3\]"):
        merge_outputs(parts, 4)


def test_a_session_ends_once_and_then_refuses():
    sessions = Sessions(timeout_s=60)
    first, second = sessions.new(), sessions.new()
    assert first != second and Sessions(60).new() != first  # unique across server runs
    assert sessions.finish(first) and not sessions.finish(first)
    with pytest.raises(SessionFinished, match="has finished"):
        sessions.beat(first)
    sessions.beat(second)
    assert sessions.silent() == []
    sessions.timeout_s = 0.0
    assert sessions.silent() == [second]


def test_a_silent_session_is_ended_while_the_server_runs(tiny_model):
    from ascent.service.app import lifespan
    from ascent.service.state import ServiceState

    state = ServiceState(load_service_config(tiny_model, ["session_timeout_s=0.2"]))
    silent, beating = state.sessions.new(), state.sessions.new()

    async def run() -> None:
        async with lifespan(state):
            for _ in range(20):
                state.sessions.beat(beating)
                await asyncio.sleep(0.05)

    asyncio.run(run())
    assert silent in state.sessions.finished and beating not in state.sessions.finished


def test_the_lora_switches_choose_the_adapted_modules(tiny_model, tiny_tied_model):
    from ascent.models import load_causal_lm
    from ascent.service.lora_config import lora_settings
    from ascent.service.wire import WireError

    untied, tied = load_causal_lm(tiny_model), load_causal_lm(tiny_tied_model)
    every = lora_settings({"rank": 4}, 32.0, untied)  # the SDK's switches default to on
    assert "lm_head" in every.target_modules and "q_proj" in every.target_modules
    assert every.alpha == 32.0 and every.rank == 4
    assert "lm_head" not in lora_settings({"rank": 4}, 32.0, tied).target_modules
    head_only = lora_settings({"rank": 4, "train_attn": False, "train_mlp": False}, 8.0, untied)
    assert head_only.target_modules == ["lm_head"]
    with pytest.raises(WireError, match="trains nothing"):
        lora_settings({"rank": 4, "train_attn": False, "train_mlp": False}, 8.0, tied)
