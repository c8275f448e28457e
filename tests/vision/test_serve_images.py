"""``ascent serve`` on a tiny Qwen2.5-VL, driven by the official ``openai`` client: chat
messages with ``image_url`` data URLs give the prompt the data path renders and the same
greedy tokens as the engine in process; a bad or remote image is a 400 naming the part."""

import base64

import openai
import pytest

from ascent.models import load_causal_lm
from ascent.rollout import EngineLimits, NativeEngine, SamplingParams
from ascent.workers.rollout_samples import prompt_ids
from tests.servers import ascent_serve
from tests.vision.data import png_bytes, vision_rl_batch

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def client(tiny_vlm, tmp_path_factory):
    flags = ["--max-model-len", "256", "--served-model-name", "tiny-vl"]
    log = tmp_path_factory.mktemp("serve-vl") / "server.log"
    with ascent_serve(tiny_vlm, log, *flags) as server:
        yield openai.OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0)


def data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode()


def test_chat_with_an_image_equals_the_engine_in_process(client, tiny_vlm):
    batch = vision_rl_batch(tiny_vlm, rows=1, seed=4)  # "look <image> row 0", one image
    [url] = batch["images"][0]
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look "},
                {"type": "image_url", "image_url": {"url": url}},
                {"type": "text", "text": " row 0"},
            ],
        }
    ]
    reply = client.chat.completions.create(
        model="tiny-vl", messages=messages, max_tokens=8, temperature=0
    )
    choice = reply.choices[0]
    assert choice.model_extra["prompt_token_ids"] == prompt_ids(batch)[0]
    engine = NativeEngine(
        load_causal_lm(tiny_vlm), EngineLimits(max_model_len=256), model_dir=tiny_vlm
    )
    greedy = SamplingParams(temperature=0, max_new_tokens=8)
    [expected] = engine.generate(prompt_ids(batch), greedy, batch["images"])
    assert choice.model_extra["token_ids"] == expected.token_ids


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("https://example.com/cat.png", "give the image as a data URL"),
        (data_url(png_bytes(64, 64)[:-30]), "cannot be decoded"),
    ],
)
def test_a_bad_image_is_a_400_naming_the_part(client, url, message):
    part = {"type": "image_url", "image_url": {"url": url}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "hi"}, part]}]
    with pytest.raises(openai.BadRequestError, match=message) as raised:
        client.chat.completions.create(model="tiny-vl", messages=messages, max_tokens=4)
    assert "messages[0].content[1]" in str(raised.value)


def test_an_image_the_processor_refuses_is_a_400(client):
    part = {"type": "image_url", "image_url": {"url": data_url(png_bytes(300, 1))}}
    messages = [{"role": "user", "content": [part]}]
    with pytest.raises(openai.BadRequestError, match="aspect ratio must be smaller than 200"):
        client.chat.completions.create(model="tiny-vl", messages=messages, max_tokens=4)
