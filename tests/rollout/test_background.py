"""Generation beside training: prompts submitted now and taken later while the engine decodes
on; a weight update lands between two decode steps, and the responses in flight either go on
under the new weights (partial rollouts, each token naming its version) or restart from their
prompts under them."""

import asyncio
import time

import pytest

from ascent.models import load_causal_lm, load_tokenizer
from ascent.models.loading import causal_lm_from_config
from ascent.rollout import EngineLimits, NativeEngine, SamplingParams
from ascent.rollout.background import BackgroundBackend
from ascent.rollout.native_backend import NativeBackend

GREEDY = SamplingParams(temperature=0, max_new_tokens=200)
PROMPTS = [[1, 2, 3], [4, 5, 6]]


def engine_of(model, tiny_model):
    return NativeEngine(
        model, EngineLimits(max_num_seqs=8, max_model_len=256), tokenizer=load_tokenizer(tiny_model)
    )


@pytest.fixture
def background(tiny_model):
    backend = NativeBackend(engine_of(load_causal_lm(tiny_model), tiny_model))
    background = BackgroundBackend(backend)
    yield background
    asyncio.run(background.close())  # its loop, then the engine's step thread


@pytest.fixture
def other_weights(tiny_model):
    return causal_lm_from_config(load_causal_lm(tiny_model).config, seed=5)


def wait_until_decoded(engine, tokens):
    """Until every running response has ``tokens`` tokens (both prompts admitted)."""
    scheduler = engine.scheduler
    while scheduler.running < len(PROMPTS) or min(scheduler.generated_lengths()) < tokens:
        time.sleep(0.001)


def test_partial_rollouts_go_on_under_the_new_weights(background, other_weights, tiny_model):
    alone = engine_of(load_causal_lm(tiny_model), tiny_model).generate(PROMPTS, GREEDY)
    background.submit("step-0", PROMPTS, GREEDY)
    wait_until_decoded(background.engine, 30)
    version = background.call(background.refresh_weights(other_weights.named_parameters(), 1))
    samples = background.take("step-0")

    assert version == 1 and [s.prompt_index for s in samples] == [0, 1]
    for sample, old in zip(samples, alone, strict=True):
        switch = sample.weight_versions.index(1)
        assert 30 <= switch < 200, "the update landed while the response was in flight"
        assert set(sample.weight_versions[:switch]) == {0}
        assert set(sample.weight_versions[switch:]) == {1}
        assert sample.token_ids[:switch] == old.token_ids[:switch], "old weights, same tokens"
    assert background.restarted == 0


def test_without_partial_rollouts_responses_restart_under_the_new_weights(
    background, other_weights, tiny_model
):
    fresh = engine_of(causal_lm_from_config(other_weights.config, seed=5), tiny_model)
    expected = fresh.generate(PROMPTS, GREEDY)  # the new weights from the first token
    background.submit("step-0", PROMPTS, GREEDY)
    wait_until_decoded(background.engine, 30)
    background.partial_rollouts = False
    background.call(background.refresh_weights(other_weights.named_parameters(), 1))
    samples = background.take("step-0")

    assert background.restarted == len(PROMPTS)
    for sample, new in zip(samples, expected, strict=True):
        assert set(sample.weight_versions) == {1}, "no response mixes versions"
        assert sample.token_ids == new.token_ids


def test_busy_time_counts_generation_only_and_tags_are_taken_once(background):
    short = GREEDY.model_copy(update={"max_new_tokens": 20})
    background.submit("a", PROMPTS, short)
    with pytest.raises(ValueError, match="submitted already"):
        background.submit("a", PROMPTS, short)
    assert len(background.take("a")) == len(PROMPTS)
    busy = background.busy_seconds()
    assert busy > 0
    time.sleep(0.2)
    assert background.busy_seconds() == busy, "idle time is not busy time"
    with pytest.raises(KeyError):
        background.take("a")
