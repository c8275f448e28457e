"""Built-in scorers with verl's signature:
``compute_score(data_source, solution_str, ground_truth, extra_info) -> float | dict``.

Each returns {"score": s, "acc": correct}: 1.0 for a correct final answer, else 0.0 (and
``math_dapo`` its own scale, below). Where verl has a scorer for the source, ours follows
verl's rule, so rewards match a verl run on the same data.

- gsm8k, openai/gsm8k (verl's ``gsm8k``, strict): in the last 300 characters, the last
  ``#### <number>`` (one space after ``####``; the number is ``-``, digits, ``.`` and ``,``),
  commas removed, equals ``str(ground_truth)`` as a string: ``72.0`` is not ``72``.
- math_dapo, aime* (verl's ``math_dapo``): in the last 300 characters, the last
  ``Answer: ...`` line (any case), normalised as Minerva does (``ascent.rewards.normalize``:
  units, ``\\text{}``, ``$``, spaces, ``\\boxed{}``...), equals the normalised ground truth.
  Score 1.0 if so, else -1.0; ``acc`` 1.0 / 0.0; ``pred`` is the normalised answer.
- math, lighteval/MATH, DigitalLearningGmbH/MATH-lighteval: the last ``\\boxed{}`` is
  equivalent to the ground truth (math-verify: symbolic and numeric equivalence, LaTeX or
  plain; more lenient than verl's string comparison).
- arithmetic: the last number in the response equals the ground truth.
- countdown: ``ground_truth = {"target": t, "numbers": [...]}``; the last equation in
  ``<answer>...</answer>`` uses each number exactly once and evaluates to t.
- exact_match: the stripped response equals the stripped ground truth.
- codecontests, apps, codeforces, taco, prime_code (verl's ``prime_code``): the response's
  code passes the test cases in the ground truth, each run in the sandbox
  (``ascent.rewards.code``); the score is the share of tests passed.
"""

import ast
import re
from collections.abc import Callable
from typing import Any

from ascent.rewards.code import code_tests
from ascent.rewards.extract import (
    answer_line,
    gsm8k_answer,
    last_boxed,
    last_number,
    same_number,
)
from ascent.rewards.normalize import normalize_final_answer


def _result(correct: bool) -> dict[str, float]:
    value = 1.0 if correct else 0.0
    return {"score": value, "acc": value}


def gsm8k(solution: str, ground_truth: Any) -> dict[str, float]:
    return _result(gsm8k_answer(solution) == str(ground_truth))


def math_dapo(solution: str, ground_truth: Any) -> dict[str, float | str]:
    answer = answer_line(solution)
    if answer is None:
        return {"score": -1.0, "acc": 0.0, "pred": "[INVALID]"}  # verl's pred for no answer
    pred = normalize_final_answer(answer)
    correct = pred == normalize_final_answer(str(ground_truth))
    return {"score": 1.0 if correct else -1.0, "acc": float(correct), "pred": pred}


def math(solution: str, ground_truth: Any) -> dict[str, float]:
    from math_verify import parse, verify

    answer = last_boxed(solution)
    if answer is None:
        return _result(False)
    truth = str(ground_truth)
    gold = parse(truth if "$" in truth or "\\" in truth else f"${truth}$")
    guess = parse(f"$\\boxed{{{answer}}}$")
    return _result(bool(gold) and bool(guess) and verify(gold, guess))


def arithmetic(solution: str, ground_truth: Any) -> dict[str, float]:
    return _result(same_number(last_number(solution), str(ground_truth)))


def exact_match(solution: str, ground_truth: Any) -> dict[str, float]:
    return _result(solution.strip() == str(ground_truth).strip())


ANSWER = re.compile(r"<answer>(.*?)</answer>", flags=re.DOTALL)


def countdown(solution: str, ground_truth: Any) -> dict[str, float]:
    answers = ANSWER.findall(solution)
    if not answers or not isinstance(ground_truth, dict):
        return _result(False)
    equation = answers[-1].split("=")[0].strip()
    if not re.fullmatch(r"[\d\s+\-*/().]+", equation):
        return _result(False)
    used = sorted(int(n) for n in re.findall(r"\d+", equation))
    if used != sorted(int(n) for n in ground_truth["numbers"]):
        return _result(False)
    try:
        value = _evaluate(ast.parse(equation, mode="eval").body)
    except (ValueError, ZeroDivisionError, SyntaxError):
        return _result(False)
    return _result(abs(value - float(ground_truth["target"])) < 1e-6)


def _evaluate(node: ast.AST) -> float:
    """+ - * / on numbers only (no eval of arbitrary code)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.BinOp):
        left, right = _evaluate(node.left), _evaluate(node.right)
        operations = {ast.Add: left + right, ast.Sub: left - right, ast.Mult: left * right}
        if isinstance(node.op, ast.Div):
            return left / right
        if type(node.op) in operations:
            return operations[type(node.op)]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand)
    raise ValueError("not an arithmetic expression")


Scorer = Callable[[str, Any], dict[str, float | str]]
BUILTIN_SCORERS: dict[str, Scorer] = {
    "gsm8k": gsm8k,
    "openai/gsm8k": gsm8k,
    "math": math,
    "lighteval/MATH": math,
    "DigitalLearningGmbH/MATH-lighteval": math,
    "math_dapo": math_dapo,
    "arithmetic": arithmetic,
    "countdown": countdown,
    "exact_match": exact_match,
    # verl's prime_code sources: tests in ground_truth, run in the sandbox
    "codecontests": code_tests,
    "apps": code_tests,
    "codeforces": code_tests,
    "taco": code_tests,
    "prime_code": code_tests,
}


PREFIX_SCORERS: dict[str, Scorer] = {"aime": math_dapo}  # verl: aime2024, aime-2025, ...


BUILTIN_NAMES = ", ".join([*sorted(BUILTIN_SCORERS), *(f"{p}*" for p in PREFIX_SCORERS)])
GIVE_A_SCORER = (
    "give a scorer with reward.function='module:function' or 'file.py:function' (verl's "
    "compute_score(data_source, solution_str, ground_truth, extra_info) signature)"
)


def builtin_scorer(data_source: str) -> Scorer | None:
    """The built-in scorer of ``data_source``: by exact name, else by prefix; None if none."""
    return BUILTIN_SCORERS.get(data_source) or next(
        (s for prefix, s in PREFIX_SCORERS.items() if data_source.startswith(prefix)), None
    )


def default_compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None
) -> dict[str, float | str]:
    """The built-in scorer of ``data_source`` (verl's default_compute_score, for these).
    A run refuses sources without one when its data loads (``check_sources_are_scored``)."""
    scorer = builtin_scorer(data_source)
    if scorer is None:
        raise KeyError(
            f"no built-in reward for data_source {data_source!r} (built in: {BUILTIN_NAMES}); "
            + GIVE_A_SCORER
        )
    return scorer(solution_str, ground_truth)
