"""The engine, its scheduler, the KV cache and the requests ask the model's family (or a
generic record) what to do; none of their conditions names a kind of model (vision,
experts, routes, images) or an architecture: a new family needs no branch in them."""

import ast
import re
from pathlib import Path

import pytest

ROLLOUT = Path(__file__).resolve().parents[2] / "src" / "ascent" / "rollout"
FILES = ["engine.py", "scheduler.py", "kv_cache.py", "requests.py", "admission.py"]
KIND = re.compile(
    r"vision|visual|image|moe|expert|rout|llama|qwen|gemma|mistral|phi|olmo|deepseek|mixtral"
    r"|architecture|__name__",
    re.IGNORECASE,
)
# The prompts' images are an input every engine takes (given or not), not a kind of model.
INPUTS = {"images"}


def words_in(node: ast.AST) -> set[str]:
    """Names, attributes and strings a condition reads."""
    found = set()
    for inner in ast.walk(node):
        if isinstance(inner, ast.Name):
            found.add(inner.id)
        elif isinstance(inner, ast.Attribute):
            found.add(inner.attr)
        elif isinstance(inner, ast.Constant) and isinstance(inner.value, str):
            found.add(inner.value)
    return found


@pytest.mark.parametrize("name", FILES)
def test_no_condition_names_a_kind_of_model(name):
    tree = ast.parse((ROLLOUT / name).read_text())
    tests = [
        node.test
        for node in ast.walk(tree)
        if isinstance(node, ast.If | ast.IfExp | ast.While | ast.Assert)
    ]
    tests += [node for node in ast.walk(tree) if isinstance(node, ast.BoolOp | ast.Compare)]
    words = {word for test in tests for word in words_in(test)} - INPUTS
    named = sorted(word for word in words if KIND.search(word))
    assert named == [], f"{name}: conditions on {named}"
