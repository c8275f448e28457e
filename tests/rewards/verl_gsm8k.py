"""A stand-in for verl's ``verl/utils/reward_score/gsm8k.py``, written for these tests (not
copied): the same signature, ``compute_score(solution_str, ground_truth, method="strict",
format_score=0.0, score=1.0)``, and the same behaviour, down to the assert on ``method`` that
a positional call ``(data_source, solution_str, ground_truth, extra_info)`` trips."""

import re


def extract_solution(solution_str, method="strict"):
    assert method in ["strict", "flexible"]
    tail = solution_str[-300:]
    if method == "strict":
        found = re.findall(r"#### (-?[0-9.,]+)", tail)
        return found[-1].replace(",", "").replace("$", "") if found else None
    found = re.findall(r"-?[0-9.,]+", tail)
    if not found:
        return None
    return next((n for n in reversed(found) if n not in ("", ".")), found[0])


def compute_score(solution_str, ground_truth, method="strict", format_score=0.0, score=1.0):
    answer = extract_solution(solution_str=solution_str, method=method)
    if answer is None:
        return 0
    return score if answer == ground_truth else format_score
