"""verl's prime_code-style data scores in the sandbox: tests in ``ground_truth`` (standard
input/output or call-based, as a JSON string or an object), the last code block of the
response, the share of tests passed."""

import json

import pytest

from ascent.rewards.builtin import default_compute_score

STDIO = json.dumps({"inputs": ["1 2\n", "10 -3\n", "0 0\n"], "outputs": ["3\n", "7\n", "0\n"]})
CALLS = {"fn_name": "add", "inputs": [[1, 2], [10, -3]], "outputs": [[3], 7]}


def response(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}\n```\nIt reads two numbers."


@pytest.mark.parametrize(
    ("source", "truth", "code", "score"),
    [
        ("codecontests", STDIO, "a, b = map(int, input().split())\nprint(a + b)", 1.0),
        ("apps", STDIO, "a, b = map(int, input().split())\nprint(a + b if a < 5 else 0)", 2 / 3),
        ("taco", STDIO, "print(3)", 1 / 3),
        ("codeforces", STDIO, "while True: pass", 0.0),
        ("prime_code", CALLS, "def add(a, b):\n    return a + b", 1.0),
        ("apps", CALLS, "class Solution:\n    def add(self, a, b):\n        return a + b", 1.0),
        ("apps", CALLS, "def add(a, b):\n    return a - b", 0.0),
    ],
)
def test_code_is_scored_by_the_share_of_tests_it_passes(source, truth, code, score):
    result = default_compute_score(source, response(code), truth)
    assert result["score"] == pytest.approx(score)
    assert result["acc"] == float(score == 1.0)
    assert result["total"] == len(
        (json.loads(truth) if isinstance(truth, str) else truth)["inputs"]
    )


def test_a_response_without_a_code_block_is_run_as_code():
    assert default_compute_score("apps", "print(3)", STDIO)["passed"] == 1.0
