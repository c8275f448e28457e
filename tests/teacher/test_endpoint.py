"""The teacher behind an OpenAI endpoint, against a real ``ascent serve`` on the tiny model (and
vLLM's CPU build, slow): its scores equal a local float32 forward, the vocabulary check tells a
shared vocabulary from another, and failures are prompt errors naming the URL. A small proxy in
a thread stands for servers that differ: one that refuses ``max_tokens`` 0 (vLLM before it
scored a bare prompt), one that fails with 5xx, one that ignores ``return_tokens_as_token_ids``."""

import json
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from ascent.batch import Batch
from ascent.errors import InputError
from ascent.models import build_tiny_model, load_causal_lm, load_tokenizer
from ascent.rollout.server_process import SERVED_NAME, free_port
from ascent.rollout.vllm_server import vllm_python
from ascent.teacher.endpoint import (
    EndpointTeacher,
    TeacherEndpointConfig,
    TeacherEndpointError,
    renderings,
)
from ascent.teacher.vocab import VocabularyMismatch
from tests.servers import ascent_serve, vllm_server

# (prompt, response, tool span of the response): prompts and responses of different lengths,
# one response cut at the first position (nothing to score), one with tool tokens inside.
ROWS = [
    ([5, 17, 33], [70, 71, 80, 90, 100, 3], (2, 4)),
    ([100], [9, 40], None),
    (list(range(40, 52)), [60], None),
    ([7, 8], [], None),
    ([200, 201, 202, 203], [10, 11, 12, 13, 14], (1, 3)),
]
K = 3


def rollout_batch(rows: list = ROWS, pad: int = 256) -> Batch:
    """The rollout layout: left-padded prompts, right-padded responses, ``response_mask`` 0 on
    tool spans (still tokens of the sequence: ``attention_mask`` 1)."""
    width_p = max(len(p) for p, _, _ in rows)
    width_r = max(len(r) for _, r, _ in rows)
    prompts = torch.full((len(rows), width_p), pad)
    responses = torch.full((len(rows), width_r), pad)
    prompt_mask = torch.zeros(len(rows), width_p, dtype=torch.long)
    attended = torch.zeros(len(rows), width_r, dtype=torch.long)
    for i, (prompt, response, _) in enumerate(rows):
        prompts[i, width_p - len(prompt) :] = torch.tensor(prompt)
        prompt_mask[i, width_p - len(prompt) :] = 1
        responses[i, : len(response)] = torch.tensor(response, dtype=torch.long)
        attended[i, : len(response)] = 1
    response_mask = attended.clone()
    for i, (_, _, tool) in enumerate(rows):
        if tool is not None:
            response_mask[i, tool[0] : tool[1]] = 0
    return Batch.from_dict(
        {
            "prompts": prompts,
            "prompt_mask": prompt_mask,
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": torch.cat([prompt_mask, attended], dim=1),
            "response_mask": response_mask,
        }
    )


def local_scores(model_dir: str, rows: list = ROWS) -> list[tuple]:
    """Per row: log p(response[t] | ...) (R_b,) and the top-K values and ids (R_b, K) of a
    transformers forward in float32."""
    model = load_causal_lm(model_dir).float()
    scores = []
    for prompt, response, _ in rows:
        with torch.no_grad():
            logits = model(torch.tensor([prompt + response])).logits[0].float()
        log_probs = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)  # predicting y
        chosen = log_probs.gather(-1, torch.tensor(response, dtype=torch.long)[:, None])
        scores.append((chosen.squeeze(-1), *log_probs.topk(K, dim=-1)))
    return scores


def assert_matches(scored: Batch, expected: list[tuple], rows: list = ROWS) -> None:
    width = scored["teacher_log_probs"].shape[1]
    assert scored["teacher_log_probs"].dtype == scored["teacher_top_log_probs"].dtype
    assert scored["teacher_top_ids"].dtype == torch.int64
    assert scored["teacher_top_ids"].shape == (len(rows), width, K)
    for row, ((_, response, _), (chosen, values, ids)) in enumerate(
        zip(rows, expected, strict=True)
    ):
        n = len(response)
        torch.testing.assert_close(scored["teacher_log_probs"][row, :n], chosen, atol=1e-4, rtol=0)
        assert scored["teacher_top_ids"][row, :n].tolist() == ids.tolist()
        torch.testing.assert_close(
            scored["teacher_top_log_probs"][row, :n], values, atol=1e-4, rtol=0
        )
        assert not scored["teacher_log_probs"][row, n:].any(), "padding holds 0"
        assert not scored["teacher_top_ids"][row, n:].any()
        assert not scored["teacher_top_log_probs"][row, n:].any()


@pytest.fixture(scope="module")
def served(tiny_model, tmp_path_factory):
    flags = ["--max-model-len", "512", "--served-model-name", "tiny"]
    with ascent_serve(tiny_model, tmp_path_factory.mktemp("serve") / "server.log", *flags) as s:
        yield s


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    return load_tokenizer(tiny_model)


@pytest.fixture(scope="module")
def expected(tiny_model):
    return local_scores(tiny_model)


