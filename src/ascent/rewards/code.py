"""Code with tests, scored in the sandbox: verl's ``prime_code`` data (codecontests, apps,
codeforces, taco), where ``ground_truth`` is a JSON object (or its string) of test cases:

- standard input/output: ``{"inputs": [stdin, ...], "outputs": [stdout, ...]}``; a test
  passes when the program's output equals the expected one line by line, trailing
  whitespace ignored;
- call-based: ``{"fn_name": f, "inputs": [[args...], ...], "outputs": [result, ...]}``; the
  solution's function ``f`` (or ``Solution().f``) is called with the arguments, and passes
  when it returns the expected value (or the expected value is ``[value]``, APPS' form).

The solution is the last fenced code block of the response (```python or ```), or the whole
response when it has none. Every test runs in a sandbox of its own
(``ascent.sandbox``: limits, no network), all tests of a response at once.

Returns ``{"score": passed / total, "acc": 1.0 if all passed else 0.0, "passed", "total"}``:
the share of tests passed, as verl's ``continuous=True``.
"""

import json
import re
from functools import cache
from typing import Any

from ascent.sandbox.pool import SandboxPool
from ascent.sandbox.run import SandboxLimits

FENCE = re.compile(r"```(?:python|py|python3)?[^\n]*\n(.*?)```", re.DOTALL)
CALL_HARNESS = """
import json as _json
_args = _json.loads({arguments!r})
_target = globals().get({name!r})
if _target is None and "Solution" in globals():
    _target = getattr(Solution(), {name!r})
print(_json.dumps(_target(*_args)))
"""


@cache
def _pool() -> SandboxPool:
    return SandboxPool(workers=4, limits=SandboxLimits(wall_seconds=6, cpu_seconds=4))


def extract_code(response: str) -> str:
    blocks = FENCE.findall(response)
    return blocks[-1] if blocks else response


def code_tests(solution: str, ground_truth: Any) -> dict[str, float]:
    tests = json.loads(ground_truth) if isinstance(ground_truth, str) else ground_truth
    code = extract_code(solution)
    inputs, outputs = tests["inputs"], tests["outputs"]
    name = tests.get("fn_name")
    if name:
        jobs = [
            (code + CALL_HARNESS.format(arguments=json.dumps(args), name=name), "")
            for args in inputs
        ]
    else:
        jobs = [(code, stdin) for stdin in inputs]
    results = _pool().map(jobs)
    passed = 0
    for result, expected in zip(results, outputs, strict=True):
        if result.status != "ok":
            continue
        if name:
            passed += _same_value(result.stdout, expected)
        else:
            passed += _same_lines(result.stdout, expected)
    total = len(inputs)
    return {
        "score": passed / total if total else 0.0,
        "acc": float(total > 0 and passed == total),
        "passed": float(passed),
        "total": float(total),
    }


def _same_lines(got: str, expected: Any) -> bool:
    expected = "\n".join(expected) if isinstance(expected, list) else str(expected)
    return _lines(got) == _lines(expected)


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.strip().splitlines()]


def _same_value(got: str, expected: Any) -> bool:
    try:
        value = json.loads(got.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return False
    return value == expected or [value] == expected
