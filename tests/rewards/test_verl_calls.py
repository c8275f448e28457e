"""Scoring functions are called as verl calls them (by keyword), so verl's own scorers work
unchanged; a signature verl could not call is refused at start; numpy scalars are numbers."""

from pathlib import Path

import pytest

from ascent.rewards.call import score_sample
from ascent.rewards.manager import RewardConfig, RewardManager
from ascent.rewards.signature import verl_call
from tests.rewards.batches import scored_batch

VERL_GSM8K = Path(__file__).with_name("verl_gsm8k.py")


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize(
    "spec",
    [f"{VERL_GSM8K}:compute_score", "tests.rewards.verl_gsm8k:compute_score"],
    ids=["file", "module"],
)
def test_verl_per_source_scorer_works_unchanged(tokenizer, spec, workers):
    # verl's gsm8k.compute_score(solution_str, ground_truth, method="strict", ...): a
    # positional call put the ground truth in `method` and failed its assert on every sample.
    manager = RewardManager(RewardConfig(function=spec, workers=workers), tokenizer)
    responses = ["3 + 4 = 7\n#### 7", "#### 72.0", "no final answer"]
    try:
        batch, counts = manager.score(scored_batch(tokenizer, ["7", "72", "7"], responses))
    finally:
        manager.close()
    assert batch["scores"].tolist() == [1.0, 0.0, 0.0]
    assert counts == {"reward/errors": 0.0, "reward/timeouts": 0.0, "reward/non_finite": 0.0}


def verl_form(data_source, solution_str, ground_truth, extra_info=None):
    return locals()


def per_source_form(solution_str, ground_truth, method="strict"):
    return locals()


def keyword_only_form(*, ground_truth, solution_str, extra_info):
    return locals()


def kwargs_form(solution_str, **kwargs):
    return {"solution_str": solution_str, **kwargs}


def args_form(*args):
    return args


FOUR = {"data_source": "d", "solution_str": "s", "ground_truth": "g", "extra_info": "e"}


@pytest.mark.parametrize(
    ("fn", "received"),
    [
        (verl_form, FOUR),
        (per_source_form, {"solution_str": "s", "ground_truth": "g", "method": "strict"}),
        (keyword_only_form, {"solution_str": "s", "ground_truth": "g", "extra_info": "e"}),
        (kwargs_form, FOUR),
        (args_form, ("d", "s", "g", "e")),
    ],
)
def test_each_form_gets_the_verl_values_it_names(fn, received):
    assert verl_call(fn)("d", "s", "g", "e") == received


@pytest.mark.parametrize(
    ("name", "parameters"),
    [
        ("needs_a_key", "(solution_str, ground_truth, api_key)"),
        ("other_names", "(source, response, answer, info)"),
    ],
)
def test_a_signature_verl_cannot_call_is_refused_at_start(tokenizer, name, parameters):
    config = RewardConfig(function=f"tests.rewards.scorers:{name}", workers=0)
    with pytest.raises(ValueError, match=r"reward\.function=") as caught:
        RewardManager(config, tokenizer)
    message = str(caught.value)
    assert f"its parameters are {parameters}" in message
    assert "compute_score(data_source, solution_str, ground_truth, extra_info=None)" in message
    assert "compute_score(solution_str, ground_truth, ...)" in message


@pytest.mark.parametrize(
    ("kind", "score", "extras"),
    [
        ("float32", 0.5, {}),
        ("float64", 0.5, {}),
        ("int64", 2.0, {}),
        ("bool", 1.0, {}),
        ("dict", 0.5, {"acc": 1.0, "tokens": 3.0}),
    ],
)
def test_numpy_scalars_are_numbers(kind, score, extras):
    result = score_sample("tests.rewards.scorers:numpy_scalar", "test", "x", kind, {})
    assert result == (score, extras)
    assert type(result[0]) is float and all(type(v) is float for v in result[1].values())
