"""Tool calls out of generated text, in the Hermes format that Qwen-family chat templates
teach: each call is a JSON object ``{"name": ..., "arguments": {...}}`` between
``<tool_call>`` and ``</tool_call>``.

A block whose JSON does not parse, or lacks a string ``name``, is not a call: it stays in the
content, so the caller (an agent loop, a reward) sees exactly what the model wrote.
"""

import json
import re
import uuid

BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def parse_tool_calls(text: str) -> tuple[str | None, list[dict]]:
    """(content without the parsed blocks, or None if nothing else is left; OpenAI-style
    ``tool_calls``: ``{"id", "type": "function", "function": {"name", "arguments": str}}``)."""
    calls, kept, cursor = [], [], 0
    for match in BLOCK.finditer(text):
        try:
            body = json.loads(match.group(1))
        except json.JSONDecodeError:
            continue
        if not isinstance(body, dict) or not isinstance(body.get("name"), str):
            continue
        arguments = body.get("arguments", {})
        calls.append(
            {
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {
                    "name": body["name"],
                    "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                },
            }
        )
        kept.append(text[cursor : match.start()])
        cursor = match.end()
    kept.append(text[cursor:])
    content = "".join(kept).strip() if calls else text
    return (content or None), calls
