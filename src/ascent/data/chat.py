"""Chat messages: the checks a conversation passes before it is rendered, and rendering that
turns the chat template's objections into a MalformedRow.

A conversation is a non-empty list of messages; a message is a dict with a string ``role`` and
a ``content`` that is a string or a list of content parts (dicts with a string ``type``; text
parts carry a string ``text``), the multimodal form of HF chat templates and verl's multi-turn
data. Only an assistant message with ``tool_calls`` may go without content (None or empty).
Parquet fills a struct's absent keys with None, so a missing ``content`` and ``content: None``
read the same. Which roles, role orders and content forms a conversation may use is the
template's call, as templates differ: it is asked, and what it raises names the row.
"""

import json
from typing import Any

import jinja2

from ascent.data.files import MalformedRow
from ascent.errors import InputError

# What templates raise on a conversation they refuse: raise_exception() gives a TemplateError,
# and operations on unexpected values inside the template or transformers' own checks give
# the others.
_TEMPLATE_ERRORS = (jinja2.TemplateError, TypeError, KeyError, ValueError)


def check_messages(messages: Any, field: str) -> None:
    """MalformedRow naming ``field[i]`` and what is wrong with it, if ``messages`` is not a
    conversation as described above."""
    if not isinstance(messages, list):
        raise MalformedRow(
            f"field {field!r} must be a list of chat messages, not {type(messages).__name__}"
        )
    if not messages:
        raise MalformedRow(f"field {field!r} is an empty list: a conversation needs a message")
    for position, message in enumerate(messages):
        where = f"{field}[{position}]"
        if not isinstance(message, dict):
            raise MalformedRow(
                f"{where} must be a message (a dict with 'role' and 'content'), "
                f"not {type(message).__name__}"
            )
        role = message.get("role")
        if role is None:
            raise MalformedRow(f"{where} has no 'role' (such as 'user' or 'assistant')")
        if not isinstance(role, str):
            raise MalformedRow(f"{where}: 'role' must be a string, not {type(role).__name__}")
        problem = _content_problem(message)
        if problem:
            raise MalformedRow(f"{where} (role {role!r}) {problem}")


def check_tools(tools: Any, field: str) -> list[dict]:
    """A row's tool definitions in the form chat templates take: a list of OpenAI-style
    ``{"type": "function", "function": {"name": ..., "parameters": ...}}``. Also accepted: the
    list as a JSON string (how parquet files often store it) and bare function schemas (wrapped
    here). MalformedRow naming ``field[i]`` otherwise."""
    if isinstance(tools, str):
        try:
            tools = json.loads(tools)
        except json.JSONDecodeError as error:
            raise MalformedRow(f"field {field!r} is a string but not JSON: {error}") from None
    if not isinstance(tools, list):
        raise MalformedRow(
            f"field {field!r} must be a list of tool definitions, not {type(tools).__name__}"
        )
    checked = []
    for position, tool in enumerate(tools):
        function = tool.get("function", tool) if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise MalformedRow(
                f"{field}[{position}] must be a tool definition: a dict with a string 'name' "
                "(or {'type': 'function', 'function': {'name': ...}})"
            )
        checked.append({"type": "function", "function": function})
    return checked


def tool_names(tools: list[dict] | None) -> list[str]:
    """The names of ``check_tools``-form definitions."""
    return [tool["function"]["name"] for tool in tools or []]


def _content_problem(message: dict) -> str | None:
    content = message.get("content")
    if message["role"] == "assistant" and message.get("tool_calls") and not content:
        return None  # a turn that only calls tools
    if content is None:
        return "has no 'content' (only an assistant message with 'tool_calls' may go without)"
    if isinstance(content, list):
        for index, part in enumerate(content):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                return f"has content[{index}] that is not a content part (a dict with a 'type')"
            if part["type"] == "text" and not isinstance(part.get("text"), str):
                return f"has content[{index}], a text part, without a string 'text'"
        return None
    if not isinstance(content, str):
        return (
            f"has 'content' of type {type(content).__name__}: it must be a string or a list "
            "of content parts"
        )
    return None


def render_chat(
    tokenizer: Any, messages: list[dict], *, tools: list | None = None, generation: bool
) -> str:
    """The conversation rendered with the tokenizer's chat template (and its generation prompt
    when ``generation``); MalformedRow with the template's message if it refuses the
    conversation."""
    # Checked here, not left to the template: a missing template is not the row's fault, and
    # with malformed=skip it would otherwise skip every row.
    if getattr(tokenizer, "chat_template", None) is None:
        name = getattr(tokenizer, "name_or_path", None) or "this model"
        raise InputError(
            f"the tokenizer has no chat template ({name}; a base model's often has none): "
            "give prompts as raw text and render without a template (RL: "
            "data.chat_template=false; SFT: data.template=none), or use a tokenizer that has one"
        )
    try:
        return tokenizer.apply_chat_template(
            messages, tools=tools, tokenize=False, add_generation_prompt=generation
        )
    except jinja2.TemplateSyntaxError:
        raise  # a broken template, not a broken row
    except _TEMPLATE_ERRORS as error:
        raise MalformedRow(
            f"the chat template refuses this conversation: {type(error).__name__}: {error} "
            "(templates differ in the roles, role orders and content forms they accept)"
        ) from error
