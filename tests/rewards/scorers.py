"""Scoring functions for the reward tests, loaded by import path in pool workers."""

import time

import numpy as np


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


NUMPY_VALUES = {
    "float32": np.float32(0.5),
    "float64": np.float64(0.5),
    "int64": np.int64(2),
    "bool": np.bool_(True),
}


def numpy_scalar(data_source, solution_str, ground_truth, extra_info):
    """The numpy value named by the ground truth, or a dict of numpy values."""
    if ground_truth == "dict":
        return {"score": np.float32(0.5), "acc": np.bool_(True), "tokens": np.int64(3)}
    return NUMPY_VALUES[ground_truth]


def needs_a_key(solution_str, ground_truth, api_key):
    """Requires a parameter that verl never passes."""
    return 0.0


def other_names(source, response, answer, info):
    """ascent's old positional call would have fed this; verl's keyword call cannot."""
    return 0.0


def digit_turns(data_source, solution_str, ground_truth, extra_info):
    """The share of three turns that ended on a digit, for episodes whose turns stop at the
    first letter or digit (so a turn holds at most one digit, and the rendered user turns
    none): 0, 1/3, 2/3 or 1."""
    return min(1.0, sum(c.isdigit() for c in solution_str) / 3)


def with_answer(data_source, solution_str, ground_truth, extra_info):
    """verl's math form: the extracted answer as ``pred`` (here the first character), or none
    when the ground truth says so."""
    if ground_truth == "no answer":
        return {"score": 0.0, "acc": 0.0}
    pred = solution_str[:1]
    return {"score": float(pred == ground_truth), "acc": float(pred == ground_truth), "pred": pred}
