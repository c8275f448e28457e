"""What a reward pool worker runs: load the scoring function once per process, call it the
way verl does (``ascent.rewards.signature``), and normalise the result to (score, extra
metrics). Torch-free on purpose."""

import numbers
from collections.abc import Callable
from functools import cache
from typing import Any

from ascent.importing import load_object
from ascent.rewards.builtin import default_compute_score
from ascent.rewards.signature import verl_call


@cache
def scoring_function(spec: str | None) -> Callable[[str, str, Any, Any], Any]:
    """The user's function named by ``spec`` (``module:fn`` / ``file.py:fn``), or the
    built-in dispatch by data source, as ``call(data_source, solution_str, ground_truth,
    extra_info)``."""
    return verl_call(default_compute_score if spec is None else load_object(spec))


def score_sample(
    spec: str | None, data_source: str, solution: str, ground_truth: Any, extra_info: Any
) -> tuple[float, dict[str, float | str]]:
    """(score, extras) of one sample; raises on a result that is not a number. Extras: a
    dict result's other numbers, and its ``pred`` when a string (the extracted answer, as
    verl's math scorers report it; validation's maj@k votes on it)."""
    result = scoring_function(spec)(data_source, solution, ground_truth, extra_info)
    extras: dict[str, float | str] = {}
    if isinstance(result, dict):
        if "score" not in result:
            raise ValueError(f"a dict reward needs a 'score' key; got keys {sorted(result)}")
        numeric = {k: as_number(v) for k, v in result.items() if k != "score"}
        extras = {k: v for k, v in numeric.items() if v is not None}
        if isinstance(result.get("pred"), str):
            extras["pred"] = result["pred"]
        result = result["score"]
    score = as_number(result)
    if score is None:
        raise TypeError(
            f"reward must be a number or a dict with 'score', got {type(result).__name__}"
        )
    return score, extras


def as_number(value: Any) -> float | None:
    """``value`` as a float if it is a real number, else None. Real numbers: int, float,
    bool (True/False count as 1/0, e.g. an ``acc`` flag), and, as verl accepts them, numpy
    scalars (np.float32, np.int64, np.bool_) and other 0-dim values with ``.item()``."""
    if getattr(value, "shape", None) == () and hasattr(value, "item"):
        value = value.item()  # np.bool_ is not a numbers.Real; its .item() is a bool
    return float(value) if isinstance(value, numbers.Real) else None
