"""Tool calls out of generated text: a registry of parsers, the Hermes format first.

Hermes (what Qwen-family chat templates teach): each call is a JSON object
``{"name": ..., "arguments": {...}}`` between ``<tool_call>`` and ``</tool_call>``.

Every parser returns a ``ParsedTurn``: the content with the parsed calls taken out, the calls
in OpenAI form (``{"id", "type": "function", "function": {"name", "arguments": str}}``), and
``errors``, one message per block that looked like a call but was not one (JSON that does not
parse, no string ``name``, arguments that are not an object, an unclosed block). A malformed
block stays in the content, so the caller sees exactly what the model wrote; an agent loop
sends the errors back to the model as tool output, never raising into training.

Calls written inside reasoning (``<think> ... </think>``, or an unclosed ``<think>`` to the
end) are thoughts, not actions: they are neither parsed nor reported.

A parser is named in config: ``hermes``, or a user's ``module:function`` with the same
signature ``(text) -> ParsedTurn``.
"""

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from ascent.errors import InputError

BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
REASONING = re.compile(r"<think>.*?(</think>|\Z)", re.DOTALL)
UNCLOSED = "<tool_call>"


@dataclass
class ParsedTurn:
    content: str | None  # None when the turn was only tool calls
    calls: list[dict] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def parse_hermes(text: str) -> ParsedTurn:
    """Hermes ``<tool_call>`` blocks outside reasoning; see the module docstring."""
    # Blank the reasoning out (same length, so positions hold): no block may start, end or
    # be swallowed inside it.
    visible = REASONING.sub(lambda m: " " * len(m.group(0)), text)
    calls, errors, kept, cursor = [], [], [], 0
    for match in BLOCK.finditer(visible):
        number = len(calls) + len(errors) + 1
        call, problem = _hermes_call(match.group(1))
        if problem:
            errors.append(f"tool call {number} was not run: {problem}")
            continue
        calls.append(call)
        kept.append(text[cursor : match.start()])
        cursor = match.end()
    kept.append(text[cursor:])
    if visible.count(UNCLOSED) > len(BLOCK.findall(visible)):
        errors.append("a <tool_call> block was not closed with </tool_call>; it was not run")
    content = "".join(kept).strip() if calls else text
    return ParsedTurn(content or None, calls, errors)


def _hermes_call(body: str) -> tuple[dict | None, str | None]:
    try:
        parsed = json.loads(body)
    except json.JSONDecodeError as error:
        return None, f"its body is not valid JSON ({error.msg} at character {error.pos})"
    if not isinstance(parsed, dict) or not isinstance(parsed.get("name"), str):
        return None, 'it must be a JSON object with a string "name"'
    arguments = parsed.get("arguments", {})
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None, f'the "arguments" of {parsed["name"]} are a string that is not JSON'
    if not isinstance(arguments, dict):
        return None, f'the "arguments" of {parsed["name"]} must be a JSON object'
    call = {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": parsed["name"], "arguments": json.dumps(arguments)},
    }
    return call, None


TOOL_CALL_PARSERS: dict[str, Callable[[str], ParsedTurn]] = {"hermes": parse_hermes}


def tool_call_parser(name: str) -> Callable[[str], ParsedTurn]:
    """The parser registered as ``name``, or the function at import path ``module:function``."""
    if name in TOOL_CALL_PARSERS:
        return TOOL_CALL_PARSERS[name]
    if ":" in name:
        from ascent.importing import load_object

        return load_object(name)
    raise InputError(
        f"unknown tool-call parser {name!r}: use one of {sorted(TOOL_CALL_PARSERS)} or a "
        "'module:function' returning ascent.rollout.tool_calls.ParsedTurn"
    )


def assistant_message(text: str, tools: bool) -> dict:
    """The OpenAI assistant message of generated ``text``: with ``tools``, the Hermes calls
    parsed into ``tool_calls`` and taken out of the content."""
    content, calls = parse_tool_calls(text) if tools else (text, [])
    message = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return message


def parse_tool_calls(text: str) -> tuple[str | None, list[dict]]:
    """(content, OpenAI-style ``tool_calls``) with the Hermes parser: the chat facade's and
    ``ascent serve``'s view, where a malformed block is simply left in the content."""
    turn = parse_hermes(text)
    return turn.content, turn.calls
