"""``ascent serve``: an OpenAI-compatible HTTP server over the native engine.

Data plane: ``/v1/models``, ``/v1/completions`` (text or token-id prompts),
``/v1/chat/completions`` (the model's chat template, ``tools``, Hermes tool calls parsed into
``tool_calls``); ``n``, stop strings and tokens, ``logprobs``, ``stream``. Every choice also
carries ``token_ids``, ``prompt_token_ids`` and ``weight_versions`` (one per token), so an RL
client trains on exactly what was sampled. Control plane, as in vLLM's dev mode:
``POST /pause?mode=abort|wait|keep``, ``/resume``, ``/update_weights`` (``{"path": DIR}``),
``/sleep``, ``/wake_up``; ``GET /weight_version``, ``/health``.

Every request is served concurrently: each becomes engine requests that join the running
batch. A bad request gets an OpenAI-style error body (``{"error": {"message", "type",
"param", "code"}}``) with a 4xx status, before it reaches the engine (token ids outside the
vocabulary included); an engine failure fails only the requests it concerned, with a 500 (or,
mid-stream, an error event), and the server keeps serving.
"""

import asyncio
import json
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ValidationError

from ascent.rollout.native_backend import NativeBackend
from ascent.rollout.protocol import TokenOut, render_chat
from ascent.serve import responses as r
from ascent.serve.schema import ChatRequest, CompletionRequest, RequestError, UpdateWeightsRequest


def error_body(status: int, message: str, param: str | None = None) -> dict:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


def error(status: int, message: str, param: str | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, message, param), status_code=status)


async def parse(request: Request, model: type[BaseModel]) -> BaseModel:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as bad:
        raise RequestError(f"the body is not valid JSON: {bad}") from None
    if not isinstance(body, dict):
        raise RequestError("the body must be a JSON object")
    try:
        return model.model_validate(body)
    except ValidationError as bad:
        first = bad.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        raise RequestError(f"{field}: {first['msg']}", field) from None


