"""Plain Python functions as tools: the JSON schema a chat template shows the model, built from
the function's type hints and docstring, and calls that never raise into training.

    def multiply(a: int, b: int) -> int:
        '''Multiply two integers.

        Args:
            a: the first factor.
            b: the second factor.
        '''
        return a * b

``function_tool(multiply).schema`` is the OpenAI-style
``{"type": "function", "function": {"name", "description", "parameters"}}`` that
``apply_chat_template(tools=...)`` takes. Parameters without a default are required; a hint of
``X | None`` is not. The descriptions come from a Google-style ``Args:`` section (or
``:param name:`` lines).

``Tool.call(arguments)`` checks the arguments against the schema (unknown, missing, or of the
wrong JSON type) and turns every failure, including an exception inside the function, into an
error string for the model: a malformed tool call is the policy's mistake, something for it to
learn from, never a crash of the run.
"""

import inspect
import json
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ascent.errors import InputError

_JSON_TYPES = {int: "integer", float: "number", str: "string", bool: "boolean"}
_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$")
_ARG_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")
_PARAM_LINE = re.compile(r"^\s*:param\s+(?:\w+\s+)?(\w+)\s*:\s*(.*)$")
_SECTION = re.compile(r"^\s*(Returns|Return|Raises|Yields|Examples?|Notes?):\s*$")


class ToolError(Exception):
    """A call the tool refuses; its message goes to the model."""


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict  # a JSON schema of type "object"
    function: Callable[..., Any]
    nullable: frozenset[str] = frozenset()  # parameters whose hint admits None

    @property
    def schema(self) -> dict:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def call(self, arguments: str | dict, **bound: Any) -> str:
        """The function's result as text, or ``"Error: ..."`` saying what was wrong.
        ``bound`` are arguments the environment supplies (per-row ``tools_kwargs``), hidden
        from the model's schema."""
        try:
            parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
        except json.JSONDecodeError as error:
            return f"Error: the arguments of {self.name} are not valid JSON ({error.msg})"
        problem = self.argument_problem(parsed)
        if problem:
            return f"Error: {problem}"
        try:
            result = self.function(**parsed, **bound)
        except ToolError as refused:
            return f"Error: {refused}"
        except Exception as error:  # the tool's own bug or its refusal of the input
            return f"Error: {self.name} raised {type(error).__name__}: {error}"
        return result if isinstance(result, str) else json.dumps(result, default=str)

    def argument_problem(self, arguments: Any) -> str | None:
        """What is wrong with ``arguments`` for this tool's schema, or None."""
        if not isinstance(arguments, dict):
            return f"the arguments of {self.name} must be a JSON object"
        properties = self.parameters["properties"]
        unknown = sorted(set(arguments) - set(properties))
        if unknown:
            return f"{self.name} has no parameter {unknown[0]!r}; it takes {sorted(properties)}"
        missing = [name for name in self.parameters["required"] if name not in arguments]
        if missing:
            return f"{self.name} needs the argument {missing[0]!r}"
        for name, value in arguments.items():
            if value is None and name in self.nullable:
                continue
            if not _matches(value, properties[name]):
                return f"argument {name!r} of {self.name} must be {_describe(properties[name])}"
        return None


def function_tool(function: Callable[..., Any], bound: tuple[str, ...] = ()) -> Tool:
    """The tool of a plain function (see the module docstring). ``bound`` names parameters the
    environment fills in (per-row ``tools_kwargs``): they are left out of the schema."""
    description, argument_help = _parse_docstring(inspect.getdoc(function) or "")
    if not description:
        raise InputError(
            f"tool {function.__name__} has no docstring: its first lines are the description "
            "the model reads"
        )
    hints = typing.get_type_hints(function)
    properties, required, nullable = {}, [], set()
    for name, parameter in inspect.signature(function).parameters.items():
        if name in bound or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if name not in hints:
            raise InputError(f"tool {function.__name__}: parameter {name!r} has no type hint")
        schema, optional = _schema(hints[name], f"{function.__name__}.{name}")
        if name in argument_help:
            schema["description"] = argument_help[name]
        properties[name] = schema
        if optional:
            nullable.add(name)
        elif parameter.default is inspect.Parameter.empty:
            required.append(name)
    parameters = {"type": "object", "properties": properties, "required": required}
    return Tool(function.__name__, description, parameters, function, frozenset(nullable))


def _schema(hint: Any, where: str) -> tuple[dict, bool]:
    """(JSON schema of a type hint, whether it admits None)."""
    origin, arguments = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        others = [a for a in arguments if a is not type(None)]
        if len(others) == 1:
            return _schema(others[0], where)[0], len(others) < len(arguments)
        return {"anyOf": [_schema(a, where)[0] for a in others]}, len(others) < len(arguments)
    if origin is typing.Literal:
        return {"enum": list(arguments)}, False
    if hint in _JSON_TYPES:
        return {"type": _JSON_TYPES[hint]}, False
    if hint in (list, tuple) or origin in (list, tuple):
        schema = {"type": "array"}
        if arguments and arguments[-1] is not Ellipsis:
            schema["items"] = _schema(arguments[0], where)[0]
        return schema, False
    if hint is dict or origin is dict:
        return {"type": "object"}, False
    if hint is Any:
        return {}, False
    raise InputError(f"tool parameter {where}: no JSON schema for the type {hint!r}")


def _matches(value: Any, schema: dict) -> bool:
    if "anyOf" in schema:
        return any(_matches(value, option) for option in schema["anyOf"])
    if "enum" in schema:
        return value in schema["enum"]
    kind = schema.get("type")
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "array":
        items = schema.get("items")
        return isinstance(value, list) and (items is None or all(_matches(v, items) for v in value))
    if kind == "object":
        return isinstance(value, dict)
    return True


def _describe(schema: dict) -> str:
    if "anyOf" in schema:
        return " or ".join(_describe(option) for option in schema["anyOf"])
    if "enum" in schema:
        return f"one of {schema['enum']}"
    if "items" in schema:
        return f"an array whose items are each {_describe(schema['items'])}"
    kind = schema.get("type", "any value")
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """(description, {argument: help}) from a Google-style or reST docstring. In an ``Args:``
    section a line indented deeper than the argument lines continues the argument above."""
    description, arguments = [], {}
    section, current, indent = "description", None, None
    for line in doc.splitlines():
        depth = len(line) - len(line.lstrip())
        if _ARGS_HEADER.match(line):
            section, current, indent = "args", None, None
        elif _SECTION.match(line):
            section = "other"
        elif param := _PARAM_LINE.match(line):
            section, current = "params", param.group(1)
            arguments[current] = param.group(2).strip()
        elif section == "description":
            description.append(line)
        elif not line.strip() or section == "other":
            continue
        elif section == "args" and (indent is None or depth <= indent) and _ARG_LINE.match(line):
            arg = _ARG_LINE.match(line)
            current, indent = arg.group(1).lstrip("*"), depth
            arguments[current] = arg.group(3).strip()
        elif current is not None:
            arguments[current] = f"{arguments[current]} {line.strip()}".strip()
    return "\n".join(description).strip(), arguments
