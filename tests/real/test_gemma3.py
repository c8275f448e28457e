"""Gemma 3 270M, the second real model: the native engine runs it (sliding-window and global
layers, the 262k-row tied head) and generates what transformers generates; its samples'
log-probs are the trainer's; a base model without a chat template refuses chat rows with a
message that says what to do, and trains on raw-text prompts: GRPO steps with the native
engine colocated, the rollout/trainer mismatch small after each refresh."""

import json

import pytest
import torch

from ascent.config import load_config
from ascent.data.rl import load_rl_prompts
from ascent.errors import InputError
from ascent.models import load_causal_lm, load_tokenizer
from ascent.rollout import EngineLimits, NativeEngine, SamplingParams
from ascent.trainer.rl.config import RLConfig
from ascent.trainer.rl.loop import train_rl
from ascent.workers import ActorWorker
from ascent.workers.rollout_samples import SampleRollouts
from tests.rollout.test_native_engine import hf_greedy
from tests.workers.conftest import in_process
from tests.workers.test_actor import config as actor_config

TEXTS = ["The capital of France is", "def fibonacci(n):", "7 + 5 ="]


# The engine's and the trainer's agreement on Gemma 3's layers is in make test on the tiny
# Gemma 3 (tests/families: its sliding window is exceeded there, not here); on real weights,
# on SmolLM2 (tests/real/test_engines_agree.py). These runs on the 270M model: make test-slow.
@pytest.mark.slow
def test_the_native_engine_generates_what_transformers_generates(gemma3):
    tokenizer = load_tokenizer(gemma3)
    assert tokenizer.chat_template is None  # a base model's GGUF carries none
    model = load_causal_lm(gemma3).eval()
    prompts = [tokenizer(text).input_ids for text in TEXTS]
    engine = NativeEngine(
        load_causal_lm(gemma3), EngineLimits(max_num_seqs=4, max_model_len=256), model_dir=gemma3
    )
    windows = {layer.attention.kernel.window for layer in engine.runner.layers}
    assert windows == {512, None}  # sliding and global layers
    samples = engine.generate(prompts, SamplingParams(temperature=0, max_new_tokens=16))
    assert [s.token_ids for s in samples] == [hf_greedy(model, p, 16) for p in prompts]


@pytest.mark.slow
def test_sampled_log_probs_equal_the_trainers(gemma3):
    tokenizer = load_tokenizer(gemma3)
    prompts = [tokenizer(text).input_ids for text in TEXTS]
    engine = NativeEngine(
        load_causal_lm(gemma3), EngineLimits(max_num_seqs=8, max_model_len=128), model_dir=gemma3
    )
    params = SamplingParams(temperature=1.0, max_new_tokens=8, n=2, seed=0)
    samples = engine.generate(prompts, params)
    width = max(map(len, prompts))
    rows = torch.zeros(len(prompts), width, dtype=torch.long)
    for row, prompt in enumerate(prompts):
        rows[row, width - len(prompt) :] = torch.tensor(prompt)
    from ascent.batch import Batch

    batch = Batch.from_dict(
        {"prompts": rows, "prompt_mask": (rows != 0).long(), "uid": [str(i) for i in range(3)]}
    )
    rollouts = SampleRollouts(None, pad_id=0, weight_version=lambda: 0).collect(
        batch, samples, params
    )
    with in_process(ActorWorker, actor_config(gemma3)) as actor:
        trained = actor.log_probs(rollouts)["old_log_probs"]
    mask = rollouts["response_mask"].bool()
    assert (trained - rollouts["rollout_log_probs"])[mask].abs().max() < 1e-3


def run_config(gemma3, task, run_dir, *overrides):
    return load_config(
        RLConfig,
        None,
        [
            f"model.path={gemma3}",
            f"data.train_files=[{task['train']}]",
            "data.prompts_per_step=2",
            "data.chat_template=false",
            "rollout.samples_per_prompt=4",
            "rollout.max_response_length=8",
            "algorithm.name=grpo",
            "algorithm.kl.mode=none",
            "actor.optim.lr=1e-5",
            "actor.tokens_per_micro_batch=256",
            "reward.workers=0",
            f"trainer.run_dir={run_dir}",
            "trainer.total_steps=2",
            "trainer.val_every=0",
            "trainer.val_at_start=false",
            "trainer.progress_bar=false",
            "trainer.export=false",
            "trainer.resume=off",
            "tracking.sinks=[jsonl]",
            *overrides,
        ],
    )


def test_chat_rows_are_refused_for_a_model_without_a_chat_template(gemma3, real_task, tmp_path):
    with pytest.raises(InputError, match=r"no chat template \(.*data\.chat_template=false"):
        train_rl(run_config(gemma3, real_task, tmp_path, "data.chat_template=true"))


# About 40 s. In make test: the tiny Gemma 3's GRPO steps and refresh (tests/families), raw-text
# prompts (every toy-task run) and stop strings (tests/rollout).
@pytest.mark.slow
def test_grpo_steps_on_raw_text_prompts(gemma3, raw_task, tmp_path):
    """Two steps of 2 prompts x 4 samples: the engine samples with the actor's weights
    (aliased, one rank), stops at the end of the answer's line, and its log-probs agree
    with the trainer's before and after the first update."""
    run = run_config(gemma3, raw_task, tmp_path, 'rollout.stop=["\\n"]')  # YAML: a newline
    tokenizer = load_tokenizer(gemma3)
    prompts, _ = load_rl_prompts(run.data.train_files, tokenizer, run.data)
    assert prompts[0].prompt_ids[0] == tokenizer.bos_token_id  # raw text, read as usual
    train_rl(run)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "timing_s/step" in r]
    assert len(steps) == 2
    assert max(r["actor/rollout_mismatch_max_abs"] for r in steps) < 1e-3
    generations = [
        json.loads(line) for line in (tmp_path / "generations.jsonl").read_text().splitlines()
    ]
    assert all(g["prompt"].startswith("<bos>") and g["prompt"].endswith(" =") for g in generations)
    stopped = [g["response"] for g in generations if g["response"].endswith("\n")]
    assert stopped and all("\n" not in r.rstrip("\n") for r in stopped), "stopped at a line's end"
