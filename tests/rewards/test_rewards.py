"""Built-in scorers, and scoring that survives scorers that raise, hang or return NaN."""

import math

import pytest

from ascent.rewards import default_compute_score
from ascent.rewards.manager import RewardConfig, RewardManager
from tests.rewards.batches import scored_batch


@pytest.mark.parametrize(
    ("source", "solution", "truth", "correct"),
    [
        ("openai/gsm8k", "She has 3 + 4 = 7 apples.\n#### 7", "7", True),
        ("gsm8k", "#### 1,250", "1250", True),
        ("gsm8k", "The answer is 7", "7", False),  # no ####
        ("math", "so x = \\boxed{\\frac{1}{2}}", "0.5", True),
        ("math", "\\boxed{\\sqrt{4}}", "2", True),
        ("math", "\\boxed{3}", "\\frac{7}{2}", False),
        ("math", "no box, 0.5", "0.5", False),
        ("arithmetic", "12+34=46", "46", True),
        ("arithmetic", "46 or 47", "46", False),
        (
            "countdown",
            "<answer>(6 * 4) - 2 + 3</answer>",
            {"target": 25, "numbers": [2, 3, 4, 6]},
            True,
        ),
        ("countdown", "<answer>6 * 4 + 1</answer>", {"target": 25, "numbers": [1, 4, 6, 9]}, False),
        ("countdown", "<answer>__import__('os')</answer>", {"target": 0, "numbers": []}, False),
        ("exact_match", "  Paris \n", "Paris", True),
    ],
)
def test_builtin_scorers(source, solution, truth, correct):
    result = default_compute_score(source, solution, truth, {})
    assert result == {"score": float(correct), "acc": float(correct)}


def test_unknown_data_source_says_how_to_plug_a_scorer():
    with pytest.raises(KeyError, match=r"reward\.function"):
        default_compute_score("my_task", "x", "y", {})


@pytest.mark.parametrize("workers", [0, 2])
def test_failures_score_zero_are_counted_and_reported_once(tokenizer, workers, capsys):
    config = RewardConfig(function="tests.rewards.scorers:flaky", workers=workers, timeout_s=1.0)
    truths = ["ok", "raise", "nan", "text", "dict", "ok", "raise"]
    if workers:
        truths.insert(2, "hang")  # only a pool can cut a hang short
    manager = RewardManager(config, tokenizer)
    try:
        batch, counts = manager.score(scored_batch(tokenizer, truths, ["abc"] * len(truths)))
    finally:
        manager.close()
    expected = [3.0 if t == "ok" else 0.5 if t == "dict" else 0.0 for t in truths]
    assert batch["scores"].tolist() == expected
    assert counts == {
        "reward/errors": 3.0,
        "reward/timeouts": float(bool(workers)),
        "reward/non_finite": 1.0,
    }
    # The score sits on the last response token; the dict's other keys become fields.
    assert batch["token_rewards"][0].tolist() == [0, 0, 3.0, 0, 0]
    row = truths.index("dict")
    assert batch["acc"][row] == 1.0 and batch["reward_extra/format"][row] == 0.25
    assert math.isnan(batch["reward_extra/format"][0])
    printed = capsys.readouterr().out
    assert printed.count("the scorer failed") == 1 and "ValueError: scorer bug" in printed


@pytest.mark.parametrize("workers", [0, 1])
def test_a_scorers_extracted_answers_become_the_answers_field(tokenizer, workers):
    """``pred`` strings (validation's maj@k votes on them) are kept beside the numbers; a row
    without one has None, and a batch without any still has the field."""
    config = RewardConfig(function="tests.rewards.scorers:with_answer", workers=workers)
    manager = RewardManager(config, tokenizer)
    try:
        truths, responses = ["a", "no answer", "x"], ["abc", "abc", "xyz"]
        batch, _ = manager.score(scored_batch(tokenizer, truths, responses))
        unanswered, _ = manager.score(scored_batch(tokenizer, ["no answer"]))
    finally:
        manager.close()
    assert batch["answers"] == ["a", None, "x"] and batch["acc"].tolist() == [1.0, 0.0, 1.0]
    assert "reward_extra/pred" not in batch
    assert unanswered["answers"] == [None]


def test_a_user_scorer_from_a_file(tokenizer, tmp_path):
    scorer = tmp_path / "my_reward.py"
    scorer.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info):\n"
        "    return 1.0 if solution_str == ground_truth else 0.0\n"
    )
    manager = RewardManager(RewardConfig(function=f"{scorer}:compute_score", workers=1), tokenizer)
    try:
        batch, _ = manager.score(scored_batch(tokenizer, ["abc", "xyz"]))
    finally:
        manager.close()
    assert batch["scores"].tolist() == [1.0, 0.0] and batch["acc"].tolist() == [1.0, 0.0]


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ("no_such_module_xyz:score", "cannot import module 'no_such_module_xyz'"),
        ("tests.rewards.scorers:missing", "has no attribute 'missing'"),
        ("tests.rewards.scorers:time", "not callable"),
    ],
)
def test_a_reward_function_that_cannot_load_fails_at_start(tokenizer, spec, reason):
    with pytest.raises(ValueError, match=r"reward\.function=") as caught:
        RewardManager(RewardConfig(function=spec, workers=0), tokenizer)
    assert reason in str(caught.value)


def test_a_scorer_that_fails_on_every_sample_stops_the_run(tokenizer):
    manager = RewardManager(RewardConfig(function="tests.rewards.scorers:flaky"), tokenizer)
    try:
        with pytest.raises(RuntimeError, match="failed on all 3 samples") as caught:
            manager.score(scored_batch(tokenizer, ["raise"] * 3, ["abc"] * 3))
    finally:
        manager.close()
    assert "ValueError: scorer bug" in str(caught.value)
