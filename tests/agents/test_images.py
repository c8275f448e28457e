"""Images in episodes without a model: the row's images take their places in the opening
messages, a conversation's rendered spans hold each image's tokens expanded and its sample
the images in the order of their tokens (after drift too), a sampled image token ends the
episode, and a scripted backend receives every turn's images."""

import asyncio

import pytest

from ascent.agents.conversation import Conversation
from ascent.agents.environment import Environment, Step
from ascent.agents.images import ImageTokens, message_images, with_row_images
from ascent.agents.loop import AgentLimits, run_episode
from ascent.models.tiny_vlm import build_vlm_tokenizer
from ascent.rollout.protocol import RolloutBackend, TokenOut
from ascent.rollout.types import SamplingParams
from ascent.vision.prompts import expand_image_tokens

URLS = [f"data:image/png;base64,{name}" for name in ("AAAA", "BBBB", "CCCC")]
COUNTS = {URLS[0]: 3, URLS[1]: 1, URLS[2]: 2}  # tokens each image takes


@pytest.fixture(scope="module")
def tokenizer():
    return build_vlm_tokenizer()


@pytest.fixture(scope="module")
def images(tokenizer):
    token = tokenizer.convert_tokens_to_ids("<|image_pad|>")

    def expand(ids, urls):
        return expand_image_tokens(ids, token, [COUNTS[url] for url in urls])

    return ImageTokens(token, expand)


def part(url):
    return {"type": "image_url", "image_url": {"url": url}}


def test_the_rows_images_take_their_places_in_order():
    opening = [
        {"role": "system", "content": "no <image> here? yes, one"},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "and"}]},
    ]
    filled = with_row_images(opening, URLS[:2])
    assert message_images(filled) == URLS[:2]
    assert filled[0]["content"] == [
        {"type": "text", "text": "no "},
        part(URLS[0]),
        {"type": "text", "text": " here? yes, one"},
    ]
    assert with_row_images(opening, []) == opening  # a text row keeps its text as it is
    placed = [{"role": "user", "content": [part(URLS[2])]}]  # the environment placed them
    assert with_row_images(placed, URLS[:1]) == placed
    with pytest.raises(ValueError, match=r"mark 2 image place.* the row has 3"):
        with_row_images(opening, URLS)
    with pytest.raises(ValueError, match=r"message 0 .user. has an image part without a data URL"):
        message_images([{"role": "user", "content": [{"type": "image"}]}])


def turn(tokenizer, text, end="<|im_end|>"):
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    ids = [*ids, tokenizer.convert_tokens_to_ids(end)]
    return TokenOut(ids, [-0.5] * len(ids), "stop", [3] * len(ids))


def rendering(tokenizer, images, conversation):
    """The template's whole rendering of the conversation, image tokens expanded."""
    shown = Conversation(tokenizer, conversation.messages, images=images)
    return shown.current.token_ids, message_images(conversation.messages)


def test_rendered_spans_bring_their_images_expanded(tokenizer, images):
    opening = [{"role": "user", "content": [part(URLS[0]), {"type": "text", "text": "hi"}]}]
    conversation = Conversation(tokenizer, opening, images=images)
    assert conversation.current.images == URLS[:1]
    conversation.add_assistant(turn(tokenizer, "look"))
    tool = {"role": "tool", "content": [part(URLS[1]), {"type": "text", "text": "x"}]}
    conversation.add_messages([tool, {"role": "user", "content": [part(URLS[2])]}])
    sample = conversation.current
    ids, urls = rendering(tokenizer, images, conversation)
    assert sample.token_ids == ids and sample.images == urls == URLS
    assert sample.token_ids.count(images.token_id) == 3 + 1 + 2
    assert sample.image_starts[0] == -1 and sample.image_starts[1] == sample.image_starts[2] > 0
    assert conversation.drifts == 0


