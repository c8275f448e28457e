"""Rendering a turn from the opening messages alone (``ascent.agents.locality``): on every
template the tests use, and on Qwen2.5's and Qwen3's own (tests/agents/chat_templates/, as
the model repositories ship them), a conversation appends exactly the tokens, and finds
exactly the drifts, that rendering the whole history does; the check refuses templates that
rewrite history; and a turn's rendering no longer grows with the turns before it."""

import random
from itertools import pairwise
from pathlib import Path

import pytest

import ascent.agents.conversation as conversation_module
from ascent.agents.conversation import Conversation
from ascent.agents.images import ImageTokens
from ascent.agents.locality import local_roles
from ascent.models.tiny import build_byte_tokenizer
from ascent.models.tiny_vlm import build_vlm_tokenizer
from ascent.rollout.protocol import TokenOut
from ascent.vision.prompts import expand_image_tokens
from tests.agents.templates import TEMPLATES, tokenizer_for
from tests.agents.test_conversation import TOOLS, random_observations, random_text, random_turn

FAMILIES = {
    name: (Path(__file__).parent / "chat_templates" / f"{name}.jinja").read_text()
    for name in ("qwen2_5", "qwen3")
}

# Qwen3's rule without its other habits: a turn's <think> is kept after the last user
# message only, so a user message rewrites turns before it that the last turn may not show.
LAST_QUERY_THINKING = (
    "{% set ns = namespace(last=-1) %}"
    "{% for message in messages %}{% if message.role == 'user' %}"
    "{% set ns.last = loop.index0 %}{% endif %}{% endfor %}"
    "{% for message in messages %}{% set content = message.content %}"
    "{% if message.role == 'assistant' and loop.index0 < ns.last and '</think>' in content %}"
    "{% set content = content.split('</think>')[-1] %}{% endif %}"
    "{{ '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# Local, but a turn it ends with the end token it writes only when more follows: H does not
# start with A + S, so every turn drifts (though N does start with A + S).
OPEN_LAST_TURN = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message.role + '\\n' + message.content }}"
    "{% if not (loop.last and message.role == 'assistant') %}{{ '<|im_end|>\\n' }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# Local after user turns only: it numbers tool results across the conversation.
