"""vLLM servers as the rollout backend (``rollout.engine: vllm``)."""

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

import torch
from transformers import AutoConfig

from ascent.rollout.config import GenerationConfig
from ascent.rollout.http_backend import PolicyServers
from ascent.rollout.vllm_server import (
    SERVED_NAME,
    cpu_kv_cache_bytes,
    start_vllm_servers,
    vllm_python,
)


class VLLMBackend(PolicyServers):
    """vLLM OpenAI servers (started in dev mode, ``VLLM_SERVER_DEV_MODE=1``) that follow the
    trained policy: a refresh reloads every server in place (``/collective_rpc``
    ``reload_weights``), drops prefix-cache entries computed with the old weights, and sets
    the server's version. vLLM reports no per-token weight version, so a response's tokens
    carry the version current when its request was sent: one that spanned a refresh in
    flight (``pause("keep")``, reload, ``resume``: trainer.mode async) is counted as old as it
    can be, never younger than it is."""

    name = "vLLM backend"

    async def _load(self, path: str, indices: Iterable[int], version: int) -> None:
        rpc = {"method": "reload_weights", "kwargs": {"weights_path": str(path)}}
        for index in indices:
            await self._post(index, "/collective_rpc", rpc)
            await self._post(index, "/reset_prefix_cache")
            await self._post(index, "/update_weight_version", {"new_version": str(version)})


def start_vllm_backend(
    config: GenerationConfig, tokenizer: object, rank: int, device: torch.device, weights_root: str
) -> VLLMBackend:
    """Rollout rank ``rank``'s vLLM server: ``rollout.server.urls[rank mod n]`` if listed,
    else one started here (restarted if it dies)."""
    server = config.server
    if server.urls:
        url = server.urls[rank % len(server.urls)]
        return VLLMBackend(
            [url],
            server.model or SERVED_NAME,
            tokenizer=tokenizer,
            request_timeout_s=server.request_timeout_s,
            weights_root=weights_root,
        )
    # The trainer derives max_model_len as prompt + response limits; vLLM refuses one beyond
    # the model's positions, where the native engine would never reach anyway.
    model_config = AutoConfig.from_pretrained(
        config.model.path, trust_remote_code=config.model.trust_remote_code
    )
    positions = getattr(model_config, "max_position_embeddings", None)
    max_model_len = min(config.max_model_len, positions or config.max_model_len)
    cpu = device.type == "cpu"
    kv_cache_bytes = config.kv_cache_bytes
    if kv_cache_bytes is None and cpu:
        kv_cache_bytes = cpu_kv_cache_bytes(model_config, max_model_len, config.max_num_seqs)
    settings = config.model_copy(
        update={"max_model_len": max_model_len, "kv_cache_bytes": kv_cache_bytes}
    )
    log_dir = Path(tempfile.gettempdir()) / "ascent-vllm-logs" / f"{os.getpid()}-rank{rank}"
    processes = start_vllm_servers(
        1,
        log_dir,
        server.startup_timeout_s,
        python=vllm_python(server.python),
        settings=settings,
        seed=config.sampling.seed or 0,
        cpu=cpu,
        extra_args=server.extra_args,
    )
    return VLLMBackend(
        [p.url for p in processes],
        SERVED_NAME,
        tokenizer=tokenizer,
        request_timeout_s=server.request_timeout_s,
        processes=processes,
        startup_timeout_s=server.startup_timeout_s,
        weights_root=weights_root,
    )
