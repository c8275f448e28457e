"""Functions as tools: the schema from hints and docstrings, and calls that turn every
mistake (bad JSON, unknown, missing or mistyped arguments, an exception) into a message."""

from typing import Literal

import pytest

from ascent.agents.tools import ToolError, function_tool


def multiply(a: int, b: int, precise: bool = False) -> int:
    """Multiply two integers.

    Exactly, however long they are.

    Args:
        a: the first factor.
        b (int): the second factor,
            on two lines.
        precise: unused.

    Returns:
        The product.
    """
    return a * b


def search(query: str, top_k: int | None = None, mode: Literal["web", "wiki"] = "web") -> list:
    """Search a corpus.

    :param query: what to look for.
    :param top_k: how many results.
    """
    if query == "fail":
        raise ToolError("the index is offline")
    if query == "bug":
        raise KeyError("oops")
    return [query] * (top_k or 1)


def lookup(key: str, table: dict) -> str:
    """Look a key up in a per-row table (bound by the environment)."""
    return table[key]


def test_the_schema_comes_from_hints_and_the_docstring():
    assert function_tool(multiply).schema == {
        "type": "function",
        "function": {
            "name": "multiply",
            "description": "Multiply two integers.\n\nExactly, however long they are.",
            "parameters": {
                "type": "object",
                "properties": {
                    "a": {"type": "integer", "description": "the first factor."},
                    "b": {"type": "integer", "description": "the second factor, on two lines."},
                    "precise": {"type": "boolean", "description": "unused."},
                },
                "required": ["a", "b"],
            },
        },
    }
    parameters = function_tool(search).parameters
    assert parameters["properties"] == {
        "query": {"type": "string", "description": "what to look for."},
        "top_k": {"type": "integer", "description": "how many results."},
        "mode": {"enum": ["web", "wiki"]},
    }
    assert parameters["required"] == ["query"]
    assert function_tool(search).description == "Search a corpus."


def test_bound_parameters_are_hidden_from_the_model_and_filled_in_by_the_environment():
    tool = function_tool(lookup, bound=("table",))
    assert list(tool.parameters["properties"]) == ["key"]
    assert tool.call('{"key": "x"}', table={"x": "found"}) == "found"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ('{"a": 3, "b": 4}', "12"),
        ({"a": 3, "b": 4}, "12"),
        ('{"a": 3, "b": ', "Error: the arguments of multiply are not valid JSON"),
        ("[3, 4]", "Error: the arguments of multiply must be a JSON object"),
        ('{"a": 3}', "Error: multiply needs the argument 'b'"),
        ('{"a": 3, "b": 4, "c": 5}', "Error: multiply has no parameter 'c'"),
        ('{"a": "3", "b": 4}', "Error: argument 'a' of multiply must be an integer"),
        ('{"a": true, "b": 4}', "Error: argument 'a' of multiply must be an integer"),
    ],
)
def test_calls_answer_with_the_result_or_what_was_wrong(arguments, message):
    assert function_tool(multiply).call(arguments).startswith(message)


def test_exceptions_inside_a_tool_become_messages():
    tool = function_tool(search)
    assert tool.call({"query": "q", "top_k": 2}) == '["q", "q"]'
    assert tool.call({"query": "q", "top_k": None}) == '["q"]'
    assert tool.call({"query": "fail"}) == "Error: the index is offline"
    assert tool.call({"query": "bug"}) == "Error: search raised KeyError: 'oops'"
    assert tool.call({"query": "q", "mode": "maps"}).startswith("Error: argument 'mode'")


def test_a_tool_without_a_docstring_or_hints_is_refused_by_name():
    def bare(x: int) -> int:
        return x

    def loose(x):
        """Loose."""

    with pytest.raises(ValueError, match="tool bare has no docstring"):
        function_tool(bare)
    with pytest.raises(ValueError, match="parameter 'x' has no type hint"):
        function_tool(loose)