@pytest.mark.parametrize("on_drift", ["new_sample", "repair"])
def test_after_drift_a_sample_holds_every_image_of_its_tokens(tokenizer, images, on_drift):
    opening = [{"role": "user", "content": [part(URLS[0])]}]
    conversation = Conversation(tokenizer, opening, on_drift=on_drift, images=images)
    conversation.add_assistant(turn(tokenizer, "a"))
    conversation.add_messages([{"role": "tool", "content": [part(URLS[1])]}])
    # A turn that ends on a token the template does not write there: the template drifts.
    conversation.add_assistant(turn(tokenizer, "b", end="<|endoftext|>"))
    conversation.add_messages([{"role": "tool", "content": [part(URLS[2])]}])
    assert conversation.drifts == 1
    ids, urls = rendering(tokenizer, images, conversation)
    assert conversation.current.token_ids == ids and conversation.current.images == urls
    assert len(conversation.samples) == (2 if on_drift == "new_sample" else 1)
    if on_drift == "new_sample":
        assert conversation.samples[0].images == URLS[:2]


def test_dropped_rendered_spans_take_their_images_along(tokenizer, images):
    conversation = Conversation(tokenizer, [{"role": "user", "content": "hi"}], images=images)
    conversation.add_assistant(turn(tokenizer, "a"))
    conversation.add_messages([{"role": "tool", "content": [part(URLS[0]), part(URLS[1])]}])
    assert conversation.current.images == URLS[:2]
    conversation.current.drop_trailing_rendered()
    assert conversation.current.images == [] and conversation.current.image_starts == []


def test_a_text_model_refuses_a_conversations_images(tokenizer):
    with pytest.raises(ValueError, match=r"shows 1 image.* takes none"):
        Conversation(tokenizer, [{"role": "user", "content": [part(URLS[0])]}])
    # An image's place alone renders (the gateway's form, refused there with its own words).
    placed = Conversation(tokenizer, [{"role": "user", "content": [{"type": "image"}]}])
    assert placed.current.images == [] and "<|image_pad|>" in tokenizer.decode(
        placed.current.token_ids
    )


class Scripted(RolloutBackend):
    """Answers each turn with the next scripted text, remembering what each request held."""

    def __init__(self, tokenizer, texts):
        self.tokenizer, self.texts, self.requests = tokenizer, list(texts), []

    async def generate_n(self, prompt_ids, sampling, session_id=None, images=None):
        self.requests.append((list(prompt_ids), images))
        return [turn(self.tokenizer, self.texts.pop(0))]


class ShowsPictures(Environment):
    """A tool returns the next picture after every turn (the last turn's is never shown)."""

    def reset(self, row):
        self.shown = 0
        return list(row["prompt"])

    def step(self, message):
        self.shown += 1
        return Step([{"role": "tool", "content": [part(URLS[self.shown % len(URLS)])]}])


def episode(tokenizer, images, texts):
    backend = Scripted(tokenizer, texts)
    row = {"prompt": [{"role": "user", "content": "see <image>"}], "images": URLS[:1]}
    limits = AgentLimits(max_turns=3)
    played = asyncio.run(
        run_episode(backend, tokenizer, ShowsPictures(), row, SamplingParams(), limits, images)
    )
    return played, backend.requests


def test_every_turn_sends_its_samples_images(tokenizer, images):
    played, requests = episode(tokenizer, images, ["a", "b", "c"])
    assert played.end == "max_turns" and [urls for _, urls in requests] == [
        URLS[:1],
        URLS[:2],
        URLS[:3],
    ]
    assert played.samples[0].token_ids[: len(requests[-1][0])] == requests[-1][0]


def test_a_sampled_image_token_ends_the_episode(tokenizer, images):
    played, requests = episode(tokenizer, images, ["a", "x<|image_pad|>", "c"])
    assert played.end == "image_token" and played.turns == 2 and len(requests) == 2
    assert played.samples[0].images == URLS[:2]  # the picture after it was never shown
