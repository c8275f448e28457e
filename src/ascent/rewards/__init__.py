"""Rewards: verl-style scoring functions per data source, run in a process pool with time
limits (``ascent.rewards.manager``). This package imports no torch, so pool workers start
fast."""

from ascent.rewards.builtin import BUILTIN_SCORERS, default_compute_score

__all__ = ["BUILTIN_SCORERS", "default_compute_score"]
