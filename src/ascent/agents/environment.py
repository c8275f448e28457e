"""The environment API: what a user implements, in one file, to train a multi-turn agent.

    class Calculator(Environment):
        tools = [function_tool(multiply)]

        def reset(self, row):                 # the opening messages of an episode
            return row["prompt"]

        def step(self, message):              # after every assistant turn
            ...
            return Step(observations=[...], reward=0.0, done=False)

``reset`` gets the dataset row (``prompt``, ``reward_model``, ``extra_info`` ...); ``step``
gets the assistant's message (``content``: the sampled text; ``tool_calls`` when the parser
found calls) and returns the messages the model sees next (tool results, a user turn), a
reward for the turn and whether the episode is over. ``step`` may be a coroutine; a plain
function runs on a worker thread, so a slow tool does not hold up other episodes.

``ToolEnvironment`` is the common case and the default: it runs the tools the model calls
(``Tool.call``: errors become messages, never exceptions), reports malformed calls back as
errors, and ends the episode on a turn without calls (the answer). A row's ``tools``
(definitions the chat template shows) limit the calls to the tools they name; its arguments
come from verl's ``extra_info.tools_kwargs`` (``{tool: {"create_kwargs": {...}}}`` or
``{tool: {...}}``), which fill the parameters the tool declared as ``bound``.
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ascent.agents.tools import Tool
from ascent.data.chat import tool_names
from ascent.rollout.tool_calls import ParsedTurn, parse_hermes


@dataclass
class Step:
    observations: list[dict] = field(default_factory=list)
    reward: float = 0.0
    done: bool = False


class Environment:
    """One episode. A new instance per episode, so instance state is per episode."""

    tools: Sequence[Tool] = ()

    def reset(self, row: dict) -> list[dict]:
        raise NotImplementedError

    def step(self, message: dict) -> Step:
        raise NotImplementedError


class ToolEnvironment(Environment):
    """Runs the model's tool calls until it answers without one."""

    def __init__(self, tools: list[Tool], parser: Any = parse_hermes) -> None:
        self.tools = list(tools)
        self.by_name = {tool.name: tool for tool in self.tools}
        self.parser = parser
        self.bound: dict[str, dict] = {}
        self.calls = self.errors = 0

    def reset(self, row: dict) -> list[dict]:
        if row.get("tools"):  # the row's definitions: the model may call only those
            offered = tool_names(row["tools"])
            missing = sorted(set(offered) - set(self.by_name))
            if missing:
                raise ValueError(
                    f"the row's tools list {missing}, which this environment does not have "
                    f"(it has {sorted(self.by_name)}): add them to rollout.agent.tools"
                )
            self.by_name = {name: self.by_name[name] for name in offered}
        extra = row.get("extra_info") or {}
        for name, arguments in (extra.get("tools_kwargs") or {}).items():
            arguments = arguments or {}
            self.bound[name] = dict(arguments.get("create_kwargs", arguments))
        return list(row["prompt"])

    def step(self, message: dict) -> Step:
        turn: ParsedTurn = self.parser(message["content"])
        message.update({"tool_calls": turn.calls} if turn.calls else {})
        results = [self.run(call) for call in turn.calls]
        results += [f"Error: {problem}" for problem in turn.errors]
        self.calls += len(turn.errors)  # a malformed call is a call that failed
        self.errors += len(turn.errors)
        done = not results
        return Step([{"role": "tool", "content": text} for text in results], 0.0, done)

    def run(self, call: dict) -> str:
        name, arguments = call["function"]["name"], call["function"]["arguments"]
        self.calls += 1
        tool = self.by_name.get(name)
        if tool is None:
            self.errors += 1
            known = sorted(self.by_name)
            return f"Error: there is no tool {json.dumps(name)}; the tools are {known}"
        result = tool.call(arguments, **self.bound.get(name, {}))
        self.errors += result.startswith("Error: ")
        return result
