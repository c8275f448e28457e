"""Who may call ``ascent serve``: an API key for the data plane, an admin token for the control
plane, and no start beyond loopback without the latter.

- ``/v1/...`` needs ``Authorization: Bearer KEY`` when an API key is set (``--api-key``,
  ``$ASCENT_API_KEY``), as vLLM's ``--api-key`` (which guards ``/v1`` paths alone): the
  official clients send their ``api_key`` that way.
- ``/health`` is always open: load balancers and ``ServerProcess.start`` poll it, and it
  tells nothing but whether the engine serves.
- Every other path needs the admin token when one is set (``--admin-token``,
  ``$ASCENT_ADMIN_TOKEN``): the control routes (``/update_weights`` loads any directory on the
  server's disk, ``/pause`` and ``/sleep`` stop it serving) and FastAPI's docs. Deny by
  default, so a control route added later is guarded without being listed here. vLLM leaves
  its dev-mode control routes open; we do not, because RL servers are reached across nodes.
- Bound beyond loopback, the server refuses to start without an admin token; on loopback
  the control routes stay open unless a token is set (a local run needs no setup, and the
  rollout role that starts a server gives it a fresh token anyway).

Tokens are compared as SHA-256 digests with ``hmac.compare_digest``: constant time, whatever
the length or the characters of what a client sends.
"""

import hashlib
import hmac
import ipaddress
import os
from dataclasses import dataclass

from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from ascent.errors import UserError
from ascent.rollout.serve_args import ADMIN_TOKEN_ENV, API_KEY_ENV
from ascent.serve.responses import error_body

OPEN_PATHS = frozenset({"/health"})
# Each key's name in a 401, with where the server takes it from and what a client sends.
KEYS = {
    "API key": ("--api-key", API_KEY_ENV, "KEY"),
    "admin token": ("--admin-token", ADMIN_TOKEN_ENV, "TOKEN"),
}
MAKE_TOKEN = 'python -c "import secrets; print(secrets.token_urlsafe(32))"'


@dataclass(frozen=True)
class Access:
    """The server's keys, each None when not set: ``api_key`` guards ``/v1``,
    ``admin_token`` every other path but ``/health``."""

    api_key: str | None = None
    admin_token: str | None = None

    @property
    def guarded(self) -> bool:
        return self.api_key is not None or self.admin_token is not None

    def describe(self) -> str:
        """Which routes need which key, for the server's start-up line."""
        data = "/v1 needs the API key" if self.api_key else "/v1 open"
        control = (
            "control routes need the admin token" if self.admin_token else "control routes open"
        )
        return f"{data}; {control}; /health open"


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine alone: 127.0.0.0/8, ::1, localhost.
    Any other name may resolve to an outside address, so it counts as outside."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def access_for(host: str, api_key: str | None = None, admin_token: str | None = None) -> Access:
    """The keys of a server bound to ``host``: the flags' values, else the environment's (an
    empty value is no key). Raises ``UserError`` for a host beyond loopback without an admin
    token: anyone who reaches the port could load any directory of this machine as weights."""
    api_key = api_key or os.environ.get(API_KEY_ENV) or None
    admin_token = admin_token or os.environ.get(ADMIN_TOKEN_ENV) or None
    if admin_token is None and not is_loopback(host):
        raise UserError(
            f"--host {host} reaches beyond this machine, so the control routes "
            "(/update_weights loads any directory on its disk, /pause, /sleep) need an admin "
            f"token: export {ADMIN_TOKEN_ENV}=TOKEN (or pass --admin-token TOKEN, which other "
            f"users can read in the process list), with a TOKEN made by {MAKE_TOKEN}; clients "
            "send it as `Authorization: Bearer TOKEN`. Or serve on 127.0.0.1."
        )
    return Access(api_key, admin_token)


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def bearer_token(scope: Scope) -> str | None:
    """The token of the request's ``Authorization: Bearer TOKEN`` header, if any."""
    scheme, _, token = Headers(scope=scope).get("authorization", "").partition(" ")
    return token if scheme.lower() == "bearer" and token else None


class AccessControl:
    """ASGI middleware that answers 401 (an OpenAI-style error body) to a request without the
    key its path needs (see the module docstring), before the route reads its body. Plain
    ASGI rather than Starlette's ``BaseHTTPMiddleware``, which would buffer streamed
    responses through a task of its own."""

    def __init__(self, app: ASGIApp, access: Access) -> None:
        self.app = app
        self.keys = {
            "API key": _digest(access.api_key) if access.api_key else None,
            "admin token": _digest(access.admin_token) if access.admin_token else None,
        }

    def needs(self, path: str) -> str | None:
        """The name of the key a request to ``path`` must bring; None: it may come without."""
        if path in OPEN_PATHS:
            return None
        name = "API key" if path == "/v1" or path.startswith("/v1/") else "admin token"
        return name if self.keys[name] is not None else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            name = self.needs(scope["path"])
            if name is not None:
                given = bearer_token(scope)
                if given is None or not hmac.compare_digest(_digest(given), self.keys[name]):
                    await unauthorized(name)(scope, receive, send)
                    return
        await self.app(scope, receive, send)


def unauthorized(name: str) -> JSONResponse:
    """The 401 for a request without the right ``name`` (API key or admin token)."""
    flag, env, placeholder = KEYS[name]
    message = (
        f"this route needs the server's {name} ({flag} or ${env}), sent as the header "
        f"`Authorization: Bearer {placeholder}`"
    )
    return JSONResponse(
        error_body(401, message), status_code=401, headers={"WWW-Authenticate": "Bearer"}
    )
