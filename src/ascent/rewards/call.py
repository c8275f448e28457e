"""What a reward pool worker runs: load the scoring function once per process, call it,
and normalise the result to (score, extra metrics). Torch-free on purpose."""

from functools import cache
from typing import Any

from ascent.importing import load_object
from ascent.rewards.builtin import default_compute_score


@cache
def scoring_function(spec: str | None) -> Any:
    """The user's function named by ``spec`` (``module:fn`` / ``file.py:fn``), or the
    built-in dispatch by data source."""
    return default_compute_score if spec is None else load_object(spec)


def score_sample(
    spec: str | None, data_source: str, solution: str, ground_truth: Any, extra_info: Any
) -> tuple[float, dict[str, float]]:
    """(score, extras) of one sample; raises on a result that is not a finite number."""
    result = scoring_function(spec)(data_source, solution, ground_truth, extra_info)
    extras: dict[str, float] = {}
    if isinstance(result, dict):
        if "score" not in result:
            raise ValueError(f"a dict reward needs a 'score' key; got keys {sorted(result)}")
        extras = {k: float(v) for k, v in result.items() if k != "score" and _is_number(v)}
        result = result["score"]
    if not _is_number(result):
        raise TypeError(
            f"reward must be a number or a dict with 'score', got {type(result).__name__}"
        )
    return float(result), extras


def _is_number(value: Any) -> bool:
    """int, float or bool (True/False count as 1/0, e.g. an ``acc`` flag)."""
    return isinstance(value, int | float)
