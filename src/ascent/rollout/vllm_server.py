"""Starting vLLM OpenAI servers for the rollout role.

vLLM lives in a virtual environment of its own (it pins its own torch and transformers):
``make vllm-venv`` builds one at ``~/.cache/ascent/vllm-venv``; ``ASCENT_VLLM_PYTHON`` or
``rollout.server.python`` names another interpreter.
"""

import os
from pathlib import Path

from ascent.errors import InputNotFound
from ascent.rollout.server_process import ServerProcess, free_port

DEFAULT_VENV = Path.home() / ".cache" / "ascent" / "vllm-venv"
SERVED_NAME = "policy"


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


def vllm_command(
    python: str,
    model_dir: str,
    port: int,
    *,
    max_model_len: int,
    max_num_seqs: int,
    dtype: str,
    seed: int,
    kv_cache_bytes: int | None,
    cpu: bool,
    extra_args: list[str],
) -> list[str]:
    """``--model`` is named (a bare path makes vLLM look on the hub); the seed is the
    server's, because a per-request seed crashes vLLM's CPU engine on chunked prompts."""
    command = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir]
    command += ["--served-model-name", SERVED_NAME, "--port", str(port), "--host", "127.0.0.1"]
    command += ["--max-model-len", str(max_model_len), "--max-num-seqs", str(max_num_seqs)]
    command += ["--dtype", dtype, "--seed", str(seed), "--logprobs-mode", "processed_logprobs"]
    if kv_cache_bytes is not None:
        command += ["--kv-cache-memory-bytes", str(kv_cache_bytes)]
    if cpu:  # graph capture costs minutes of startup on a CPU and gains little there
        command += ["--enforce-eager"]
    return command + list(extra_args)


MIN_CPU_KV_CACHE_BYTES = 64 << 20


def cpu_kv_cache_bytes(model_config: object, max_model_len: int, max_num_seqs: int) -> int:
    """The KV cache a CPU server gets when ``rollout.kv_cache_bytes`` is unset: what the native
    engine would reserve, ``max_num_seqs`` sequences of ``max_model_len`` tokens at
    2 * layers * kv_heads * head_dim * 4 bytes per token (float32, the upper bound), and at
    least 64 MiB for vLLM's block rounding. Left to itself, vLLM's CPU backend reserves 92% of
    the NUMA node's memory and refuses to start when other processes (the trainer) hold some.
    """
    heads = model_config.num_attention_heads
    kv_heads = getattr(model_config, "num_key_value_heads", None) or heads
    head_dim = getattr(model_config, "head_dim", None) or model_config.hidden_size // heads
    per_token = 2 * model_config.num_hidden_layers * kv_heads * head_dim * 4
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
