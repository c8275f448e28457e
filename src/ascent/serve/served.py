"""What every generation route of ``ascent serve`` shares: the backend, the name it serves
under, the per-request timeout, and the checks and calls made on the way to the engine."""

import asyncio
from collections.abc import AsyncIterator

from ascent.rollout.native_backend import NativeBackend
from ascent.rollout.protocol import TokenOut, render_chat
from ascent.rollout.scoring import TokenScores
from ascent.serve import responses as r
from ascent.serve.schema import ChatRequest, CompletionRequest, RequestError


class Served:
    """``backend``'s model under the name ``model_name``. A generation still running after
    ``request_timeout_s`` (None: no limit) fails with a ``TimeoutError`` (a 500, or an error
    event mid-stream)."""

    def __init__(
        self, backend: NativeBackend, model_name: str, request_timeout_s: float | None
    ) -> None:
        self.backend = backend
        self.model_name = model_name
        self.request_timeout_s = request_timeout_s
        self.tokenizer = backend.tokenizer
        self.engine = backend.engine
        self.eos = self.tokenizer.eos_token_id

    async def models(self) -> dict:
        # No docstring: FastAPI would publish it as the route's description.
        card = {
            "id": self.model_name,
            "object": "model",
            "created": 0,
            "owned_by": "ascent",
            "max_model_len": self.engine.max_model_len,
        }
        return {"object": "list", "data": [card]}

    def check(self, body: CompletionRequest | ChatRequest) -> None:
        """A 404 for another model's name, a 400 for a field that is not implemented."""
        if body.model != self.model_name:
            raise RequestError(
                f"the model {body.model!r} does not exist; this server serves {self.model_name!r}",
                "model",
                404,
            )
        body.unsupported()

    def render(self, messages: list[dict], tools: list[dict] | None) -> list[int]:
        """A chat request's prompt ids: its messages in the chat template (a 400 naming
        ``messages`` where the template refuses them)."""
        try:
            return render_chat(self.tokenizer, messages, tools)
        except Exception as bad:  # jinja errors name the template's complaint
            message = f"messages: the chat template failed: {bad}"
            raise RequestError(message, "messages") from None

    def check_prompt(self, prompt: list[int], sampling: object, field: str = "prompt") -> None:
        """A 400 naming ``field`` for a prompt the engine would refuse (too long, token ids
        outside the vocabulary), before it reaches the running batch."""
        try:
            self.engine.check_request(prompt, sampling, f"the {field}")
        except ValueError as bad:
            raise RequestError(str(bad), field) from None

    async def run(
        self,
        prompt: list[int],
        sampling: object,
        images: list[str] | None = None,
        top_logprobs: int = 0,
    ) -> list[TokenOut]:
        """The ``n`` completions of ``prompt`` (with its ``images``; each token's
        ``top_logprobs`` likeliest alternatives), within the request timeout."""
        return await asyncio.wait_for(
            self.backend.generate_n(
                prompt, sampling, images=images or None, top_logprobs=top_logprobs
            ),
            self.request_timeout_s,
        )

    async def score_prompt(self, prompt: list[int], top_k: int) -> TokenScores:
        """Teacher-forced log-probs of ``prompt`` with ``top_k`` alternatives per position
        (what ``echo`` reports), within the request timeout."""
        return await asyncio.wait_for(self.backend.score(prompt, top_k), self.request_timeout_s)

    async def token_items(
        self,
        prompt: list[int],
        sampling: object,
        images: list[str] | None = None,
        top_logprobs: int = 0,
    ) -> AsyncIterator[object]:
        """The backend's stream, each item within the request timeout; a client that
        disconnects closes it, which aborts the request. An engine failure ends the stream
        with an error event (the status line has gone out already)."""
        items = self.backend.stream(prompt, sampling, images, top_logprobs)
        try:
            while True:
                try:
                    item = await asyncio.wait_for(anext(items), self.request_timeout_s)
                except (RuntimeError, TimeoutError) as failed:
                    yield r.sse(r.error_body(500, f"{type(failed).__name__}: {failed}"))
                    return
                yield item
                if isinstance(item, TokenOut):
                    return
        finally:
            await items.aclose()
