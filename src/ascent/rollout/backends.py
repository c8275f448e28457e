"""The one place a generation backend is built, whichever engine the config names: the native
engine or the transformers reference in this process, ``ascent serve`` or vLLM servers that
follow the policy, or a frozen OpenAI-compatible endpoint; and what each engine can do
(``engine_capabilities``, ``engine_refuses_model``), read off its backend's declarations, for
the checks a run makes before any worker starts."""

import os

import torch

from ascent.rollout.config import GenerationConfig
from ascent.rollout.engine import NativeEngine, load_generation_model
from ascent.rollout.hf_backend import TransformersBackend
from ascent.rollout.hf_engine import TransformersEngine
from ascent.rollout.http_backend import HTTPBackend, bearer
from ascent.rollout.native_backend import NativeBackend
from ascent.rollout.protocol import Capability, RolloutBackend
from ascent.rollout.serve_backend import ServeBackend, start_serve_backend
from ascent.rollout.vllm_backend import VLLMBackend, start_vllm_backend
from ascent.rollout.weight_files import memory_directory

# The backend each ``rollout.engine`` name starts (``start_backend``).
BACKENDS: dict[str, type[RolloutBackend]] = {
    "native": NativeBackend,
    "transformers": TransformersBackend,
    "vllm": VLLMBackend,
    "serve": ServeBackend,
    "openai": HTTPBackend,
}


def engine_capabilities(engine: str) -> frozenset[Capability]:
    """What the backend of ``rollout.engine=engine`` declares it can do."""
    return BACKENDS[engine].capabilities


def engines_with(*capabilities: Capability) -> list[str]:
    """The engines that can do all of ``capabilities``, in ``BACKENDS`` order."""
    return [name for name, backend in BACKENDS.items() if set(capabilities) <= backend.capabilities]


def engine_refuses_model(engine: str, model_type: str) -> str | None:
    """Why ``rollout.engine=engine`` cannot generate from a model of ``model_type``, or None."""
    return BACKENDS[engine].refuses_model(model_type)


def start_backend(
    config: GenerationConfig, tokenizer: object, rank: int, device: torch.device
) -> RolloutBackend:
    """The backend of ``config.engine`` for generation rank ``rank`` on ``device``: an
    in-process engine (``backend.engine``), or servers (started here unless
    ``server.urls`` lists them; rank r uses URL r mod n), or the configured endpoint."""
    if config.engine == "native":
        return NativeBackend(NativeEngine.load(config, device, tokenizer))
    if config.engine == "transformers":
        model = load_generation_model(config, device)
        engine = TransformersEngine(model, max_num_seqs=config.max_num_seqs, tokenizer=tokenizer)
        return TransformersBackend(engine)
    if config.engine == "openai":
        return frozen_endpoint(config, tokenizer)
    weights_root = config.server.weights_dir or memory_directory(config.model.path)
    start = start_serve_backend if config.engine == "serve" else start_vllm_backend
    return start(config, tokenizer, rank, device, weights_root)


def frozen_endpoint(config: GenerationConfig, tokenizer: object) -> HTTPBackend:
    """``rollout.engine: openai``: an OpenAI-compatible endpoint whose weights never change,
    with the API key from ``server.api_key_env`` when set."""
    server = config.server
    if not server.urls or not server.model:
        raise ValueError("rollout.engine=openai needs rollout.server.urls and rollout.server.model")
    return HTTPBackend(
        server.urls,
        server.model,
        tokenizer=tokenizer,
        request_timeout_s=server.request_timeout_s,
        headers=bearer(os.environ.get(server.api_key_env)),
    )