NUMBERED_RESULTS = (
    "{% set ns = namespace(results=0) %}{% for message in messages %}"
    "{% if message.role == 'tool' %}{% set ns.results = ns.results + 1 %}"
    "{{ '<|im_start|>tool ' ~ ns.results ~ '\\n' + message.content + '<|im_end|>\\n' }}"
    "{% else %}{{ '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
NO_TOOL_ROLE = (  # a template that takes no tool results (as Gemma's)
    "{% for message in messages %}{% if message.role == 'tool' %}"
    "{{ raise_exception('roles must alternate') }}{% endif %}"
    "{{ '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def tokenizer_with(name: str):
    if name in TEMPLATES:
        return tokenizer_for(name)
    tokenizer = build_byte_tokenizer()
    tokenizer.chat_template = {
        **FAMILIES,
        "last_query_thinking": LAST_QUERY_THINKING,
        "open_last_turn": OPEN_LAST_TURN,
        "numbered_results": NUMBERED_RESULTS,
        "no_tool_role": NO_TOOL_ROLE,
    }[name]
    return tokenizer


def end_of(name: str) -> str:
    return TEMPLATES[name][1] if name in TEMPLATES else "<|im_end|>"


def turn_out(tokenizer, text: str, end: str, rng: random.Random, version: int):
    ids = [*tokenizer(text, add_special_tokens=False)["input_ids"]]
    ids.append(tokenizer.convert_tokens_to_ids(end))
    return TokenOut(ids, [-rng.random() for _ in ids], "stop", [version] * len(ids))


def play(name: str, seed: int, on_drift: str, turns: int = 20) -> Conversation:
    """A random conversation of ``turns`` turns; one turn in ten ends on a token the template
    does not write there (it drifts, where the template is local too)."""
    rng = random.Random(seed)
    tokenizer = tokenizer_with(name)
    opening = [{"role": "user", "content": random_text(rng)}]
    if rng.random() < 0.5:
        opening.insert(0, {"role": "system", "content": random_text(rng)})
    tools = TOOLS if rng.random() < 0.5 else None
    conversation = Conversation(tokenizer, opening, tools=tools, on_drift=on_drift)
    for turn in range(turns):
        if turn:
            conversation.add_messages(random_observations(rng))
        end = "<|endoftext|>" if rng.random() < 0.1 else end_of(name)
        conversation.add_assistant(turn_out(tokenizer, random_turn(rng), end, rng, turn))
    return conversation


def record(conversation: Conversation) -> tuple:
    samples = [
        (s.prompt_ids, s.response_ids, s.response_mask, s.log_probs, s.weight_versions)
        for s in conversation.samples
    ]
    return samples, conversation.drifts, conversation.messages


def rendering_everything(monkeypatch, *args) -> Conversation:
    """``play`` with every turn rendering the whole history: the definition, as it was."""
    with monkeypatch.context() as patch:
        patch.setattr(conversation_module, "local_roles", lambda *_: frozenset())
        return play(*args)


NAMES = [
    "chatml_tools",
    "llama3",
    "think_stripping",
    "qwen2_5",
    "qwen3",
    "last_query_thinking",
    "open_last_turn",
    "numbered_results",
]


@pytest.mark.parametrize("on_drift", ["new_sample", "repair"])
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("seed", range(12))
def test_short_renderings_append_what_rendering_everything_does(monkeypatch, name, seed, on_drift):
    reference = rendering_everything(monkeypatch, name, seed, on_drift)
    assert record(play(name, seed, on_drift)) == record(reference)


@pytest.mark.parametrize("on_drift", ["new_sample", "repair"])
@pytest.mark.parametrize("name", ["chatml_tools", "llama3", "qwen2_5"])
def test_a_local_template_still_drifts_on_a_turn_it_does_not_write_as_sampled(
    monkeypatch, name, on_drift
):
    drifts = [play(name, seed, on_drift).drifts for seed in range(12)]
    reference = [rendering_everything(monkeypatch, name, s, on_drift).drifts for s in range(12)]
    assert drifts == reference and sum(drifts) > 0


def test_the_check_tells_templates_that_rewrite_history_from_local_ones():
    both, user = frozenset({"user", "tool"}), frozenset({"user"})
    expected = {
        "chatml_tools": both,
        "llama3": both,
        "qwen2_5": both,
        "open_last_turn": both,
        "numbered_results": user,
        "no_tool_role": user,
        "think_stripping": frozenset(),
        "qwen3": frozenset(),
        "last_query_thinking": frozenset(),
    }
    for name, roles in expected.items():
        for tools in (None, TOOLS):
            assert local_roles(tokenizer_with(name), tools) == roles, (name, tools)


def test_the_check_is_what_finds_a_rewrite_that_the_last_turn_does_not_show(monkeypatch):
    """A thought two turns back is dropped when the user speaks: the short renderings (the
    opening, a turn without thoughts, the user's message) show nothing wrong."""
    tokenizer = tokenizer_with("last_query_thinking")
    rng = random.Random(0)

    def play_it() -> Conversation:
        conversation = Conversation(tokenizer, [{"role": "user", "content": "2 + 3?"}])
        for text, answer in [
            ("<think>add</think>call", {"role": "tool", "content": "5"}),
            ("checked", {"role": "user", "content": "and 4 + 5?"}),
        ]:
            conversation.add_assistant(turn_out(tokenizer, text, "<|im_end|>", rng, 0))
            conversation.add_messages([answer])
        return conversation

    assert play_it().drifts == 1
    monkeypatch.setattr(conversation_module, "local_roles", lambda *_: frozenset({"user", "tool"}))
    assert play_it().drifts == 0  # what rendering short would miss without the check


def renders_per_turn(monkeypatch, conversation: Conversation, observation: dict, turns: int):
    """Messages and characters rendered by each ``add_messages`` of ``turns`` equal turns."""
    rendered = []

    def counting(tokenizer, messages, *, tools=None, generation):
        text = render(tokenizer, messages, tools=tools, generation=generation)
        rendered.append((len(messages), len(text)))
        return text

    render = conversation_module.render_chat
    tokenizer, rng, per_turn = conversation.tokenizer, random.Random(0), []
    with monkeypatch.context() as patch:
        patch.setattr(conversation_module, "render_chat", counting)
        for turn in range(turns):
            if turn:
                rendered.clear()
                conversation.add_messages([observation])
                per_turn.append(tuple(map(sum, zip(*rendered, strict=True))))
            conversation.add_assistant(turn_out(tokenizer, "x" * 32, "<|im_end|>", rng, turn))
    return per_turn


def test_a_turn_renders_as_much_at_turn_20_as_at_turn_2(monkeypatch):
    tool = {"role": "tool", "content": "12345"}
    tokenizer = tokenizer_with("qwen2_5")
    opening = [{"role": "user", "content": "question"}]
    short = renders_per_turn(monkeypatch, Conversation(tokenizer, opening, tools=TOOLS), tool, 20)
    with monkeypatch.context() as patch:
        patch.setattr(conversation_module, "local_roles", lambda *_: frozenset())
        whole = renders_per_turn(
            monkeypatch, Conversation(tokenizer, opening, tools=TOOLS), tool, 20
        )
    # (messages, characters) in H and N: the opening, the turn and its tool result at every
    # turn, as at the first, where they are the whole history; against the whole history,
    # longer by a turn each turn.
    assert short == [whole[0]] * 19
    assert [messages for messages, _ in whole] == [4 * k + 1 for k in range(1, 20)]
    assert len({b - a for (_, a), (_, b) in pairwise(whole)}) == 1


def test_a_conversation_that_shows_images_renders_the_whole_history(monkeypatch):
    tokenizer = build_vlm_tokenizer()
    token = tokenizer.convert_tokens_to_ids("<|image_pad|>")
    images = ImageTokens(token, lambda ids, urls: expand_image_tokens(ids, token, [2] * len(urls)))
    picture = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    opening = [{"role": "user", "content": [picture, {"type": "text", "text": "what is it?"}]}]
    conversation = Conversation(tokenizer, opening, images=images)
    rendered = renders_per_turn(monkeypatch, conversation, {"role": "user", "content": "?"}, 6)
    assert [messages for messages, _ in rendered] == [4 * k + 1 for k in range(1, 6)]
