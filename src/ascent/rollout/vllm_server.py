"""Starting vLLM OpenAI servers for the rollout role.

vLLM lives in a virtual environment of its own (it pins its own torch and transformers):
``make vllm-venv`` builds one at ``~/.cache/ascent/vllm-venv``; ``ASCENT_VLLM_PYTHON`` or
``rollout.server.python`` names another interpreter.
"""

import os
from pathlib import Path

from ascent.errors import InputNotFound
from ascent.rollout.engine_settings import TRAINING_ONLY, CommandKnobs, EngineSettings, Flag
from ascent.rollout.server_process import SERVED_NAME, ServerProcess, free_port

DEFAULT_VENV = Path.home() / ".cache" / "ascent" / "vllm-venv"


def vllm_python(configured: str | None = None) -> str:
    """The interpreter that has vLLM: the config's, else $ASCENT_VLLM_PYTHON, else the
    default venv's; a clear error when none exists."""
    python = configured or os.environ.get("ASCENT_VLLM_PYTHON") or str(DEFAULT_VENV / "bin/python")
    if not Path(python).exists():
        raise InputNotFound(
            f"no vLLM interpreter at {python}: run `make vllm-venv` (builds {DEFAULT_VENV}), or "
            "set rollout.server.python / ASCENT_VLLM_PYTHON to a python with vllm installed"
        )
    return python


VLLM_KNOBS = CommandKnobs(
    flags={
        "model.path": Flag("--model"),  # named: a bare path makes vLLM look on the hub
        "model.trust_remote_code": Flag("--trust-remote-code", when=True),
        "max_num_seqs": Flag("--max-num-seqs"),
        "max_model_len": Flag("--max-model-len"),
        "kv_cache_bytes": Flag("--kv-cache-memory-bytes"),
        "dtype": Flag("--dtype"),
        "cuda_graphs": Flag("--enforce-eager", when=False),
    },
    not_applicable={
        **TRAINING_ONLY,
        "model.attn_implementation": "vLLM runs attention kernels of its own, chosen by its "
        "--attention-backend, whose names (FLASH_ATTN, ...) are not transformers' "
        "(sdpa, eager, ...); name one in rollout.server.extra_args",
    },
)


def vllm_command(
    python: str,
    settings: EngineSettings,
    port: int,
    *,
    seed: int,
    cpu: bool,
    extra_args: list[str],
    images: bool = False,
) -> list[str]:
    """The server of ``settings`` (flags: ``VLLM_KNOBS``); the seed is the server's, because
    a per-request seed crashes vLLM's CPU engine on chunked prompts. ``images``: the model
    is a vision-language model, whose image prompts need ``/inference/v1/generate``."""
    if cpu:  # graph capture costs minutes of startup on a CPU and gains little there
        settings = settings.model_copy(update={"cuda_graphs": False})
    command = [python, "-m", "vllm.entrypoints.openai.api_server", *VLLM_KNOBS.args(settings)]
    command += ["--served-model-name", SERVED_NAME, "--port", str(port), "--host", "127.0.0.1"]
    command += ["--seed", str(seed), "--logprobs-mode", "processed_logprobs"]
    if images:
        command.append("--enable-scale-out")  # /inference/v1/generate: token ids and images
    return command + list(extra_args)


MIN_CPU_KV_CACHE_BYTES = 64 << 20


def cpu_kv_cache_bytes(model_config: object, max_model_len: int, max_num_seqs: int) -> int:
    """The KV cache a CPU server gets when ``rollout.kv_cache_bytes`` is unset: the most the
    native engine's cache grows to, ``max_num_seqs`` sequences of ``max_model_len`` tokens at
    2 * layers * kv_heads * head_dim * 4 bytes per token (float32, the upper bound), and at
    least 64 MiB for vLLM's block rounding. Left to itself, vLLM's CPU backend reserves 92% of
    the NUMA node's memory and refuses to start when other processes (the trainer) hold some.
    """
    text = model_config.get_text_config()  # a vision-language model's language model
    heads = text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    per_token = 2 * text.num_hidden_layers * kv_heads * head_dim * 4
    return max(MIN_CPU_KV_CACHE_BYTES, per_token * max_model_len * max_num_seqs)


def start_vllm_servers(
    count: int, log_dir: Path, timeout: float, **command_args: object
) -> list[ServerProcess]:
    """Start ``count`` servers on free ports (one after another: each loads the model)."""
    servers = []
    for index in range(count):
        port = free_port()
        command = vllm_command(port=port, **command_args)
        server = ServerProcess(
            command, port, log_dir / f"vllm_{index}.log", env={"VLLM_SERVER_DEV_MODE": "1"}
        )
        try:
            server.start(timeout)
        except Exception:
            for started in servers:
                started.stop()
            raise
        servers.append(server)
    return servers
