"""The built-in gsm8k and math_dapo scorers give what verl's own rules give; each case says
verl's result (verl/utils/reward_score/gsm8k.py, strict, and math_dapo.py)."""

import pytest

from ascent.rewards import default_compute_score

FAR = "\n" + "." * 300  # pushes what comes before it out of the last 300 characters


@pytest.mark.parametrize(
    ("source", "solution", "truth", "score"),
    [
        ("openai/gsm8k", "3 + 4 = 7\n#### 7", "7", 1.0),  # verl: 1.0
        ("gsm8k", "####7", "7", 0.0),  # verl: 0, strict needs a space after ####
        ("gsm8k", "#### 72.0", "72", 0.0),  # verl: 0.0, compared as strings
        ("gsm8k", "#### 72", "72.0", 0.0),  # verl: 0.0, compared as strings
        ("gsm8k", "#### 7.", "7", 0.0),  # verl: 0.0, the run '7.' keeps its period
        ("gsm8k", "#### 1,250", "1250", 1.0),  # verl: 1.0, the answer's commas go
        ("gsm8k", "#### 1,250", "1,250", 0.0),  # verl: 0.0, the ground truth's stay
        ("gsm8k", "#### $72", "72", 0.0),  # verl: 0, '$' cannot start the number
        ("gsm8k", "#### 72 dollars", "72", 1.0),  # verl: 1.0, the number ends at the space
        ("gsm8k", "#### 5\nno, wait\n#### 7", "7", 1.0),  # verl: 1.0, the last #### counts
        ("gsm8k", "#### 7\nno, wait\n#### 5", "7", 0.0),  # verl: 0.0, the last #### counts
        ("gsm8k", "#### 7" + FAR, "7", 0.0),  # verl: 0, beyond the last 300 characters
        ("gsm8k", "#### 7\n" + "." * 293, "7", 1.0),  # verl: 1.0, just inside them
        ("gsm8k", "#### -3", "-3", 1.0),  # verl: 1.0
        ("gsm8k", "#### 3", "-3", 0.0),  # verl: 0.0
        ("gsm8k", "The answer is 7", "7", 0.0),  # verl: 0, no ####
        # verl: 0 (an int never equals the extracted string); ascent compares str(ground_truth)
        ("gsm8k", "#### 7", 7, 1.0),
    ],
)
def test_gsm8k_follows_verl_strict_rule(source, solution, truth, score):
    assert default_compute_score(source, solution, truth) == {"score": score, "acc": score}


@pytest.mark.parametrize(
    ("source", "solution", "truth", "score"),
    [
        ("math_dapo", "3 + 0 = 3.\nAnswer: 3", "3", 1.0),  # verl: 1.0
        ("math_dapo", "so it is \\boxed{3}", "3", -1.0),  # verl: -1.0, only Answer: counts
        ("math_dapo", "Answer: \\boxed{3}", "3", 1.0),  # verl: 1.0, \boxed{} unwrapped
        ("math_dapo", "the answer: 3", "3", 1.0),  # verl: 1.0, any case, anywhere in a line
        ("math_dapo", "Answer : \n 3", "3", 1.0),  # verl: 1.0, blanks after ':' skipped
        ("math_dapo", "Answer: 2\nAnswer: 3", "3", 1.0),  # verl: 1.0, the last one counts
        ("math_dapo", "Answer: 3\nAnswer: 2", "3", -1.0),  # verl: -1.0, the last one counts
        ("math_dapo", "Answer: 3" + FAR, "3", -1.0),  # verl: -1.0, beyond the last 300
        ("math_dapo", "Answer: $\\frac{1}{2}$", "\\frac12", 1.0),  # verl: 1.0, \frac braced
        ("math_dapo", "Answer: \\frac{1}{2}", "0.5", -1.0),  # verl: -1.0, no numeric check
        ("math_dapo", "Answer: 5 \\text{ cm}", "5", 1.0),  # verl: 1.0, units removed
        ("math_dapo", "Answer: 12 dollars", "\\$12", 1.0),  # verl: 1.0, '$' and units go
        ("math_dapo", "Answer: x = 1,000", "1000", 1.0),  # verl: 1.0, after '=', no commas
        ("math_dapo", "Answer: 4", "3", -1.0),  # verl: -1.0, wrong
        ("aime2024", "Answer: 204", "204", 1.0),  # verl: 1.0, aime* goes to math_dapo
        ("aime-2025", "Answer: 204", "33", -1.0),  # verl: -1.0
    ],
)
def test_math_dapo_follows_verl_rule(source, solution, truth, score):
    result = default_compute_score(source, solution, truth)
    assert result["score"] == score and result["acc"] == float(score > 0)


def test_math_dapo_reports_the_normalised_prediction():
    # verl returns {"score": 1.0, "acc": True, "pred": "\\frac{1}{2}"} here
    result = default_compute_score("math_dapo", "Answer: $\\frac12$.", "\\frac{1}{2}")
    assert result == {"score": 1.0, "acc": 1.0, "pred": "\\frac{1}{2}"}
    assert default_compute_score("math_dapo", "no answer", "1")["pred"] == "[INVALID]"
