"""Token-exactness of multi-turn conversations, checked against full re-rendering on three
chat templates (tests/agents/templates.py) over many random conversations: sampled ids stay
exactly as sampled with mask 1, everything else is the template's rendering with mask 0, and a
template that rewrites history is detected and handled as configured."""

import json
import random

import pytest

from ascent.agents.conversation import Conversation
from ascent.data.sft import chat_example
from ascent.rollout.protocol import TokenOut
from tests.agents.templates import TEMPLATES, tokenizer_for

WORDS = ["the", "sum", "is", "42", "let", "me", "check", "ok", "x", "=", "7", "\n", "  "]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add.",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}},
        },
    }
]


def random_text(rng: random.Random, low: int = 1, high: int = 8) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def random_turn(rng: random.Random) -> str:
    """What a model might write: thoughts, text, tool calls, in some order."""
    parts = []
    if rng.random() < 0.5:
        parts.append(f"<think>{random_text(rng)}</think>")
    if rng.random() < 0.7:
        parts.append(random_text(rng))
    for _ in range(rng.choice([0, 0, 1, 2])):
        parts.append(
            f'<tool_call>{{"name": "add", "arguments": {{"a": {rng.randint(0, 99)}}}}}</tool_call>'
        )
    return rng.choice(["", "\n"]).join(parts) or "ok"


def random_observations(rng: random.Random) -> list[dict]:
    if rng.random() < 0.6:
        return [{"role": "tool", "content": random_text(rng)} for _ in range(rng.randint(1, 3))]
    return [{"role": "user", "content": random_text(rng)}]


