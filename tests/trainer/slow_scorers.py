"""Scorers that let a signal land while a step scores (slow, or held until a test lets them
go on), loaded by import path."""

import os
import time
from pathlib import Path

from tests.rewards.scorers import digit_share


def slow_digit_share(data_source, solution_str, ground_truth, extra_info):
    """``digit_share`` after 50 ms; touches the file $SCORING_MARKER (if set) first, to tell a
    test that scoring has begun."""
    if marker := os.environ.get("SCORING_MARKER"):
        Path(marker).touch()
    time.sleep(0.05)
    return digit_share(data_source, solution_str, ground_truth, extra_info)


def gated_digit_share(data_source, solution_str, ground_truth, extra_info):
    """``digit_share`` once the file $SCORING_GATE/open exists (at once if the variable is
    unset); touches $SCORING_GATE/waiting first, so that a test knows a step is scoring and
    can act on it (send a signal) before it opens the gate."""
    if gate := os.environ.get("SCORING_GATE"):
        Path(gate, "waiting").touch()
        deadline = time.monotonic() + 300  # a guard against hangs only
        while not Path(gate, "open").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    return digit_share(data_source, solution_str, ground_truth, extra_info)
