"""Every model family the native engine runs, against transformers, on a tiny random
checkpoint of each (``tests.families.models``): greedy decoding equals transformers'
``generate`` token for token (sequences joining mid-flight, and all at once); sampled
log-probs equal the trainer's forward; a later turn found in the prefix cache and sequences
preempted for want of blocks give the tokens a fresh engine gives.

The prompts reach past the sliding windows (8) of Gemma 3 and Mistral and past Llama 3's
original context (32), so windows and rope scaling are exercised, not only declared."""

import pytest
import torch

from ascent.models import load_causal_lm, load_tokenizer
from ascent.rollout import EngineLimits, NativeEngine, SamplingParams
from ascent.workers import ActorWorker
from ascent.workers.rollout_samples import SampleRollouts
from tests.families.models import NAMES
from tests.rollout.test_native_engine import hf_greedy, random_prompts
from tests.workers.conftest import in_process
from tests.workers.data import rl_batch
from tests.workers.test_actor import config

GREEDY = SamplingParams(temperature=0, max_new_tokens=12)
PROMPTS = random_prompts([6, 13, 3, 30, 21], seed=4)


def engine_for(path: str, **limits) -> NativeEngine:
    limits = EngineLimits(**{"max_num_seqs": 16, "max_model_len": 96} | limits)
    return NativeEngine(load_causal_lm(path), limits, model_dir=path)


@pytest.mark.parametrize("seats", [2, 16])
@pytest.mark.parametrize("name", NAMES)
def test_greedy_equals_transformers_generate(family_checkpoint, name, seats):
    """seats=2: five prompts through two seats, so sequences join as others finish."""
    path = family_checkpoint(name)
    model = load_causal_lm(path).eval()
    expected = [hf_greedy(model, prompt, 12) for prompt in PROMPTS]
    samples = engine_for(path, max_num_seqs=seats).generate(PROMPTS, GREEDY)
    assert [s.token_ids for s in samples] == expected
    assert len({token for tokens in expected for token in tokens}) > 5, (
        "a model that says one thing"
    )


@pytest.mark.parametrize("name", NAMES)
def test_sampled_log_probs_equal_the_trainers(family_checkpoint, name):
    assert_sampled_log_probs_equal_the_trainers(family_checkpoint(name))


def test_a_soft_cap_is_applied_alike_by_engine_and_trainer(family_checkpoint, tmp_path):
    """Gemma 3 with its head scaled so that logits run far past the cap of 30: the engine
    samples from capped logits and the trainer's fused log-probs cap them the same way."""
    model = load_causal_lm(family_checkpoint("gemma3"))
    with torch.no_grad():
        model.lm_head.weight.mul_(300)
    model.save_pretrained(tmp_path)
    load_tokenizer(family_checkpoint("gemma3")).save_pretrained(tmp_path)
    assert_sampled_log_probs_equal_the_trainers(str(tmp_path))


def assert_sampled_log_probs_equal_the_trainers(path):
    batch = rl_batch(rows=6, seed=1).select("prompts", "uid")
    batch = batch.assign(prompt_mask=(batch["prompts"] != 0).long())  # left padding is 0
    prompts = [row[row != 0].tolist() for row in batch["prompts"]]
    params = SamplingParams(temperature=1.0, max_new_tokens=10, n=2, seed=3)
    samples = engine_for(path).generate(prompts, params)
    rollouts = SampleRollouts(None, pad_id=0, weight_version=lambda: 0).collect(
        batch, samples, params
    )
    with in_process(ActorWorker, config(path)) as actor:
        trained = actor.log_probs(rollouts)["old_log_probs"]
    mask = rollouts["response_mask"].bool()
    assert (trained - rollouts["rollout_log_probs"])[mask].abs().max() < 1e-4


@pytest.mark.parametrize("name", NAMES)
def test_the_prefix_cache_and_preemption_change_nothing(family_checkpoint, name):
    path = family_checkpoint(name)
    model = load_causal_lm(path).eval()
    engine = engine_for(path, max_num_seqs=4)
    prompt = PROMPTS[3]
    response = engine.generate([prompt], GREEDY)[0].token_ids
    next_turn = prompt + response + random_prompts([9], seed=5)[0]
    again = engine.generate([next_turn], GREEDY)[0]
    assert engine.scheduler.admission.reused_tokens >= 32  # two full blocks found cached
    assert again.token_ids == hf_greedy(model, next_turn, 12)

    # A budget of one whole sequence and its next block: four prompts take turns, later
    # ones preempting earlier ones, which are prefilled again (greedy: the draws of a
    # sampled row would depend on which rows share its steps).
    prompts, long_greedy = PROMPTS[1:], SamplingParams(temperature=0, max_new_tokens=30)
    block_bytes = engine.cache.block_bytes
    tight = engine_for(path, max_num_seqs=4, max_model_len=64, kv_cache_bytes=5 * block_bytes)
    got = tight.generate(prompts, long_greedy)
    assert tight.scheduler.preemptions > 0
    assert [s.token_ids for s in got] == [hf_greedy(model, p, 30) for p in prompts]