def config(url: str, **fields) -> TeacherEndpointConfig:
    return TeacherEndpointConfig(base_url=url, model="tiny", **fields)


def test_scores_equal_a_local_float32_forward(served, tokenizer, expected):
    with EndpointTeacher(config(f"{served.url}/v1", max_concurrency=2), K, tokenizer) as teacher:
        scored = teacher.log_probs(rollout_batch())
        assert teacher.max_tokens == 0, "ascent serve scores a bare echoed prompt"
    assert sorted(scored.keys()) == [
        "teacher_log_probs",
        "teacher_top_ids",
        "teacher_top_log_probs",
    ]
    assert scored["teacher_log_probs"].shape == (len(ROWS), 6)
    assert scored["teacher_log_probs"].dtype == torch.float32
    assert_matches(scored, expected)


def test_top_k_zero_still_gives_the_likeliest_token(served, tokenizer, expected):
    with EndpointTeacher(config(f"{served.url}/v1"), 0, tokenizer) as teacher:
        scored = teacher.log_probs(rollout_batch())
    assert scored["teacher_top_ids"].shape == (len(ROWS), 6, 1)
    for row, (_, values, ids) in enumerate(expected):
        n = len(ROWS[row][1])
        assert scored["teacher_top_ids"][row, :n, 0].tolist() == ids[:, 0].tolist()
        torch.testing.assert_close(
            scored["teacher_top_log_probs"][row, :n, 0], values[:, 0], atol=1e-4, rtol=0
        )


def rotated(tokenizer: object) -> PreTrainedTokenizerFast:
    """The tokenizer with its byte tokens' ids rotated by one: same tokens, other ids."""
    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    vocab = spec["model"]["vocab"]
    spec["model"]["vocab"] = {token: (index + 1) % len(vocab) for token, index in vocab.items()}
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)))


def test_the_vocabulary_check_tells_a_shared_vocabulary_from_another(served, tiny_model):
    url = f"{served.url}/v1"
    same = load_tokenizer(tiny_model)  # loaded apart from the server's: equal, not identical
    with EndpointTeacher(config(url), K, same) as teacher:
        teacher.check_vocabulary()
    with pytest.raises(VocabularyMismatch) as mismatch:
        EndpointTeacher(config(url), K, rotated(same))
    message = str(mismatch.value)
    first = r"differs from the policy's at token id \d+ \(teacher .+ vs policy .+; "
    assert re.search(first + r"\d+ of \d+ compared ids differ\)", message)
    assert "both must share a vocabulary" in message and url in message
    larger = load_tokenizer(tiny_model)
    larger.add_tokens([f"<extra_{i}>" for i in range(8)])  # ids past the teacher's rows
    with pytest.raises(VocabularyMismatch, match="a teacher with a smaller vocabulary refuses"):
        EndpointTeacher(config(url), K, larger)


def test_more_top_log_probs_than_the_server_returns_is_an_error_at_start(served, tokenizer):
    with pytest.raises(TeacherEndpointError, match=re.escape("lower teacher.top_k")):
        EndpointTeacher(config(f"{served.url}/v1"), 21, tokenizer)


def test_a_tokens_text_is_compared_as_servers_show_it(tokenizer):
    """Decoded alone, a SentencePiece piece loses its leading space (vLLM restores it): both
    texts are the token's; a byte-level token's text is what decoding shows."""
    core = Tokenizer(models.WordLevel({"\u2581the": 0, "the": 1, "<unk>": 2}, unk_token="<unk>"))
    core.pre_tokenizer, core.decoder = pre_tokenizers.Metaspace(), decoders.Metaspace()
    pieces = PreTrainedTokenizerFast(tokenizer_object=core)
    assert {"the", " the"} <= renderings(pieces, 0)
    assert " the" not in renderings(pieces, 1), "another token: no space to restore"
    space = tokenizer.convert_tokens_to_ids("\u0120")  # byte-level's space
    assert " " in renderings(tokenizer, space) and "!" not in renderings(tokenizer, space)


def test_an_unreachable_or_silent_endpoint_is_a_prompt_error_naming_its_url(tokenizer):
    url = f"http://127.0.0.1:{free_port()}/v1"
    began = time.monotonic()
    with pytest.raises(TeacherEndpointError, match=re.escape(f"{url}/completions")) as failed:
        EndpointTeacher(config(url, retries=1), K, tokenizer)
    assert "no connection" in str(failed.value) and "start the teacher's server" in str(
        failed.value
    )
    with socket.socket() as silent:  # accepts connections (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        with pytest.raises(
            TeacherEndpointError, match=re.escape("no reply within timeout_s=0.3 s")
        ):
            EndpointTeacher(config(url, timeout_s=0.3, retries=1), K, tokenizer)
    assert time.monotonic() - began < 5


