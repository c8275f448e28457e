"""On the real model, every generator ascent can drive gives the same greedy tokens for chat
prompts: the native engine, the transformers reference engine, ``ascent serve`` and vLLM's
CPU build (``make vllm-venv``; skipped without it). The two in-process engines are compared in
``make test``; the two servers (a process each, vLLM about a minute to start) in
``make test-slow``. (That the native engine's sampled log-probs are the trainer's is checked
every RL step: ``test_training``.)"""

import pytest

from ascent.models import load_causal_lm, load_tokenizer
from ascent.rollout import EngineLimits, NativeEngine, SamplingParams
from ascent.rollout.hf_engine import TransformersEngine
from ascent.rollout.http_backend import HTTPBackend
from ascent.rollout.vllm_server import vllm_python
from tests.servers import ascent_serve, vllm_server

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


@pytest.fixture(scope="module")
def native_run(smollm2):
    """The chat prompts, greedy settings that stop at the end-of-turn token (servers stop there
    by default: every engine is told to), the model, and the native engine's tokens."""
    tokenizer = load_tokenizer(smollm2)
    prompts = chat_prompts(tokenizer)
    greedy = SamplingParams(
        temperature=0, max_new_tokens=24, stop_token_ids=[tokenizer.eos_token_id]
    )
    model = load_causal_lm(smollm2)
    native = NativeEngine(model, EngineLimits(max_num_seqs=4, max_model_len=256)).generate(
        prompts, greedy
    )
    assert "Paris" in tokenizer.decode(native[0].token_ids)
    return prompts, greedy, model, [s.token_ids for s in native]


def test_the_transformers_engine_generates_the_native_engines_tokens(native_run):
    prompts, greedy, model, native = native_run
    reference = TransformersEngine(model, max_num_seqs=4).generate(prompts, greedy)
    assert [s.token_ids for s in reference] == native


@pytest.mark.slow
@pytest.mark.integration
def test_ascent_serve_generates_the_native_engines_tokens(native_run, smollm2, tmp_path):
    prompts, greedy, _, native = native_run
    with ascent_serve(smollm2, tmp_path / "serve.log", "--max-model-len", "256", timeout=180) as s:
        served = HTTPBackend([s.url], smollm2).generate_batch(prompts, greedy)
    assert [s.token_ids for s in served] == native


@pytest.mark.slow
@pytest.mark.integration
def test_vllm_generates_the_native_engines_tokens(native_run, smollm2, tmp_path):
    try:
        python = vllm_python()
    except FileNotFoundError as missing:
        pytest.skip(str(missing))
    prompts, greedy, _, native = native_run
    with vllm_server(smollm2, tmp_path / "vllm-logs", python, 4, timeout=400) as vllm:
        served = vllm.generate_batch(prompts, greedy)
    assert [s.token_ids for s in served] == native
