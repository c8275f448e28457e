"""Scorers whose process dies or is signalled, loaded by import path in pool workers."""

import os
import signal
import time
from pathlib import Path


def dies_once(data_source, solution_str, ground_truth, extra_info):
    """SIGKILLs its own process (as the out-of-memory killer or ``kill -9`` would) the first
    time, marking that in the file named by the ground truth (if any); scores len(response)."""
    if ground_truth and not Path(ground_truth).exists():
        Path(ground_truth).touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return float(len(solution_str))


def dies_on_kill(data_source, solution_str, ground_truth, extra_info):
    """SIGKILLs its own process whenever the ground truth is "kill"; else len(response)."""
    if ground_truth == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    return float(len(solution_str))


def slow(data_source, solution_str, ground_truth, extra_info):
    """len(response), after ``ground_truth`` seconds."""
    time.sleep(float(ground_truth))
    return float(len(solution_str))
