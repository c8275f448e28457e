"""Strict JSON checks for ``meta`` and saved non-tensor fields.

Stricter than ``json.dumps`` on purpose: ``json`` silently turns int dict keys into strings
(so a saved batch would load different from what was saved) and only fails on the first bad
value without saying where it sits. Tuples are accepted and come back as lists.
"""

from typing import Any

_SCALARS = (str, int, float, bool, type(None))


def check_jsonable(value: Any, where: str) -> None:
    """Raise TypeError naming the exact location (e.g. ``non_tensors['extra'][3]['tags']``)
    of the first value that JSON cannot store unchanged."""
    if isinstance(value, _SCALARS):
        return
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            check_jsonable(item, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(
                    f"{where} has the dict key {key!r} of type {type(key).__name__}; "
                    "JSON keys must be str (JSON would turn it into a string silently)"
                )
            check_jsonable(item, f"{where}[{key!r}]")
        return
    raise TypeError(
        f"{where} is a {type(value).__name__}, which JSON cannot store; convert it to "
        "str/int/float/bool/None/list/dict first (e.g. .item() or .tolist() for numpy and "
        "torch values)"
    )
