"""Bad requests fail alone: each gets an OpenAI-style 4xx at once (token ids outside the
vocabulary included, which used to hang their client and mark the server degraded for good),
the next good request is served, ``/health`` stays "ok", and SIGTERM still stops the server
in seconds, even with a long generation in flight."""

import signal
import threading
import time

import httpx
import openai
import pytest

from ascent.serve.main import GRACE_S

pytestmark = pytest.mark.integration
ANSWER_WITHIN_S = 10  # every bad request is answered at once; a hang fails the test here


def post(served, route, **kwargs):
    return httpx.post(f"{served.url}{route}", timeout=ANSWER_WITHIN_S, **kwargs)


def completion(**fields):
    return {"model": "tiny", "max_tokens": 4, **fields}


BAD_COMPLETIONS = [  # (body, status, words the message must contain)
    (completion(prompt=[999_999_999]), 400, ["token id 999999999 at position 0", "[0, 259)"]),
    (completion(prompt=[-5, 3]), 400, ["token id -5 at position 0", "vocabulary size"]),
    (completion(prompt=[[1, 2], [3, 400]]), 400, ["token id 400 at position 1"]),
    (completion(prompt="x", max_tokens=-1), 400, ["max_tokens"]),
    (completion(prompt="x", n=0), 400, ["n:"]),
    (completion(prompt="x", temperature=-1), 400, ["temperature"]),
    (completion(prompt="x", presence_penalty=0.5), 400, ["presence_penalty"]),
    (completion(prompt="x", logprobs=21), 400, ["logprobs"]),
    (completion(prompt="x", max_tokens=0), 400, ["max_tokens 0", "echo"]),
    (completion(prompt="x", echo=True, logprobs=0, stream=True), 400, ["echo", "stream"]),
    (completion(prompt="x" * 1_000_000), 400, ["max_model_len"]),
    (completion(prompt=[1] * 600), 400, ["511"]),
    ({**completion(prompt="x"), "model": "other"}, 404, ["serves 'tiny'"]),
]


def test_each_bad_request_is_answered_and_the_next_good_one_is_served(served):
    for body, status, words in BAD_COMPLETIONS:
        answer = post(served, "/v1/completions", json=body)
        assert answer.status_code == status, (body, answer.text)
        message = answer.json()["error"]["message"]
        assert all(word in message for word in words), message
        good = post(served, "/v1/completions", json=completion(prompt=[5, 6], temperature=0))
        assert good.status_code == 200 and len(good.json()["choices"][0]["token_ids"]) == 4
    chat = {"model": "tiny", "messages": [], "max_tokens": 4}
    assert post(served, "/v1/chat/completions", json=chat).status_code == 400
    chat["messages"] = [{"role": "user", "content": "hi"}]
    answer = post(served, "/v1/chat/completions", json={**chat, "top_logprobs": 2})
    assert answer.status_code == 400, answer.text
    assert "top_logprobs needs logprobs" in answer.json()["error"]["message"]
    bad_json = post(served, "/v1/completions", content=b"{not json")
    assert bad_json.status_code == 400 and "JSON" in bad_json.json()["error"]["message"]
    health = httpx.get(f"{served.url}/health", timeout=ANSWER_WITHIN_S)
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert health.json()["failed_steps"] == 0, "no bad request reached the engine"


def test_the_official_client_gets_typed_errors(served):
    client = openai.OpenAI(base_url=f"{served.url}/v1", api_key="none", max_retries=0)
    with pytest.raises(openai.NotFoundError, match="serves 'tiny'"):
        client.completions.create(model="other", prompt="x")
    with pytest.raises(openai.BadRequestError, match="vocabulary size"):
        client.completions.create(model="tiny", prompt=[999_999_999])
    assert client.completions.create(model="tiny", prompt="x", max_tokens=2).choices


def test_sigterm_stops_the_server_with_a_generation_in_flight(served):
    """Runs last in this module: it stops the module's server (conftest.py)."""
    body = completion(prompt=[5, 6], max_tokens=500, temperature=1.0, stream=True)
    streaming = threading.Thread(
        target=lambda: httpx.post(f"{served.url}/v1/completions", json=body, timeout=60),
        daemon=True,
    )
    streaming.start()
    time.sleep(1.0)  # the stream is decoding
    began = time.monotonic()
    served.process.send_signal(signal.SIGTERM)
    served.process.wait(timeout=GRACE_S + 10)
    assert time.monotonic() - began < GRACE_S + 10
