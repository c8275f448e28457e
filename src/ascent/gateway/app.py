"""The gateway's HTTP app: ``ascent serve``'s OpenAI routes, one set per live session, at

    /s/{session}/v1/models, /s/{session}/v1/chat/completions, /s/{session}/v1/completions

(so a session's ``base_url`` is ``http://HOST:PORT/s/{session}/v1``), served by the policy's
backend. The routes are ``ascent serve``'s own (chat templates, ``tools`` and Hermes tool
calls, streaming, token ids in every choice); what the gateway changes is at the one point
where a request reaches the engine (``RecordingServed``): the session's sampling settings
replace the request's, and each call's prompt ids and sampled tokens are recorded there, as
the engine read and wrote them. Any model name is served (agent code names the model it was
written for). One choice per call (``n=1``): an episode continues one history.

Statuses an agent may see: 404 for a URL that is no live episode's, 400 past the episode's
call budget, 400 for a request the engine would refuse (a prompt past the context), each with
an OpenAI-style error body, so the agent's client raises its own error types.
"""

from collections.abc import AsyncIterator

from fastapi import FastAPI, Request

from ascent.gateway.sessions import CallBudgetSpent, Session, SessionGone, Sessions
from ascent.rollout.native_backend import NativeBackend
from ascent.rollout.protocol import TokenOut
from ascent.serve.app import request_error, server_error
from ascent.serve.chat import Chat
from ascent.serve.completions import Completions
from ascent.serve.schema import ChatRequest, CompletionRequest, RequestError
from ascent.serve.served import Served


class RecordingServed(Served):
    """``Served`` for one session: the session's sampling, every call recorded."""

    def __init__(self, base: Served, session: Session) -> None:
        super().__init__(base.backend, base.model_name, base.request_timeout_s)
        self.session = session

    def check(self, body: CompletionRequest | ChatRequest) -> None:
        if body.n != 1:
            raise RequestError("an agent's call samples one choice (n=1)", "n")
        body.unsupported()

    def check_prompt(self, prompt: list[int], sampling: object, field: str = "prompt") -> None:
        super().check_prompt(prompt, self.session.sampling_for(sampling), field)

    async def run(
        self, prompt: list[int], sampling: object, images: list[str] | None = None, top: int = 0
    ) -> list[TokenOut]:
        self._admit()
        outs = await super().run(prompt, self.session.sampling_for(sampling), images, top)
        self.session.record(prompt, outs[0])
        return outs

    async def token_items(
        self, prompt: list[int], sampling: object, images: list[str] | None = None, top: int = 0
    ) -> AsyncIterator[object]:
        self._admit()
        items = super().token_items(prompt, self.session.sampling_for(sampling), images, top)
        async for item in items:
            if isinstance(item, TokenOut):
                self.session.record(prompt, item)
            yield item

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

    app.get("/s/{session}/v1/models")(models)
    app.post("/s/{session}/v1/chat/completions")(chat)
    app.post("/s/{session}/v1/completions")(completions)
    return app
