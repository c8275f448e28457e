"""The agent loop on the real native engine: many episodes at once, each a conversation whose
sampled spans are exactly the engine's outputs (ids, log-probs, weight versions) with mask 1,
everything else the template's rendering with mask 0; budgets and tool-output limits hold;
the default tool environment turns every kind of bad call into a message."""

import asyncio
import time

import pytest

from ascent.agents.environment import Environment, Step, ToolEnvironment
from ascent.agents.loop import TRUNCATED, AgentLimits, run_episodes
from ascent.agents.tools import function_tool
from ascent.models import load_causal_lm, load_tokenizer
from ascent.rollout import EngineLimits, NativeEngine, SamplingParams
from ascent.rollout.native_backend import NativeBackend
from tests.agents.test_conversation import sampled_runs


class Recording(NativeBackend):
    """The native backend, remembering every request and its answer, and how many requests
    were in flight at once."""

    def __init__(self, engine, tokenizer):
        super().__init__(engine, tokenizer)
        self.calls, self.in_flight, self.most_in_flight = [], 0, 0

    async def generate_n(self, prompt_ids, sampling, session_id=None, images=None):
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            outs = await super().generate_n(prompt_ids, sampling, session_id, images)
        finally:
            self.in_flight -= 1
        self.calls.append((list(prompt_ids), outs[0]))
        return outs


class Chatter(Environment):
    """A user who answers every turn with a long message, for ``turns`` turns; the reward is
    the turn's number. Steps are slow (a tool that takes time)."""

    def __init__(self, turns: int):
        self.turns, self.seen = turns, 0

    def reset(self, row):
        return [{"role": "user", "content": row["question"]}]

    def step(self, message):
        self.seen += 1
        time.sleep(0.01)
        reply = {"role": "tool", "content": "result " * 40}
        return Step([reply], reward=float(self.seen), done=self.seen >= self.turns)


@pytest.fixture
def backend(tiny_model):
    tokenizer = load_tokenizer(tiny_model)
    engine = NativeEngine(
        load_causal_lm(tiny_model),
        EngineLimits(max_num_seqs=32, max_model_len=1024),
        tokenizer=tokenizer,
    )
    return Recording(engine, tokenizer)


def play(backend, rows, sampling, limits, environment):
    async def main():
        try:
            return await run_episodes(
                backend, backend.tokenizer, environment, rows, sampling, limits
            )
        finally:
            await backend.close()

    return asyncio.run(main())


def test_episodes_run_at_once_and_keep_the_engines_tokens_exactly(backend):
    rows = [{"question": f"question {i}?"} for i in range(6)]
    sampling = SamplingParams(n=2, temperature=1.0, max_new_tokens=12, seed=3)
    limits = AgentLimits(max_turns=3, max_response_tokens=400, max_tool_response_tokens=8)
    episodes = play(backend, rows, sampling, limits, lambda row: Chatter(turns=3))
    assert len(episodes) == 12 and backend.most_in_flight > 1
    for episode in episodes:
        [sample] = episode.samples  # the tiny template is append-only
        # Each request's prompt is the sample so far, and one of the engine's answers to
        # exactly that prompt follows it in the sample, token for token.
        outs = [_answer(backend.calls, sample, cut) for cut in _turn_starts(sample)]
        assert sampled_runs(sample) == [out.token_ids for out in outs if out.token_ids]
        masked = [i for i, m in enumerate(sample.response_mask) if m]
        assert [sample.log_probs[i] for i in masked] == [lp for o in outs for lp in o.log_probs]
        assert [sample.weight_versions[i] for i in masked] == [
            v for o in outs for v in o.weight_versions
        ]
        assert episode.turns == len(outs) == len(episode.rewards)
        assert episode.rewards == [1.0, 2.0, 3.0][: episode.turns]
        # Tool output was cut to 8 tokens and marked.
        tool_messages = [m for m in episode.messages if m["role"] == "tool"]
        assert all(m["content"].endswith(TRUNCATED) for m in tool_messages)
        assert episode.end in ("done", "length")
        assert len(sample.response_ids) <= limits.max_response_tokens
    assert len({tuple(e.samples[0].response_ids) for e in episodes}) == 12  # seeds differ


def _answer(calls, sample, cut):
    """The engine's answer to the prompt ``sample.token_ids[:cut]`` that the sample holds."""
    [out] = {
        id(out): out
        for prompt, out in calls
        if prompt == sample.token_ids[:cut]
        and sample.token_ids[cut : cut + len(out.token_ids)] == out.token_ids
    }.values()
    return out


