"""``ascent serve`` in its own process, driven by the official ``openai`` client: the same
tokens and log-probs as the engine in-process, the OpenAI shapes (text, n, stop, streaming,
chat, tool-call parsing), and the admin routes (pause / update weights / resume). Bad
requests: test_bad_requests.py."""

import asyncio
import json

import httpx
import openai
import pytest
import torch

from ascent.models import load_causal_lm, load_tokenizer
from ascent.models.loading import causal_lm_from_config
from ascent.rollout import EngineLimits, NativeEngine, SamplingParams
from ascent.rollout.weight_files import write_weights

pytestmark = pytest.mark.integration
PROMPTS = [[5, 17, 33, 70, 71], [100, 3, 9], list(range(40, 60))]


@pytest.fixture(scope="module")
def client(served):
    return openai.OpenAI(base_url=f"{served.url}/v1", api_key="none", max_retries=0)


def test_models_lists_the_served_name(client):
    [card] = client.models.list().data
    assert card.id == "tiny"


def test_greedy_tokens_and_log_probs_equal_the_engine_in_process(client, tiny_model):
    engine = NativeEngine(
        load_causal_lm(tiny_model), EngineLimits(max_num_seqs=4, max_model_len=512)
    )
    local = engine.generate(PROMPTS, SamplingParams(temperature=0, max_new_tokens=12))
    served = client.completions.create(
        model="tiny", prompt=PROMPTS, max_tokens=12, temperature=0, logprobs=0
    )
    assert len(served.choices) == 3
    for sample, choice in zip(local, served.choices, strict=True):
        extra = choice.model_extra
        assert extra["token_ids"] == sample.token_ids
        assert extra["prompt_token_ids"] == PROMPTS[sample.prompt_index]
        assert choice.logprobs.token_logprobs == pytest.approx(sample.log_probs, abs=1e-5)


def test_text_prompt_n_samples_and_stop_strings(client, tiny_model):
    tokenizer = load_tokenizer(tiny_model)
    free = client.completions.create(model="tiny", prompt="2+3=", max_tokens=10, temperature=0)
    text, ids = free.choices[0].text, free.choices[0].model_extra["token_ids"]
    assert free.choices[0].model_extra["prompt_token_ids"] == tokenizer("2+3=")["input_ids"]
    stop = tokenizer.decode(ids[4:6])
    cut = client.completions.create(
        model="tiny", prompt="2+3=", max_tokens=10, temperature=0, stop=[stop]
    ).choices[0]
    assert cut.finish_reason == "stop"
    assert cut.text == text[: text.find(stop)], "the text ends before the stop string"
    assert tokenizer.decode(cut.model_extra["token_ids"]).endswith(stop), "ids keep it"
    many = client.completions.create(
        model="tiny", prompt=["ab", "cd"], n=3, max_tokens=8, temperature=1.0, seed=3
    )
    assert [c.index for c in many.choices] == list(range(6))
    assert len({c.text for c in many.choices[:3]}) > 1


def test_streaming_gives_the_same_text_and_tokens(client):
    whole = client.completions.create(model="tiny", prompt="hello", max_tokens=16, temperature=0)
    chunks = list(
        client.completions.create(
            model="tiny", prompt="hello", max_tokens=16, temperature=0, stream=True
        )
    )
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text
    streamed_ids = [t for c in chunks for t in (c.choices[0].model_extra.get("token_ids") or [])]
    assert streamed_ids == whole.choices[0].model_extra["token_ids"]
    assert chunks[-1].choices[0].finish_reason == "length"


def test_chat_renders_the_template_and_returns_the_trace(client, tiny_model):
    tokenizer = load_tokenizer(tiny_model)
    messages = [{"role": "user", "content": "What is 2+3?"}]
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    reply = client.chat.completions.create(
        model="tiny", messages=messages, tools=tools, max_tokens=8, temperature=0, logprobs=True
    )
    choice = reply.choices[0]
    expected = tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    assert choice.model_extra["prompt_token_ids"] == list(expected)
    assert len(choice.logprobs.content) == len(choice.model_extra["token_ids"]) == 8
    streamed = client.chat.completions.create(
        model="tiny", messages=messages, max_tokens=8, temperature=0, stream=True
    )
    plain = client.chat.completions.create(
        model="tiny", messages=messages, max_tokens=8, temperature=0
    )
    text = "".join(c.choices[0].delta.content or "" for c in streamed)
    assert text == plain.choices[0].message.content


