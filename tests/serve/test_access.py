"""Who may call ``ascent serve``: beyond loopback it refuses to start without an admin token;
with one, the control routes answer 401 without it; with ``--api-key``, the ``/v1`` routes
answer 401 to the official ``openai`` client without the key or with a wrong one; ``/health``
stays open; and the ``serve`` rollout backend sends what it is configured with."""

import asyncio
import os
import subprocess
import sys

import httpx
import openai
import pytest
import torch

from ascent.models import load_causal_lm
from ascent.rollout import SamplingParams
from ascent.rollout.backends import start_backend
from ascent.rollout.serve_args import ADMIN_TOKEN_ENV, API_KEY_ENV
from ascent.rollout.server_process import SERVED_NAME, free_port
from ascent.rollout.weight_files import write_weights
from ascent.serve.access import access_for, is_loopback
from ascent.workers.rollout import RolloutConfig
from tests.servers import ascent_serve

pytestmark = pytest.mark.integration
KEY, TOKEN = "key-for-v1", "token-for-control"


@pytest.fixture(scope="module")
def guarded(tiny_model, tmp_path_factory):
    """``ascent serve`` on every interface, its API key a flag, its admin token from the
    environment (as a user should pass it: out of the process list)."""
    flags = ["--host", "0.0.0.0", "--api-key", KEY, "--served-model-name", SERVED_NAME]
    log = tmp_path_factory.mktemp("guarded") / "server.log"
    with ascent_serve(tiny_model, log, *flags, env={ADMIN_TOKEN_ENV: TOKEN}) as server:
        yield server


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.8.0.1", True), ("::1", True), ("localhost", True),
     ("0.0.0.0", False), ("::", False), ("10.0.0.5", False), ("myhost", False)],
)  # fmt: skip
def test_loopback_is_127_slash_8_ipv6_one_and_localhost(host, loopback):
    assert is_loopback(host) is loopback


def test_keys_come_from_the_flags_else_the_environment(monkeypatch):
    monkeypatch.setenv(API_KEY_ENV, "from-env")
    monkeypatch.setenv(ADMIN_TOKEN_ENV, "")  # empty: no token, so loopback alone may serve
    assert access_for("127.0.0.1").api_key == "from-env"
    assert access_for("127.0.0.1", api_key="flag").api_key == "flag"
    assert access_for("127.0.0.1").admin_token is None
    assert access_for("0.0.0.0", admin_token="flag").admin_token == "flag"


def test_beyond_loopback_without_an_admin_token_it_refuses_to_start(tiny_model):
    env = {k: v for k, v in os.environ.items() if k != ADMIN_TOKEN_ENV}
    command = [sys.executable, "-m", "ascent", "serve", tiny_model, "--host", "0.0.0.0"]
    command += ["--port", str(free_port())]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    message = done.stderr.strip()
    assert message.startswith("ascent serve: --host 0.0.0.0")
    for words in (ADMIN_TOKEN_ENV, "--admin-token", "secrets.token_urlsafe(32)"):
        assert words in message


def test_health_is_open(guarded):
    assert httpx.get(f"{guarded.url}/health").status_code == 200


@pytest.mark.parametrize("headers", [{}, bearer("wrong"), bearer(KEY), {"Authorization": TOKEN}])
@pytest.mark.parametrize(
    ("method", "route"),
    [("POST", "/pause"), ("POST", "/update_weights"), ("GET", "/weight_version"),
     ("POST", "/sleep"), ("GET", "/docs")],
)  # fmt: skip
def test_control_routes_refuse_a_request_without_the_admin_token(guarded, method, route, headers):
    """No token, a wrong one, the API key, the token without ``Bearer``: each is a 401 with
    an OpenAI-style error body, answered before the route runs (``/update_weights`` with no
    body would be a 400)."""
    answer = httpx.request(method, f"{guarded.url}{route}", headers=headers)
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"] == "Bearer"
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == 401
    assert ADMIN_TOKEN_ENV in error["message"] and "Authorization: Bearer" in error["message"]


def test_control_routes_work_with_the_admin_token(guarded, tiny_model, tmp_path):
    def call(route, **kwargs):
        answer = httpx.post(f"{guarded.url}{route}", headers=bearer(TOKEN), timeout=60, **kwargs)
        assert answer.status_code == 200, answer.text
        return answer.json()

    assert call("/pause", params={"mode": "keep"}) == {"status": "paused", "mode": "keep"}
    path = str(write_weights(tmp_path, load_causal_lm(tiny_model).named_parameters()))
    assert call("/update_weights", json={"path": path, "version": 3}) == {"weight_version": 3}
    assert call("/resume") == {"status": "running"}


def test_v1_routes_need_the_api_key(guarded):
    """No key is a 401; the official client sends its ``api_key`` as the bearer token, and a
    wrong one (the admin token included) is its ``AuthenticationError``; the key is served."""
    for method, route in [("GET", "/v1/models"), ("POST", "/v1/chat/completions")]:
        answer = httpx.request(method, f"{guarded.url}{route}")
        assert answer.status_code == 401
        assert API_KEY_ENV in answer.json()["error"]["message"]
    for key in ("wrong", TOKEN):
        client = openai.OpenAI(base_url=f"{guarded.url}/v1", api_key=key, max_retries=0)
        with pytest.raises(openai.AuthenticationError, match="API key"):
            client.models.list()
        with pytest.raises(openai.AuthenticationError):
            client.completions.create(model=SERVED_NAME, prompt=[5, 17], max_tokens=2)
    client = openai.OpenAI(base_url=f"{guarded.url}/v1", api_key=KEY, max_retries=0)
    assert [card.id for card in client.models.list().data] == [SERVED_NAME]
    done = client.completions.create(model=SERVED_NAME, prompt=[5, 17], max_tokens=2)
    assert len(done.choices[0].model_extra["token_ids"]) == 2


def test_the_serve_backend_sends_the_keys_of_its_environment(guarded, tiny_model, monkeypatch):
    """``rollout.server.urls``: the backend sends ``$ASCENT_API_KEY`` on /v1 and
    ``$ASCENT_ADMIN_TOKEN`` on the control routes; without the token it says which variable
    to set."""
    config = RolloutConfig.model_validate(
        {"model": {"path": tiny_model}, "engine": "serve", "server": {"urls": [guarded.url]}}
    )
    monkeypatch.setenv(API_KEY_ENV, KEY)
    monkeypatch.setenv(ADMIN_TOKEN_ENV, TOKEN)
    backend = start_backend(config, None, rank=0, device=torch.device("cpu"))
    [out] = backend.generate_batch([[5, 17, 33]], SamplingParams(temperature=0, max_new_tokens=3))
    assert len(out.token_ids) == 3
    asyncio.run(backend.close())
    monkeypatch.delenv(ADMIN_TOKEN_ENV)
    with pytest.raises(RuntimeError, match=f"refused the admin token: set \\${ADMIN_TOKEN_ENV}"):
        start_backend(config, None, rank=0, device=torch.device("cpu"))