def _turn_starts(sample):
    """Where each request's prompt ended: the starts of the mask-1 runs."""
    prompt, starts = len(sample.prompt_ids), []
    for i, mask in enumerate(sample.response_mask):
        if mask and (i == 0 or not sample.response_mask[i - 1]):
            starts.append(prompt + i)
    return starts


def test_the_response_budget_ends_an_episode(backend):
    limits = AgentLimits(max_turns=10, max_response_tokens=60, max_tool_response_tokens=100)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=20, seed=0, stop_token_ids=[])
    [episode] = play(backend, [{"question": "q"}], sampling, limits, lambda row: Chatter(10))
    assert episode.end == "length"
    assert len(episode.samples[0].response_ids) <= 60 + 100  # one tool turn may overshoot


def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: the first factor.
        b: the second factor.
    """
    return a * b


def secret(name: str, vault: dict) -> str:
    """Read a secret from this row's vault."""
    return vault[name]


@pytest.mark.parametrize(
    ("content", "expected", "done"),
    [
        ("The answer is 4.", [], True),
        (
            '<tool_call>{"name": "multiply", "arguments": {"a": 12, "b": 34}}</tool_call>',
            ["408"],
            False,
        ),
        (
            '<tool_call>{"name": "divide", "arguments": {}}</tool_call>',
            ["Error: there is no tool \"divide\"; the tools are ['multiply', 'secret']"],
            False,
        ),
        (
            '<tool_call>{"name": "multiply", "arguments": {"a": 1}}</tool_call>',
            ["Error: multiply needs the argument 'b'"],
            False,
        ),
        (
            '<tool_call>{"name": "multiply", "arguments": {"a": 1, </tool_call>',
            ["Error: tool call 1 was not run: its body is not valid JSON"],
            False,
        ),
        (
            '<think><tool_call>{"name": "multiply", "arguments": {"a": 2, "b": 2}}</tool_call>'
            "</think>4",
            [],
            True,
        ),
        ('<tool_call>{"name": "secret", "arguments": {"name": "k"}}</tool_call>', ["v"], False),
    ],
)
def test_the_tool_environment_answers_every_call(content, expected, done):
    environment = ToolEnvironment([function_tool(multiply), function_tool(secret, ("vault",))])
    row = {
        "prompt": [{"role": "user", "content": "hi"}],
        "extra_info": {"tools_kwargs": {"secret": {"create_kwargs": {"vault": {"k": "v"}}}}},
    }
    assert environment.reset(row) == row["prompt"]
    message = {"role": "assistant", "content": content}
    step = environment.step(message)
    assert step.done is done
    assert [o["role"] for o in step.observations] == ["tool"] * len(expected)
    for observation, start in zip(step.observations, expected, strict=True):
        assert observation["content"].startswith(start)
    parsed = [e for e in expected if not e.startswith("Error: tool call")]
    assert len(message.get("tool_calls", [])) == len(parsed)  # the parsed calls, recorded


def test_a_rows_tools_are_shown_and_are_the_only_ones_it_may_call(backend):
    """The row's definitions render with its prompt (the data loader's rendering, exactly),
    and a configured tool the row does not list answers as unknown."""
    row_tools = [function_tool(multiply).schema]
    row = {"prompt": [{"role": "user", "content": "6*7?"}], "tools": row_tools}
    tools = [function_tool(multiply), function_tool(secret, ("vault",))]
    limits = AgentLimits(max_turns=1, tools_in_prompt=False)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=4, seed=0)
    play(backend, [row], sampling, limits, lambda row: ToolEnvironment(tools))
    tokenizer = backend.tokenizer
    text = tokenizer.apply_chat_template(
        row["prompt"], tools=row_tools, add_generation_prompt=True, tokenize=False
    )
    assert '"name": "multiply"' in text and "secret" not in text
    assert backend.calls[0][0] == tokenizer(text, add_special_tokens=False)["input_ids"]

    environment = ToolEnvironment(tools)
    environment.reset(row)
    call = '<tool_call>{"name": "secret", "arguments": {"name": "k"}}</tool_call>'
    [answer] = environment.step({"role": "assistant", "content": call}).observations
    assert answer["content"] == "Error: there is no tool \"secret\"; the tools are ['multiply']"
    with pytest.raises(ValueError, match=r"the row's tools list \['search'\], which this"):
        ToolEnvironment(tools).reset({**row, "tools": [{"function": {"name": "search"}}]})