def test_concurrent_clients_each_get_their_own_answer(served):
    """64 requests at once: each equals the same request sent alone (greedy)."""

    async def main():
        client = openai.AsyncOpenAI(base_url=f"{served.url}/v1", api_key="none")
        prompts = [[(7 * i + j) % 250 for j in range(3 + i % 9)] for i in range(64)]
        together = await asyncio.gather(
            *(
                client.completions.create(model="tiny", prompt=p, max_tokens=6, temperature=0)
                for p in prompts
            )
        )
        alone = [
            await client.completions.create(model="tiny", prompt=p, max_tokens=6, temperature=0)
            for p in prompts[:8]
        ]
        await client.close()
        return together, alone

    together, alone = asyncio.run(main())
    for a, b in zip(together[:8], alone, strict=True):
        assert a.choices[0].model_extra["token_ids"] == b.choices[0].model_extra["token_ids"]


def test_weight_update_pause_and_resume(client, served, tiny_model, tmp_path):
    ask = dict(model="tiny", prompt=PROMPTS[0], max_tokens=10, temperature=0)
    before = client.completions.create(**ask).choices[0].model_extra
    version = httpx.get(f"{served.url}/weight_version").json()["weight_version"]
    other = causal_lm_from_config(load_causal_lm(tiny_model).config, seed=9)
    write_weights(tmp_path / "other", other.named_parameters())
    write_weights(tmp_path / "same", load_causal_lm(tiny_model).named_parameters())
    assert httpx.post(f"{served.url}/pause", params={"mode": "keep"}).status_code == 200
    update = httpx.post(f"{served.url}/update_weights", json={"path": str(tmp_path / "other")})
    assert update.json()["weight_version"] == version + 1
    assert httpx.post(f"{served.url}/resume").status_code == 200
    after = client.completions.create(**ask).choices[0].model_extra
    assert after["token_ids"] != before["token_ids"]
    assert set(after["weight_versions"]) == {version + 1}
    httpx.post(f"{served.url}/update_weights", json={"path": str(tmp_path / "same")})
    again = client.completions.create(**ask).choices[0].model_extra
    assert again["token_ids"] == before["token_ids"], "the old weights give the old outputs"
    missing = httpx.post(f"{served.url}/update_weights", json={"path": str(tmp_path / "nope")})
    assert missing.status_code == 400 and "safetensors" in missing.json()["error"]["message"]
    assert httpx.post(f"{served.url}/pause", params={"mode": "sideways"}).status_code == 400


def test_tool_calls_are_parsed_from_the_reply(tiny_model):
    """The server's chat choice, given a reply that calls a tool (a random tiny model never
    writes one, so the reply's tokens are made from text)."""
    from ascent.rollout.protocol import TokenOut
    from ascent.serve.responses import chat_choice

    tokenizer = load_tokenizer(tiny_model)
    text = 'Let me add.<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
    ids = tokenizer(text)["input_ids"] + [tokenizer.eos_token_id]
    out = TokenOut(ids, [0.0] * len(ids), "stop", [0] * len(ids))
    choice = chat_choice(0, tokenizer, [1], out, [], True, False, tools=True)
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "Let me add."
    [call] = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "add"
    assert json.loads(call["function"]["arguments"]) == {"a": 2, "b": 3}
    assert choice["token_ids"] == ids
    assert torch.tensor(ids).numel() == len(choice["token_ids"])


def test_serve_refuses_a_missing_model_directory(tmp_path, capsys):
    from ascent.cli import main

    assert main(["serve", str(tmp_path / "nope")]) == 2
    assert "is not a directory" in capsys.readouterr().out