def test_rows_with_images_are_refused_naming_the_local_teacher(served, tokenizer):
    batch = rollout_batch()
    batch = batch.assign(images=[["data:image/png;base64,AAAA"]] + [[] for _ in ROWS[1:]])
    with EndpointTeacher(config(f"{served.url}/v1"), K, tokenizer) as teacher:
        with pytest.raises(InputError, match="local teacher checkpoint"):
            teacher.log_probs(batch)
        teacher.log_probs(batch.assign(images=[[] for _ in ROWS]))  # no row has one: fine


def test_the_api_key_environment_variable_must_be_set(tokenizer, monkeypatch):
    monkeypatch.delenv("TEACHER_TEST_KEY", raising=False)
    with pytest.raises(InputError, match="TEACHER_TEST_KEY"):
        EndpointTeacher(config("http://127.0.0.1:1/v1", api_key_env="TEACHER_TEST_KEY"), K, None)


class Proxy(ThreadingHTTPServer):
    """Forwards to ``target`` as a server that differs would: ``mode`` "old" refuses
    ``max_tokens`` 0 as vLLM did, "fail" answers 500, "text" drops return_tokens_as_token_ids."""

    daemon_threads, block_on_close, request_queue_size = True, False, 64

    def __init__(self, target: str, mode: str) -> None:
        super().__init__(("127.0.0.1", 0), ProxyHandler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}/v1"
        self.target, self.mode, self.requests = target, mode, []


class ProxyHandler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        server = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        server.requests.append(body)
        if server.mode == "fail":
            status, payload = 500, b'{"error": "overloaded"}'
        elif server.mode == "old" and body["max_tokens"] == 0:
            message = "max_tokens must be at least 1, got 0."
            status, payload = 400, json.dumps({"error": {"message": message}}).encode()
        else:
            if server.mode == "text":
                body.pop("return_tokens_as_token_ids")
            reply = httpx.post(f"{server.target}{self.path}", json=body, timeout=60)
            status, payload = reply.status_code, reply.content
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def proxy(served):
    started = []

    def start(mode: str) -> Proxy:
        server = Proxy(served.url, mode)
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.shutdown()
        server.server_close()


def test_a_server_that_refuses_max_tokens_zero_gets_one_and_the_token_is_dropped(
    proxy, tokenizer, expected
):
    old = proxy("old")
    with EndpointTeacher(config(old.url), K, tokenizer) as teacher:
        scored = teacher.log_probs(rollout_batch())
    assert teacher.max_tokens == 1
    assert [r["max_tokens"] for r in old.requests[:2]] == [0, 1]
    assert {r["max_tokens"] for r in old.requests[2:]} == {1}
    assert_matches(scored, expected)


def test_5xx_replies_are_retried_then_an_error(proxy, tokenizer):
    failing = proxy("fail")
    with pytest.raises(TeacherEndpointError, match="failed 3 times, last with HTTP 500"):
        EndpointTeacher(config(failing.url, retries=2), K, tokenizer)
    assert len(failing.requests) == 3


def test_a_server_without_token_ids_in_its_top_log_probs_is_named(proxy, tokenizer):
    text = proxy("text")
    named = pytest.raises(TeacherEndpointError, match="return_tokens_as_token_ids")
    with EndpointTeacher(config(text.url), K, tokenizer) as teacher, named:  # the probe: text
        teacher.log_probs(rollout_batch())


@pytest.mark.slow
@pytest.mark.integration
def test_the_same_teacher_against_vllm(tmp_path):
    try:
        python = vllm_python()
    except FileNotFoundError as missing:
        pytest.skip(str(missing))
    # head_dim 32: vLLM's CPU attention has no kernel for the default tiny model's 16
    model_dir = str(build_tiny_model(tmp_path / "model", heads=2, kv_heads=1))
    with vllm_server(model_dir, tmp_path / "logs", python, 4) as backend:
        settings = TeacherEndpointConfig(base_url=f"{backend.urls[0]}/v1", model=SERVED_NAME)
        with EndpointTeacher(settings, K, load_tokenizer(model_dir)) as teacher:
            scored = teacher.log_probs(rollout_batch())
            assert teacher.max_tokens == 0, "this vLLM scores a bare echoed prompt"
    assert_matches(scored, local_scores(model_dir))


def test_a_run_distils_from_the_served_teacher(served, tiny_model, prompts, tmp_path):
    """``teacher.endpoint`` in a run: the served teacher is the student itself, so each
    sampled token's log-prob is the student's own (the run samples at temperature 1, as
    servers score), and the run trains on the term."""
    from ascent.trainer.rl.loop import train_rl
    from tests.trainer.rl_setup import config as run_config
    from tests.trainer.rl_setup import metric

    run = run_config(
        tiny_model,
        prompts,
        tmp_path,
        "trainer.total_steps=2",
        f"teacher.endpoint.base_url={served.url}/v1",
        "teacher.endpoint.model=tiny",
        "teacher.top_k=2",
        "teacher.forward_kl_top_k=1",
    )
    assert train_rl(run)["steps"] == 2
    assert abs(metric(tmp_path, "distill/reverse_kl")[0]) < 1e-4
    assert len(metric(tmp_path, "actor/distill_forward_kl_top_k")) == 2
    assert metric(tmp_path, "timing_s/teacher")[0] > 0