def sampled(tokenizer, text: str, end: str, rng: random.Random, version: int) -> TokenOut:
    """A turn as an engine would return it: ids of the text and the end-of-turn token."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    ids = [*ids, tokenizer.convert_tokens_to_ids(end)]
    return TokenOut(ids, [-rng.random() for _ in ids], "stop", [version] * len(ids))


def play(name: str, seed: int, on_drift: str = "new_sample"):
    """A random conversation; returns it and every sampled turn in order."""
    rng = random.Random(seed)
    tokenizer = tokenizer_for(name)
    opening = [{"role": "user", "content": random_text(rng)}]
    if rng.random() < 0.5:
        opening.insert(0, {"role": "system", "content": random_text(rng)})
    tools = TOOLS if rng.random() < 0.5 and name != "think_stripping" else None
    conversation = Conversation(tokenizer, opening, tools=tools, on_drift=on_drift)
    turns, starts = [], []
    for turn in range(rng.randint(1, 5)):
        if turn:
            conversation.add_messages(random_observations(rng))
        out = sampled(tokenizer, random_turn(rng), TEMPLATES[name][1], rng, turn)
        starts.append(len(conversation.messages))
        conversation.add_assistant(out)
        turns.append(out)
    return conversation, turns, starts, tokenizer


def sampled_runs(trajectory) -> list[list[int]]:
    """The maximal runs of mask-1 tokens."""
    runs, current = [], []
    for token, mask in zip(trajectory.response_ids, trajectory.response_mask, strict=True):
        if mask:
            current.append(token)
        elif current:
            runs.append(current)
            current = []
    return runs + ([current] if current else [])


@pytest.mark.parametrize("name", ["chatml_tools", "llama3"])
@pytest.mark.parametrize("seed", range(60))
def test_append_only_templates_give_one_sample_equal_to_the_full_rendering(name, seed):
    conversation, turns, starts, tokenizer = play(name, seed)
    assert conversation.drifts == 0 and len(conversation.samples) == 1
    [sample] = conversation.samples
    full = conversation.encode(
        tokenizer.apply_chat_template(
            conversation.messages, tools=conversation.tools, tokenize=False
        )
    )
    # The whole trajectory is the template's rendering of the conversation (up to the
    # template's text after the last end-of-turn token, which nobody sampled).
    assert sample.token_ids == full[: len(sample.token_ids)]
    assert len(full) - len(sample.token_ids) <= 1
    # Mask 1 exactly where each assistant turn's sampled ids sit in that rendering.
    expected_mask = [0] * len(full)
    for out, count in zip(turns, starts, strict=True):
        before = conversation.encode(
            tokenizer.apply_chat_template(
                conversation.messages[:count],
                tools=conversation.tools,
                tokenize=False,
                add_generation_prompt=True,
            )
        )
        assert full[len(before) : len(before) + len(out.token_ids)] == out.token_ids
        expected_mask[len(before) : len(before) + len(out.token_ids)] = [1] * len(out.token_ids)
    prompt = len(sample.prompt_ids)
    assert sample.response_mask == expected_mask[prompt : len(sample.token_ids)]
    assert sampled_runs(sample) == [out.token_ids for out in turns]
    masked = [lp for lp, m in zip(sample.log_probs, sample.response_mask, strict=True) if m]
    assert masked == [lp for out in turns for lp in out.log_probs]
    assert all(
        v == -1 for v, m in zip(sample.weight_versions, sample.response_mask, strict=True) if not m
    )


@pytest.mark.parametrize("seed", range(60))
def test_a_template_that_drops_earlier_thoughts_starts_new_samples(seed):
    conversation, turns, starts, tokenizer = play("think_stripping", seed, "new_sample")
    rewritten = sum("</think>" in conversation.messages[s]["content"] for s in starts[:-1])
    assert conversation.drifts == rewritten
    # Every sampled turn is in exactly one sample, exact and in order.
    assert [run for s in conversation.samples for run in sampled_runs(s)] == [
        out.token_ids for out in turns
    ]
    # Each sample's prompt is the template's rendering of the conversation so far, as the
    # model would see it at inference (earlier thoughts dropped).
    for sample in conversation.samples:
        cut = tokenizer.decode(sample.token_ids)
        messages = conversation.messages
        renderings = [
            tokenizer.apply_chat_template(messages[:k], tokenize=False, add_generation_prompt=True)
            for k in range(1, len(messages) + 1)
        ]
        assert any(r == tokenizer.decode(sample.prompt_ids) for r in renderings)
        assert cut.startswith(tokenizer.decode(sample.prompt_ids))


@pytest.mark.parametrize("seed", range(60))
def test_repair_keeps_one_sample_that_follows_the_template_from_the_first_difference(seed):
    conversation, turns, _, tokenizer = play("think_stripping", seed, "repair")
    assert len(conversation.samples) == 1
    [sample] = conversation.samples
    full = conversation.encode(tokenizer.apply_chat_template(conversation.messages, tokenize=False))
    assert sample.token_ids == full[: len(sample.token_ids)]
    assert sampled_runs(sample)[-1] == turns[-1].token_ids  # the last turn is never rewritten
    for run in sampled_runs(sample):  # every mask-1 run is a piece of one sampled turn
        assert any(json.dumps(run)[1:-1] in json.dumps(out.token_ids) for out in turns)


def test_a_malformed_sequence_of_calls_is_refused():
    tokenizer = tokenizer_for("chatml_tools")
    conversation = Conversation(tokenizer, [{"role": "user", "content": "hi"}])
    with pytest.raises(RuntimeError, match="needs an assistant turn"):
        conversation.add_messages([{"role": "user", "content": "again"}])
    out = TokenOut([65, 2], [0.0, 0.0], "stop", [0, 0])
    conversation.add_assistant(out)
    with pytest.raises(RuntimeError, match="two assistant turns in a row"):
        conversation.add_assistant(out)


@pytest.mark.parametrize("name", ["chatml_tools", "llama3"])
@pytest.mark.parametrize("seed", range(30))
def test_sft_and_rl_give_a_conversation_the_same_tokens_and_masks(name, seed):
    """One renderer: SFT on a finished conversation has the ids RL's episode has, and trains
    every token RL samples in it. SFT also trains the template's text right after each
    end-of-turn token (ChatML's "\n"; Llama-3 writes none), which no one samples."""
    conversation, _, _, tokenizer = play(name, seed)
    [sample] = conversation.samples
    example = chat_example(tokenizer, conversation.messages, conversation.tools)
    count = len(sample.token_ids)
    assert example.input_ids[:count] == sample.token_ids
    rl_mask = [0] * len(sample.prompt_ids) + sample.response_mask
    sft_mask = example.loss_mask[:count]
    assert all(s >= r for s, r in zip(sft_mask, rl_mask, strict=True))
    end = tokenizer.convert_tokens_to_ids(TEMPLATES[name][1])
    extra = [i for i, (s, r) in enumerate(zip(sft_mask, rl_mask, strict=True)) if s > r]
    for position in extra:  # each follows a sampled end-of-turn token, or another such token
        back = position - 1
        while back in extra:
            back -= 1
        assert sample.token_ids[back] == end and rl_mask[back] == 1
    if name == "llama3":
        assert sft_mask == rl_mask
