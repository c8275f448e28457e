"""vLLM servers as the rollout backend (``rollout.engine: vllm``)."""

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

import torch
from torch import Tensor
from transformers import AutoConfig

from ascent.moe.checkpoint import per_expert_names
from ascent.rollout.config import GenerationConfig
from ascent.rollout.http_backend import PolicyServers
from ascent.rollout.protocol import Capability, TokenOut, refuse_images
from ascent.rollout.server_process import SERVED_NAME
from ascent.rollout.types import SamplingParams
from ascent.rollout.vllm_server import cpu_kv_cache_bytes, start_vllm_servers, vllm_python
from ascent.vision.prompts import collapse_image_runs, image_token_id, is_vision_language


class VLLMBackend(PolicyServers):
    """vLLM OpenAI servers (started in dev mode, ``VLLM_SERVER_DEV_MODE=1``) that follow the
    trained policy: a refresh reloads every server in place (``/collective_rpc``
    ``reload_weights``), drops prefix-cache entries computed with the old weights, and sets
    the server's version. vLLM reports no per-token weight version, so a response's tokens
    carry the version current when its request was sent: one that spanned a refresh in
    flight (``pause("keep")``, reload, ``resume``: trainer.mode async) is counted as old as it
    can be, never younger than it is.

    Prompts with images (a vision-language model, ``image_token_id`` given) go to
    ``/inference/v1/generate``, vLLM's one route that takes token ids and images together
    (the server runs with ``--enable-scale-out``): the ids with each image's run of image
    tokens cut to one (vLLM expands them from its own processing of the image), the images
    as ``image_url`` content parts (data URLs). vLLM answers with the prompt as it expanded
    it, which must equal ours token for token: otherwise its processor saw the images at
    other sizes, and the response would not belong to the prompt the trainer scores."""

    name = "vLLM backend"
    capabilities = PolicyServers.capabilities | {Capability.IMAGES}

    def __init__(self, *args: object, image_token_id: int | None = None, **kwargs: object):
        super().__init__(*args, **kwargs)
        self.image_token_id = image_token_id

    async def refresh_weights(
        self,
        named_tensors: Iterable[tuple[str, Tensor]],
        version: int,
        *,
        alias: bool = False,
    ) -> int:
        """As ``PolicyServers``, under the checkpoint's names: vLLM loads by them, and skips
        a mixture of experts' fused tensors without a word (``ascent.moe.checkpoint``)."""
        return await super().refresh_weights(per_expert_names(named_tensors), version, alias=alias)

    async def generate_n(
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        session_id: str | None = None,
        images: list[str] | None = None,
    ) -> list[TokenOut]:
        if not images:
            return await super().generate_n(prompt_ids, sampling, session_id)
        if self.image_token_id is None:
            refuse_images(self, images)
        index = self._pick(session_id)
        started = self._version()
        answer = await self._send(
            index, "/inference/v1/generate", self._image_body(prompt_ids, sampling, images)
        )
        if answer.get("prompt_token_ids") != list(prompt_ids):
            raise RuntimeError(
                f"{self.urls[index]} expanded a prompt's {len(images)} image(s) to "
                f"{len(answer.get('prompt_token_ids') or [])} prompt tokens, not the "
                f"{len(prompt_ids)} the trainer has: vLLM's image processor sized them "
                "differently from the checkpoint's (compare preprocessor_config.json and the "
                "transformers versions of the two environments)"
            )
        outs = []
        for choice in sorted(answer["choices"], key=lambda c: c["index"]):
            entries = (choice.get("logprobs") or {}).get("content") or []
            versions = self._token_versions(index, choice, started)
            log_probs = [entry["logprob"] for entry in entries]
            outs.append(TokenOut(choice["token_ids"], log_probs, choice["finish_reason"], versions))
        return outs

    def _image_body(
        self, prompt_ids: list[int], sampling: SamplingParams, images: list[str]
    ) -> dict:
        """The ``/inference/v1/generate`` request: the completions body's sampling fields as
        vLLM's ``sampling_params``."""
        completion = self._body(prompt_ids, sampling)
        return {
            "model": completion.pop("model"),
            "token_ids": collapse_image_runs(completion.pop("prompt"), self.image_token_id),
            "content_parts": [{"type": "image_url", "url": url} for url in images],
            "return_token_ids": completion.pop("return_token_ids"),
            "sampling_params": completion,
        }

    async def _load(self, path: str, indices: Iterable[int], version: int) -> None:
        rpc = {"method": "reload_weights", "kwargs": {"weights_path": str(path)}}
        for index in indices:
            await self._post(index, "/collective_rpc", rpc)
            await self._post(index, "/reset_prefix_cache")
            if self.image_token_id is not None:  # image features of the old vision tower
                await self._post(index, "/reset_encoder_cache")
            await self._post(index, "/update_weight_version", {"new_version": str(version)})


def start_vllm_backend(
    config: GenerationConfig, tokenizer: object, rank: int, device: torch.device, weights_root: str
) -> VLLMBackend:
    """Rollout rank ``rank``'s vLLM server: ``rollout.server.urls[rank mod n]`` if listed,
    else one started here (restarted if it dies)."""
    server = config.server
    model_config = AutoConfig.from_pretrained(
        config.model.path, trust_remote_code=config.model.trust_remote_code
    )
    images = image_token_id(model_config) if is_vision_language(model_config) else None
    if server.urls:
        url = server.urls[rank % len(server.urls)]
        return VLLMBackend(
            [url],
            server.model or SERVED_NAME,
            tokenizer=tokenizer,
            request_timeout_s=server.request_timeout_s,
            weights_root=weights_root,
            image_token_id=images,
        )
    if device.type == "cpu":  # a server started here, on this CPU
        refuse_cpu_experts(model_config, config.model.path)
    # The trainer derives max_model_len as prompt + response limits; vLLM refuses one beyond
    # the model's positions, where the native engine would never reach anyway.
    positions = getattr(model_config.get_text_config(), "max_position_embeddings", None)
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
        images=images is not None,
    )
    return VLLMBackend(
        [p.url for p in processes],
        SERVED_NAME,
        tokenizer=tokenizer,
        request_timeout_s=server.request_timeout_s,
        processes=processes,
        startup_timeout_s=server.startup_timeout_s,
        weights_root=weights_root,
        image_token_id=images,
    )


def refuse_cpu_experts(model_config: object, path: str) -> None:
    """ValueError for a mixture-of-experts model: vLLM's CPU build cannot follow it through
    training (vLLM 0.32 reloads its prepacked expert weights wrongly in place: measured,
    log-probs up to 0.03 off after a refresh, exact after a cold start on the same weights).
    """
    if getattr(model_config.get_text_config(), "num_experts", 0):
        raise ValueError(
            f"{path} is a mixture-of-experts model, which vLLM's CPU build cannot follow "
            "through training: it reloads its prepacked expert weights wrongly in place "
            "(vLLM 0.32, measured: log-probs up to 0.03 off after a refresh, exact after a "
            "cold start). Generate with rollout.engine=native"
        )
