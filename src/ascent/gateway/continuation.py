"""A chat call that continues the session's last one, as tokens: the history the agent sends
back ends in the assistant message the gateway returned, so the next prompt is the last
call's prompt, the tokens it sampled, and the chat template's rendering of what follows
(``ascent.agents.conversation.Conversation``, the in-process loop's rule), not the template's
re-rendering of the returned text.

Why: text does not round-trip. The returned message has its stop string and special tokens
taken out and its tool calls parsed into ``tool_calls``, which the template writes back in
its own spacing; an untrained model's bytes may not even decode to the text they encode
from. Re-rendered, nearly every history would differ from the tokens the model wrote and
start a new sample (``samples.py``). Continued, the engine reads the tokens it wrote, so the
calls merge into one multi-turn sample whose context is the one each turn was sampled in.

A call continues the last one when:

- its messages start with the last call's messages, then an assistant message equal to the
  one returned (content, and tool calls by name and arguments; ids and spacing ignored);
- its ``tools`` are the last call's.

Anything else (an edited, dropped or summarised turn, another system prompt, a second call
while one is in flight) is rendered from its messages as ``ascent serve`` renders them, and
starts a new chain: the agent's history is what the model reads.
"""

import contextlib
import json
from dataclasses import dataclass
from typing import Any

from ascent.agents.conversation import Conversation
from ascent.rollout.protocol import TokenOut
from ascent.rollout.tool_calls import assistant_message
from ascent.serve.responses import visible_text


@dataclass
class Turn:
    """A chat call in flight: the messages and tools it was given, and its conversation."""

    messages: list[dict]
    tools: list[dict] | None
    conversation: Conversation


@dataclass
class Finished:
    """The last finished chat call: what it was given, its conversation after the sampled
    turn, and the assistant message the agent got back (normalised)."""

    messages: list[dict]
    tools: list[dict] | None
    conversation: Conversation
    reply: tuple


class ChatHistory:
    """One session's chain of chat calls (see the module docstring)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.last: Finished | None = None

    def start(self, messages: list[dict], tools: list[dict] | None) -> Turn:
        """The turn for a call with ``messages``: its prompt is ``conversation.current``'s
        tokens. Raises what the chat template raises for messages it refuses."""
        last, self.last = self.last, None  # taken: a call in flight cannot be continued
        if last is not None and self._continues(last, messages, tools):
            last.conversation.add_messages(messages[len(last.messages) + 1 :])
            return Turn(messages, tools, last.conversation)
        return Turn(messages, tools, Conversation(self.tokenizer, messages, tools=tools))

    def finish(self, turn: Turn, out: TokenOut, stop: list[str]) -> None:
        """The call of ``turn`` sampled ``out``: the next call may continue it."""
        turn.conversation.add_assistant(out)
        text = visible_text(self.tokenizer, out, stop, True)
        reply = normal(assistant_message(text, bool(turn.tools)))
        self.last = Finished(turn.messages, turn.tools, turn.conversation, reply)

    @staticmethod
    def _continues(last: Finished, messages: list[dict], tools: list[dict] | None) -> bool:
        count = len(last.messages)
        if tools != last.tools or len(messages) <= count:
            return False
        same = all(normal(a) == normal(b) for a, b in zip(messages, last.messages, strict=False))
        return same and normal(messages[count]) == last.reply


def normal(message: dict) -> tuple:
    """What of a message the model reads: its role, its text (stripped; text parts joined),
    its tool calls by name and arguments, the call a tool result answers."""
    content = message.get("content") or ""
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError):  # not JSON: compared as the string it is
                arguments = json.loads(arguments)
        calls.append((function.get("name"), json.dumps(arguments, sort_keys=True)))
    return (message.get("role"), str(content).strip(), tuple(calls), message.get("tool_call_id"))
