"""How to call a user's scoring function: the way verl calls it, by keyword.

verl passes ``data_source=, solution_str=, ground_truth=, extra_info=`` by name, so both its
``compute_score(data_source, solution_str, ground_truth, extra_info=None)`` and its
per-source scorers such as ``gsm8k.compute_score(solution_str, ground_truth,
method="strict", ...)`` work unchanged. The signature is read once (at the start of a run and
when a pool worker loads the function):

- it takes ``**kwargs``: all four names, by keyword;
- it names ``solution_str`` and ``ground_truth``: the verl names it has, by keyword;
- otherwise, it takes ``*args``: the four values by position, in verl's order;
- otherwise, or when it requires any other parameter: refused with a ValueError.
"""

import inspect
from collections.abc import Callable
from typing import Any

VERL_PARAMETERS = ("data_source", "solution_str", "ground_truth", "extra_info")
EXPECTED = (
    "expected verl's compute_score(data_source, solution_str, ground_truth, extra_info=None) "
    "or the per-source form compute_score(solution_str, ground_truth, ...), any other "
    "parameter having a default"
)


def verl_arguments(fn: Callable[..., Any]) -> tuple[str, ...] | None:
    """The verl names to pass ``fn`` by keyword, or None for all four by position."""
    signature = inspect.signature(fn)
    kinds = {p.kind for p in signature.parameters.values()}
    by_name = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    named = tuple(
        name
        for name in VERL_PARAMETERS
        if name in signature.parameters and signature.parameters[name].kind in by_name
    )
    if inspect.Parameter.VAR_KEYWORD in kinds:
        names: tuple[str, ...] | None = VERL_PARAMETERS
    elif {"solution_str", "ground_truth"} <= set(named):
        names = named
    elif inspect.Parameter.VAR_POSITIONAL in kinds:
        names = None
    else:
        raise ValueError(f"its parameters are {signature}; {EXPECTED}")
    try:  # a required parameter that verl would not pass fails here, not on every sample
        if names is None:
            signature.bind(*VERL_PARAMETERS)
        else:
            signature.bind(**dict.fromkeys(names))
    except TypeError as error:
        raise ValueError(f"its parameters are {signature} ({error}); {EXPECTED}") from None
    return names


def verl_call(fn: Callable[..., Any]) -> Callable[[str, str, Any, Any], Any]:
    """``fn`` as ``call(data_source, solution_str, ground_truth, extra_info)``, passing what
    ``verl_arguments`` says; raises its ValueError for a function verl could not call."""
    names = verl_arguments(fn)

    def call(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any) -> Any:
        values = (data_source, solution_str, ground_truth, extra_info)
        if names is None:
            return fn(*values)
        return fn(**{k: v for k, v in zip(VERL_PARAMETERS, values, strict=True) if k in names})

    return call
