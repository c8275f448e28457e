"""A scorer slow enough for a signal to land while it runs, loaded by import path."""

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
