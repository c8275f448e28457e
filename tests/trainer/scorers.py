"""Scorers of the trainer tests, loaded by import path."""


def has_digit(data_source, solution_str, ground_truth, extra_info):
    """Right (1) when the response contains a digit: a random byte-level model is right about a
    quarter of the time, so some groups of samples agree and some do not. A "hopeless" prompt
    is never answered right (its group never has signal)."""
    correct = float(ground_truth != "hopeless" and any(c.isdigit() for c in solution_str))
    return {"score": correct, "acc": correct}


def always_wrong(data_source, solution_str, ground_truth, extra_info):
    """No group ever has signal."""
    return {"score": 0.0, "acc": 0.0}


def always_raises(data_source, solution_str, ground_truth, extra_info):
    raise ValueError("this scorer is broken")


def first_digit(data_source, solution_str, ground_truth, extra_info):
    """verl's math form with an extracted answer: ``pred`` is the response's first digit
    (right), or "[INVALID]" without one (wrong), so validation's maj@k votes on digits."""
    pred = next((c for c in solution_str if c.isdigit()), "[INVALID]")
    correct = float(pred != "[INVALID]")
    return {"score": correct, "acc": correct, "pred": pred}
