"""Environments named by import path in the tests' configs."""

from ascent.agents.environment import Environment, Step


class Again(Environment):
    """A user who says "again" after every assistant turn, for three turns."""

    def __init__(self):
        self.turns = 0

    def reset(self, row):
        return list(row["prompt"])

    def step(self, message):
        self.turns += 1
        return Step([{"role": "user", "content": "again"}], 0.0, done=self.turns >= 3)


ROWS = []  # not an environment (tests/agents/test_episodes.py)


def every_turn_a_bad_call(text):
    """A tool-call parser that reads every turn as one malformed call (tool errors without a
    model that has learned to call)."""
    from ascent.rollout.tool_calls import ParsedTurn

    return ParsedTurn(content=None, errors=["not a well-formed call"])
