"""One declaration per engine knob (issue 31): every ``EngineSettings`` field, set to a value
other than its default, reaches every backend (the native engine's object, ``ascent serve``'s
command line and what the server parses from it, the vLLM command line) or is declared not
applicable there. A field added without a backend mapping fails here."""

import json
import subprocess
import sys

import pytest
import torch

from ascent.models import build_tiny_model
from ascent.rollout import NativeEngine
from ascent.rollout.backends import start_backend
from ascent.rollout.engine_settings import (
    EngineSettings,
    setting_field,
    setting_names,
    setting_value,
)
from ascent.rollout.serve_args import SERVE_KNOBS
from ascent.rollout.serve_backend import serve_command
from ascent.rollout.server_process import ServerProcess
from ascent.rollout.vllm_server import DEFAULT_VENV, VLLM_KNOBS
from ascent.workers.rollout import RolloutConfig

# The checkpoint's own modelling code (loaded only with trust_remote_code), under a class
# name the native engine supports.
REMOTE_CODE = """from transformers import Qwen2ForCausalLM as Base


class Qwen2ForCausalLM(Base):
    pass
"""


def changed(model_dir: str) -> dict[str, object]:
    """A value other than the default for every setting (the path has none)."""
    return {
        "model.path": model_dir,
        "model.trust_remote_code": True,
        "model.attn_implementation": "eager",
        "model.gradient_checkpointing": True,
        "model.lora": {"rank": 4},
        "model.packing": "padded",
        "model.vision_tower": "freeze",
        "max_num_seqs": 3,
        "max_model_len": 96,
        "kv_cache_bytes": 1 << 30,
        "dtype": "bfloat16",
        "cuda_graphs": False,
    }


def nested(values: dict[str, object]) -> dict:
    tree: dict = {}
    for name, value in values.items():
        *parents, leaf = name.split(".")
        node = tree
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = value
    return tree


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tiny checkpoint that names modelling code of its own (``auto_map``)."""
    directory = build_tiny_model(tmp_path_factory.mktemp("knobs") / "model")
    (directory / "remote_lm.py").write_text(REMOTE_CODE)
    config = json.loads((directory / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "remote_lm.Qwen2ForCausalLM"}
    (directory / "config.json").write_text(json.dumps(config))
    return str(directory)


@pytest.fixture(scope="module")
def settings(model_dir):
    return EngineSettings.model_validate(nested(changed(model_dir)))


def test_every_setting_is_changed_here_from_its_default(model_dir):
    values = changed(model_dir)
    assert sorted(values) == sorted(setting_names()), "a new setting needs a value in changed()"
    for name, value in values.items():
        assert value != setting_field(name).default, name


@pytest.mark.parametrize(
    "backend, declared",
    [
        ("native", lambda: (NATIVE_OBSERVED, NativeEngine.not_applicable)),
        ("serve", lambda: (SERVE_KNOBS.flags, SERVE_KNOBS.not_applicable)),
        ("vllm", lambda: (VLLM_KNOBS.flags, VLLM_KNOBS.not_applicable)),
    ],
)
def test_every_backend_applies_every_setting_or_says_why_not(backend, declared):
    applied, not_applicable = declared()
    assert not set(applied) & set(not_applicable), f"{backend}: applied and not applicable"
    missing = set(setting_names()) - set(applied) - set(not_applicable)
    assert not missing, f"{backend} neither applies nor declares not applicable: {missing}"
    assert all(reason for reason in not_applicable.values())


# How each setting shows on a native engine; the rest is NativeEngine.not_applicable.
NATIVE_OBSERVED = {
    "model.path": lambda engine: engine.model.name_or_path,
    "model.trust_remote_code": lambda engine: type(engine.model).__module__.endswith("remote_lm"),
    "model.attn_implementation": lambda engine: engine.model.config._attn_implementation,
    "max_num_seqs": lambda engine: engine.scheduler.max_num_seqs,
    "max_model_len": lambda engine: engine.max_model_len,
    "kv_cache_bytes": lambda engine: engine.cache.limit * engine.cache.block_bytes,
    "dtype": lambda engine: str(engine.dtype).removeprefix("torch."),
    "cuda_graphs": lambda engine: engine.cuda_graphs,
}


def assert_native_engine_has(engine: NativeEngine, settings: EngineSettings) -> None:
    """Every applicable setting shows on ``engine``; kv_cache_bytes as the cache's limit
    (whole blocks of it)."""
    expected = {name: setting_value(settings, name) for name in NATIVE_OBSERVED}
    block = engine.cache.block_bytes
    expected["kv_cache_bytes"] = expected["kv_cache_bytes"] // block * block
    observed = {name: look(engine) for name, look in NATIVE_OBSERVED.items()}
    assert observed == expected


def test_the_native_engine_takes_every_setting(settings):
    assert_native_engine_has(NativeEngine.load(settings, torch.device("cpu")), settings)


def test_ascent_serve_parses_every_setting_from_its_command_and_builds_the_engine(
    settings, monkeypatch
):
    """The command the serve backend builds, parsed by the real ``ascent`` command line;
    the server builds its engine from what it parsed (uvicorn is not started)."""
    import uvicorn

    from ascent.cli import main

    command = serve_command(settings, 8000, device=torch.device("cpu"), seed=0, request_timeout_s=5)
    engines, load = [], NativeEngine.load

    def spy(*args: object) -> NativeEngine:
        engines.append(load(*args))
        return engines[-1]

    monkeypatch.setattr(NativeEngine, "load", staticmethod(spy))
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: None)
    assert main(command[command.index("serve") :]) == 0
    assert_native_engine_has(engines[0], settings)


class Captured(Exception):
    """Stops a server start at its command line."""


def vllm_command_of(config: RolloutConfig, monkeypatch) -> list[str]:
    """The command the rollout role's vllm backend would start for ``config`` (on a GPU)."""

    def capture(process: ServerProcess, timeout: float) -> None:
        raise Captured(process.command)

    monkeypatch.setattr(ServerProcess, "start", capture)
    with pytest.raises(Captured) as captured:
        start_backend(config, None, 0, torch.device("cuda"))
    return captured.value.args[0]