def build_app(
    backend: NativeBackend, model_name: str, *, request_timeout_s: float | None = 600.0
) -> FastAPI:
    """The FastAPI app serving ``backend`` under the name ``model_name``."""
    app = FastAPI(title="ascent serve")
    tokenizer = backend.tokenizer
    engine = backend.engine
    eos = tokenizer.eos_token_id

    @app.exception_handler(RequestError)
    async def request_error(_: Request, bad: RequestError) -> JSONResponse:
        return error(bad.status, str(bad), bad.param)

    @app.exception_handler(Exception)
    async def server_error(_: Request, bad: Exception) -> JSONResponse:
        return error(500, f"{type(bad).__name__}: {bad}")

    def check(body: CompletionRequest | ChatRequest) -> None:
        if body.model != model_name:
            raise RequestError(
                f"the model {body.model!r} does not exist; this server serves {model_name!r}",
                "model",
                404,
            )
        body.unsupported()

    def check_prompt(prompt: list[int], sampling: object, field: str = "prompt") -> None:
        try:
            engine.check_request(prompt, sampling, f"the {field}")
        except ValueError as bad:
            raise RequestError(str(bad), field) from None

    async def run(prompt: list[int], sampling: object) -> list[TokenOut]:
        return await asyncio.wait_for(backend.generate_n(prompt, sampling), request_timeout_s)

    # -- data plane -------------------------------------------------------------------------

    @app.get("/v1/models")
    async def models() -> dict:
        card = {
            "id": model_name,
            "object": "model",
            "created": 0,
            "owned_by": "ascent",
            "max_model_len": engine.max_model_len,
        }
        return {"object": "list", "data": [card]}

    @app.post("/v1/completions")
    async def completions(request: Request) -> object:
        body = await parse(request, CompletionRequest)
        check(body)
        prompts = tokenize_prompts(tokenizer, body.prompt)
        sampling = body.sampling(body.max_tokens, 16, eos)
        for prompt in prompts:
            check_prompt(prompt, sampling)
        stop, logprobs = sampling.stop, body.logprobs is not None
        if body.stream:
            if len(prompts) != 1 or body.n != 1:
                raise RequestError("stream needs one prompt and n=1", "stream")
            stream = completion_stream(body, prompts[0], sampling, stop, logprobs)
            return StreamingResponse(stream, media_type="text/event-stream")
        groups = await asyncio.gather(*(run(p, sampling) for p in prompts))
        choices = [
            r.completion_choice(
                i * body.n + j, tokenizer, prompts[i], out, stop, body.skip_special_tokens, logprobs
            )
            for i, outs in enumerate(groups)
            for j, out in enumerate(outs)
        ]
        generated = sum(len(o.token_ids) for outs in groups for o in outs)
        return r.envelope(
            "text_completion",
            r.new_id("cmpl"),
            model_name,
            choices,
            usage=r.usage(sum(map(len, prompts)), generated),
        )

    async def completion_stream(
        body: CompletionRequest, prompt: list[int], sampling: object, stop: list, logprobs: bool
    ) -> AsyncIterator[str]:
        request_id = r.new_id("cmpl")
        text = r.TextStream(tokenizer, stop, body.skip_special_tokens)
        async for item in token_items(prompt, sampling):
            if isinstance(item, str):  # an error event
                yield item
                return
            if isinstance(item, TokenOut):
                tail = text.finish(item)
                choice = {"index": 0, "text": tail, "finish_reason": item.finish_reason}
                yield r.sse(r.envelope("text_completion", request_id, model_name, [choice]))
                yield r.sse("[DONE]")
                return
            token, log_prob, version = item
            choice = {
                "index": 0,
                "text": text.push(token),
                "finish_reason": None,
                "token_ids": [token],
                "weight_versions": [version],
                "logprobs": {"token_logprobs": [log_prob]} if logprobs else None,
            }
            yield r.sse(r.envelope("text_completion", request_id, model_name, [choice]))

    async def token_items(prompt: list[int], sampling: object) -> AsyncIterator[object]:
        """The backend's stream, each item within the request timeout; a client that
        disconnects closes it, which aborts the request. An engine failure ends the stream
        with an error event (the status line has gone out already)."""
        items = backend.stream(prompt, sampling)
        try:
            while True:
                try:
                    item = await asyncio.wait_for(anext(items), request_timeout_s)
                except (RuntimeError, TimeoutError) as failed:
                    yield r.sse(error_body(500, f"{type(failed).__name__}: {failed}"))
                    return
                yield item
                if isinstance(item, TokenOut):
                    return
        finally:
            await items.aclose()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> object:
        body = await parse(request, ChatRequest)
        check(body)
        tools = body.tools if body.tool_choice != "none" else None
        try:
            prompt = render_chat(tokenizer, body.messages, tools)
        except Exception as bad:  # jinja errors name the template's complaint
            raise RequestError(f"messages: the chat template failed: {bad}", "messages") from None
        # Without a limit the reply may fill the context (the engine stops it there).
        limit = body.max_completion_tokens or body.max_tokens or engine.max_model_len
        sampling = body.sampling(limit, limit, eos)
        check_prompt(prompt, sampling, "messages")
        if body.stream:
            if body.n != 1:
                raise RequestError("stream needs n=1", "stream")
            stream = chat_stream(body, prompt, sampling, bool(tools))
            return StreamingResponse(stream, media_type="text/event-stream")
        outs = await run(prompt, sampling)
        choices = [
            r.chat_choice(
                j,
                tokenizer,
                prompt,
                out,
                sampling.stop,
                body.skip_special_tokens,
                body.logprobs,
                bool(tools),
            )
            for j, out in enumerate(outs)
        ]
        generated = sum(len(o.token_ids) for o in outs)
        return r.envelope(
            "chat.completion",
            r.new_id("chatcmpl"),
            model_name,
            choices,
            usage=r.usage(len(prompt), generated),
        )

    async def chat_stream(
        body: ChatRequest, prompt: list[int], sampling: object, tools: bool
    ) -> AsyncIterator[str]:
        """Content deltas as they are final; with tools, one delta at the end (a tool call
        is only known once its block closes)."""
        request_id = r.new_id("chatcmpl")
        text = r.TextStream(tokenizer, sampling.stop, body.skip_special_tokens)

        def chunk(delta: dict, finish: str | None = None, **extra: object) -> str:
            choice = {"index": 0, "delta": delta, "finish_reason": finish, **extra}
            return r.sse(r.envelope("chat.completion.chunk", request_id, model_name, [choice]))

        yield chunk({"role": "assistant", "content": ""})
        async for item in token_items(prompt, sampling):
            if isinstance(item, str):  # an error event
                yield item
                return
            if isinstance(item, TokenOut):
                final = r.chat_choice(
                    0,
                    tokenizer,
                    prompt,
                    item,
                    sampling.stop,
                    body.skip_special_tokens,
                    False,
                    tools,
                )
                if tools:
                    delta = {k: v for k, v in final["message"].items() if k != "role"}
                else:
                    delta = {"content": text.finish(item)}
                yield chunk(delta, final["finish_reason"], token_ids=[])
                yield r.sse("[DONE]")
                return
            token, log_prob, version = item
            delta = {} if tools else {"content": text.push(token)}
            logprobs = None
            if body.logprobs:
                piece = tokenizer.decode([token])
                entry = {"token": piece, "logprob": log_prob, "bytes": list(piece.encode())}
                logprobs = {"content": [{**entry, "top_logprobs": []}]}
            yield chunk(
                delta, None, logprobs=logprobs, token_ids=[token], weight_versions=[version]
            )

    # -- control plane ----------------------------------------------------------------------

    @app.get("/health")
    async def health() -> object:
        report = await backend.health()
        return JSONResponse(report, status_code=200 if report["status"] == "ok" else 503)

    @app.post("/pause")
    async def pause(mode: str = "abort") -> dict:
        if mode not in ("abort", "wait", "keep"):
            raise RequestError(f"mode must be abort, wait or keep, not {mode!r}", "mode")
        await backend.pause(mode)
        return {"status": "paused", "mode": mode}

    @app.post("/resume")
    async def resume() -> dict:
        await backend.resume()
        return {"status": "running"}

    @app.post("/update_weights")
    async def update_weights(request: Request) -> dict:
        body = await parse(request, UpdateWeightsRequest)
        try:
            version = await backend.update_weights_from_disk(body.path)
        except (FileNotFoundError, KeyError, ValueError) as bad:
            raise RequestError(f"path: {bad}", "path") from None
        return {"weight_version": version}

    @app.get("/weight_version")
    async def weight_version() -> dict:
        return {"weight_version": await backend.weight_version()}

    @app.post("/sleep")
    async def sleep() -> dict:
        try:
            await backend.sleep()
        except RuntimeError as bad:
            raise RequestError(str(bad), status=409) from None
        return {"status": "sleeping"}

    @app.post("/wake_up")
    async def wake_up() -> dict:
        await backend.wake()
        return {"status": "awake"}

    return app


def tokenize_prompts(tokenizer: object, prompt: object) -> list[list[int]]:
    """A completion's ``prompt`` as token-id lists: text, texts, ids, or lists of ids."""
    if isinstance(prompt, str):
        prompt = [prompt]
    if not prompt:
        raise RequestError("prompt is empty", "prompt")
    if all(isinstance(p, int) for p in prompt):
        return [list(prompt)]
    if all(isinstance(p, str) for p in prompt):
        return [tokenizer(p)["input_ids"] for p in prompt]
    return [list(p) for p in prompt]
