"""Settings of the generation service: which engine or server, and how it samples by default
(the RL role's own settings extend these: ``ascent.workers.rollout.RolloutConfig``)."""

from typing import Literal

from pydantic import Field

from ascent.engine.config import Strict
from ascent.rollout.engine_settings import EngineSettings
from ascent.rollout.types import SamplingParams

RolloutEngine = Literal["native", "transformers", "vllm", "serve", "openai"]
ENGINE_HELP = (
    "native (continuous batching, in-process), transformers (reference), vllm (vLLM servers "
    "refreshed every step), serve (`ascent serve` servers: the native engine in processes of "
    "their own, refreshed between decode steps, per-token weight versions), openai (a frozen "
    "OpenAI-compatible endpoint; cannot train)."
)
SERVER_ENGINES = ("vllm", "serve", "openai")
SERVER_HELP = "Servers of the vllm, serve and openai engines (ServerConfig)."


class ServerConfig(Strict):
    """Generation servers in other processes (``engine: vllm``, ``serve`` or ``openai``)."""

    urls: list[str] = Field(
        default_factory=list,
        description="Servers to use (http://host:port). vllm, serve: empty starts one server "
        "per rollout rank from rollout.model; openai: required.",
    )
    model: str | None = Field(
        None, description="openai: the model name the endpoint serves (required there)."
    )
    api_key_env: str = Field(
        "OPENAI_API_KEY", description="openai: the environment variable holding the API key."
    )
    python: str | None = Field(
        None,
        description="vllm: the interpreter with vLLM installed (default: $ASCENT_VLLM_PYTHON, "
        "else ~/.cache/ascent/vllm-venv, which `make vllm-venv` builds).",
    )
    extra_args: list[str] = Field(
        default_factory=list,
        description="vllm: more server arguments, e.g. --gpu-memory-utilization.",
    )
    weights_dir: str | None = Field(
        None,
        description="vllm, serve: where each refresh's safetensors are written for the servers to "
        "read; servers on other machines need a shared filesystem here (default: a new "
        "directory in /dev/shm where it exists, else the temporary directory).",
    )
    startup_timeout_s: float = Field(300.0, gt=0, description="Seconds a server may take to start.")
    request_timeout_s: float = Field(600.0, gt=0, description="Seconds one request may take.")


class GenerationConfig(EngineSettings):
    """The generator: which engine, its servers, how it samples by default; what the engine
    loads and holds at once are ``EngineSettings``' fields."""

    engine: RolloutEngine = Field("native", description=ENGINE_HELP)
    server: ServerConfig = Field(ServerConfig(), description=SERVER_HELP)
    sampling: SamplingParams = Field(
        SamplingParams(), description="Default sampling; a generate call may override fields."
    )