@pytest.fixture
def vllm_command(settings, monkeypatch):
    config = RolloutConfig.model_validate(
        {**settings.model_dump(), "engine": "vllm", "server": {"python": sys.executable}}
    )
    return vllm_command_of(config, monkeypatch)


def test_the_vllm_command_carries_every_applicable_setting(settings, vllm_command):
    for name, flag in VLLM_KNOBS.flags.items():
        args = flag.args(setting_value(settings, name))
        assert args, f"{name}: {flag.name} is not given for a changed value"
        at = vllm_command.index(args[0])
        assert vllm_command[at : at + len(args)] == args, name


VLLM_PYTHON = DEFAULT_VENV / "bin/python"
PARSE = """
import json, sys
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
args = make_arg_parser(FlexibleArgumentParser()).parse_args(sys.argv[1:])
print(json.dumps({k: v for k, v in vars(args).items() if isinstance(v, (bool, int, str))}))
"""


@pytest.mark.slow
@pytest.mark.skipif(not VLLM_PYTHON.exists(), reason="no vLLM venv (make vllm-venv)")
def test_vllm_itself_reads_every_applicable_setting_from_the_command(settings, vllm_command):
    """vLLM's own argument parser, so a flag name we got wrong fails here."""
    argv = vllm_command[vllm_command.index("--model") :]
    done = subprocess.run(
        [str(VLLM_PYTHON), "-c", PARSE, *argv], capture_output=True, text=True, check=True
    )
    parsed = json.loads(done.stdout.strip().splitlines()[-1])
    for name, flag in VLLM_KNOBS.flags.items():
        value = setting_value(settings, name)
        dest = flag.name.removeprefix("--").replace("-", "_")
        expected = value == flag.when if flag.when is not None else value
        assert parsed[dest] == expected, name
