"""On the real model, every generator ascent can drive gives the same greedy tokens for chat
prompts: the native engine, the transformers reference engine, ``ascent serve`` and vLLM's
CPU build (``make vllm-venv``; left out without it). (That the native engine's sampled
log-probs are the trainer's is checked every RL step: ``test_training``.)"""

import asyncio
import sys

import pytest

from ascent.models import load_causal_lm, load_tokenizer
from ascent.rollout import NativeEngine, SamplingParams
from ascent.rollout.engine_settings import EngineSettings
from ascent.rollout.hf_engine import TransformersEngine
from ascent.rollout.http_backend import HTTPBackend
from ascent.rollout.server_process import ServerProcess, free_port
from ascent.rollout.vllm_backend import VLLMBackend
from ascent.rollout.vllm_server import SERVED_NAME, start_vllm_servers, vllm_python

pytestmark = [pytest.mark.slow, pytest.mark.integration]
QUESTIONS = [
    "What is the capital of France?",
    "What is 12 + 7? Answer with the number only.",
    "Write one sentence about the sea.",
    "List three colours.",
]


def chat_prompts(tokenizer):
    prompts = []
    for question in QUESTIONS:
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": question}], add_generation_prompt=True
        )
        prompts.append(list(rendered["input_ids"] if hasattr(rendered, "keys") else rendered))
    return prompts


def test_native_transformers_serve_and_vllm_agree_greedily(smollm2, tmp_path):
    tokenizer = load_tokenizer(smollm2)
    prompts = chat_prompts(tokenizer)
    # Servers stop at the model's end-of-turn token by default: every engine is told to.
    greedy = SamplingParams(
        temperature=0, max_new_tokens=24, stop_token_ids=[tokenizer.eos_token_id]
    )
    model = load_causal_lm(smollm2)
    native = NativeEngine(model, max_num_seqs=4, max_model_len=256).generate(prompts, greedy)
    reference = TransformersEngine(model, max_num_seqs=4).generate(prompts, greedy)
    port = free_port()
    command = [sys.executable, "-m", "ascent", "serve", smollm2, "--port", str(port)]
    served = ServerProcess([*command, "--max-model-len", "256"], port, tmp_path / "serve.log")
    served.start(180)
    try:
        through_serve = HTTPBackend([served.url], smollm2).generate_batch(prompts, greedy)
    finally:
        served.stop()
    engines = {"transformers": reference, "serve": through_serve}
    try:
        python = vllm_python()
    except FileNotFoundError:
        python = None  # vLLM's venv is not built: the other three still must agree
    if python is not None:
        [server] = start_vllm_servers(
            1,
            tmp_path / "vllm-logs",
            400,
            python=python,
            settings=EngineSettings(
                model={"path": smollm2},
                max_model_len=256,
                max_num_seqs=4,
                dtype="float32",
                kv_cache_bytes=64 * 2**20,
            ),
            seed=0,
            cpu=True,
            extra_args=[],
        )
        vllm = VLLMBackend([server.url], SERVED_NAME, processes=[server])
        try:
            engines["vllm"] = vllm.generate_batch(prompts, greedy)
        finally:
            asyncio.run(vllm.close())
    for name, samples in engines.items():
        got = [s.token_ids for s in samples]
        assert got == [s.token_ids for s in native], name
    assert "Paris" in tokenizer.decode(native[0].token_ids)
