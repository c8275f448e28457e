"""The gateway's HTTP app: ``ascent serve``'s OpenAI routes, one set per live session, at

    /s/{session}/v1/models, /s/{session}/v1/chat/completions, /s/{session}/v1/completions

(so a session's ``base_url`` is ``http://HOST:PORT/s/{session}/v1``), served by the policy's
backend. The routes are ``ascent serve``'s own (chat templates, ``tools`` and Hermes tool
calls, streaming, token ids in every choice); what the gateway changes is at the one point
where a request reaches the engine (``RecordingServed``): the session's sampling settings
replace the request's, and each call's prompt ids and sampled tokens are recorded there, as
the engine read and wrote them. Any model name is served (agent code names the model it was
written for). One choice per call (``n=1``): an episode continues one history.

One more route is the gateway's own: ``POST {base_url}/reward`` with ``{"reward": r}`` (the
episode's reward, for an agent that does not return it) or ``{"reward": r, "call": k}`` (call
k's, from 0, or "last"), answered ``{"ok": true}``.

Statuses an agent may see: 404 for a URL that is no live episode's, 400 past the episode's
call budget, 400 for a request the engine would refuse (a prompt past the context), each with
an OpenAI-style error body, so the agent's client raises its own error types.
"""

from collections.abc import AsyncIterator

from fastapi import FastAPI, Request

from ascent.errors import InputError
from ascent.gateway.continuation import Turn
from ascent.gateway.sessions import (
    BadReport,
    CallBudgetSpent,
    ContextSpent,
    Session,
    SessionGone,
    Sessions,
)
from ascent.rollout.native_backend import NativeBackend
from ascent.rollout.protocol import TokenOut
from ascent.serve.app import request_error, server_error
from ascent.serve.chat import Chat
from ascent.serve.completions import Completions
from ascent.serve.schema import ChatRequest, CompletionRequest, RequestError
from ascent.serve.served import Served
from ascent.vision.prompts import IMAGE_PART_TYPES


class RecordingServed(Served):
    """``Served`` for one request of one session: the session's sampling, the call recorded,
    a chat call that continues the session's last one rendered as its continuation in
    tokens (``continuation.py``)."""

    def __init__(self, base: Served, session: Session) -> None:
        super().__init__(base.backend, base.model_name, base.request_timeout_s)
        self.session = session
        self.turn: Turn | None = None  # this request's chat turn, once rendered

    def render(self, messages: list[dict], tools: list[dict] | None) -> list[int]:
        if has_images(messages):
            # The route expands the image tokens after rendering: a continued prompt holds
            # earlier images' tokens expanded already. Rendered as sent (a new sample), and
            # the chain ends here.
            self.session.history.last = None
            return super().render(messages, tools)
        try:
            self.turn = self.session.history.start(messages, tools)
        except (InputError, ValueError) as bad:  # the template refuses the messages
            raise RequestError(f"messages: the chat template failed: {bad}", "messages") from None
        return self.turn.conversation.current.token_ids

    def check(self, body: CompletionRequest | ChatRequest) -> None:
        if body.n != 1:
            raise RequestError("an agent's call samples one choice (n=1)", "n")
        body.unsupported()

    def check_prompt(self, prompt: list[int], sampling: object, field: str = "prompt") -> None:
        sampling = self._sampling(prompt, sampling)  # no room: counted as the end there
        try:
            super().check_prompt(prompt, sampling, field)
        except RequestError:
            self.session.errors.append("length")  # past the context: the episode's end
            raise

    async def run(
        self, prompt: list[int], sampling: object, images: list[str] | None = None, top: int = 0
    ) -> list[TokenOut]:
        self._admit()
        sampling = self._sampling(prompt, sampling)
        outs = await super().run(prompt, sampling, images, top)
        self._record(prompt, outs[0], sampling, images)
        return outs

    async def token_items(
        self, prompt: list[int], sampling: object, images: list[str] | None = None, top: int = 0
    ) -> AsyncIterator[object]:
        self._admit()
        sampling = self._sampling(prompt, sampling)
        async for item in super().token_items(prompt, sampling, images, top):
            if isinstance(item, TokenOut):
                self._record(prompt, item, sampling, images)
            yield item

    def _record(
        self, prompt: list[int], out: TokenOut, sampling: object, images: list[str] | None
    ) -> None:
        self.session.record(prompt, out, images)
        if self.turn is not None:
            self.session.history.finish(self.turn, out, sampling.stop)

    def _sampling(self, prompt: list[int], sampling: object) -> object:
        try:
            return self.session.sampling_for(prompt, sampling)
        except ContextSpent as spent:
            raise RequestError(str(spent), "max_tokens") from None

    def _admit(self) -> None:
        try:
            self.session.admit()
        except CallBudgetSpent as spent:
            raise RequestError(str(spent), None, 400) from None


def build_gateway_app(
    backend: NativeBackend, sessions: Sessions, *, request_timeout_s: float | None = 600.0
) -> FastAPI:
    """The app serving ``backend`` to the live ``sessions``."""
    app = FastAPI(title="ascent gateway")
    app.exception_handler(RequestError)(request_error)
    app.exception_handler(Exception)(server_error)
    base = Served(backend, "policy", request_timeout_s)

    def served(session_id: str) -> RecordingServed:
        try:
            return RecordingServed(base, sessions.get(session_id))
        except SessionGone as gone:
            raise RequestError(str(gone), None, 404) from None

    async def models(session: str) -> dict:
        return await served(session).models()

    async def chat(session: str, request: Request) -> object:
        return await Chat(served(session)).chat(request)

    async def completions(session: str, request: Request) -> object:
        return await Completions(served(session)).completions(request)

    async def reward(session: str, request: Request) -> dict:
        try:
            body = await request.json()
        except ValueError:
            raise RequestError('the body must be JSON: {"reward": number}', None) from None
        if not isinstance(body, dict) or "reward" not in body:
            raise RequestError('the body must be {"reward": number, "call"?: ...}', "reward")
        try:
            served(session).session.report(body["reward"], body.get("call"))
        except BadReport as bad:
            raise RequestError(str(bad), bad.field) from None
        return {"ok": True}

    app.get("/s/{session}/v1/models")(models)
    app.post("/s/{session}/v1/reward")(reward)
    app.post("/s/{session}/v1/chat/completions")(chat)
    app.post("/s/{session}/v1/completions")(completions)
    return app


def has_images(messages: list[dict]) -> bool:
    """Whether any message holds an image part."""
    return any(
        isinstance(part, dict) and part.get("type") in IMAGE_PART_TYPES
        for message in messages
        if isinstance(message, dict) and isinstance(message.get("content"), list)
        for part in message["content"]
    )
