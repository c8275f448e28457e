"""Scoring functions for the reward tests, loaded by import path in pool workers."""

import time


def flaky(data_source, solution_str, ground_truth, extra_info):
    """Misbehaves according to the ground truth: raise, hang, nan, dict, or a plain score."""
    if ground_truth == "raise":
        raise ValueError("scorer bug")
    if ground_truth == "hang":
        time.sleep(60)
    if ground_truth == "nan":
        return float("nan")
    if ground_truth == "text":
        return "not a number"
    if ground_truth == "dict":
        return {"score": 0.5, "acc": 1.0, "format": 0.25}
    return float(len(solution_str))


def digit_share(data_source, solution_str, ground_truth, extra_info):
    """The share of characters that are digits (a signal a random model can climb)."""
    if not solution_str:
        return 0.0
    return sum(c.isdigit() for c in solution_str) / len(solution_str)
