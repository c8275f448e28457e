"""Outside agents for the training tests, written as a user would: against an OpenAI
``base_url``, with the official client, knowing nothing of ascent.

``openai_tools_agent`` makes two calls (offering a tool; a tool call, if the model makes one,
is answered), reports a reward for its first call to the session, and returns the episode's
reward: ``row_reward(row)``, a number the test can recompute from the row alone."""

import json

import httpx
import openai

ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}
FIRST_CALL_REWARD = 0.25


def opening(row: dict) -> list[dict]:
    """The row's prompt as messages (a chat row's prompt is its messages already)."""
    prompt = row["prompt"]
    return list(prompt) if isinstance(prompt, list) else [{"role": "user", "content": prompt}]


def row_reward(row: dict) -> float:
    """0, 0.5 or 1 by the prompt's last letter: differs between rows, fixed for one."""
    return (ord(opening(row)[-1]["content"][-1]) % 3) / 2


def _answer_tools(message: object) -> list[dict]:
    """Tool results for the calls the model made (an untrained model rarely makes one)."""
    results = []
    for call in message.tool_calls or []:
        try:
            arguments = json.loads(call.function.arguments)
            content = str(int(arguments["a"]) + int(arguments["b"]))
        except (ValueError, KeyError, TypeError) as bad:
            content = f"error: {bad}"
        results.append({"role": "tool", "tool_call_id": call.id, "content": content})
    return results


async def openai_tools_agent(base_url: str, row: dict) -> dict:
    messages = opening(row)
    async with openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0) as client:
        first = await client.chat.completions.create(
            model="gpt-4o-mini", messages=messages, tools=[ADD], max_tokens=16
        )
        message = first.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        messages += _answer_tools(message) or [{"role": "user", "content": "again"}]
        async with httpx.AsyncClient() as http:
            reported = await http.post(
                f"{base_url}/reward", json={"reward": FIRST_CALL_REWARD, "call": 0}
            )
            reported.raise_for_status()
        await client.chat.completions.create(
            model="gpt-4o-mini", messages=messages, tools=[ADD], max_tokens=16
        )
    return {"reward": row_reward(row), "acc": float(row_reward(row) == 1.0)}
