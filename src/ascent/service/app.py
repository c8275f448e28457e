"""``ascent service``: the Tinker API over ascent's engine, for the official ``tinker`` SDK
and the loops written against it (``tinker-cookbook``), pointed at this server's URL.

Routes under ``/api/v1`` (the SDK's): the client's start (``client/config``,
``create_session``, heartbeats, telemetry), training clients (``create_model``,
``get_info``, ``forward_backward`` in protobuf, ``optim_step``, ``save_weights``,
``save_weights_for_sampler`` by name, ``load_weights``), and ``retrieve_future``. Calls that
take time answer with a future id at once (``ascent.service.futures``). An unknown id is a
404 and a malformed request a 400, both with a JSON ``detail``: the SDK raises them at once
instead of retrying; a call that fails while it runs fails its future (the SDK's
``RequestFailedError``), and the server goes on.
"""

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from ascent.service.futures import Outcome
from ascent.service.model_worker import merge_outputs
from ascent.service.sampling import (
    SamplingSession,
    prompt_ids,
    sample,
    sampler_info,
    sampling_params,
)
from ascent.service.sessions import SessionFinished
from ascent.service.state import ServiceState, TrainedModel, UnknownId
from ascent.service.wire import WireError, decode_forward_backward, encode_forward_backward_output

PROTOBUF = "application/x-protobuf"


async def body_of(request: Request) -> dict:
    try:
        body = json.loads(await request.body() or b"{}")
    except ValueError as bad:
        raise WireError(f"{request.url.path}: the body is not JSON ({bad})") from bad
    if not isinstance(body, dict):
        raise WireError(f"{request.url.path}: the body must be a JSON object")
    return body


def field_of(body: dict, name: str) -> Any:
    if name not in body:
        raise WireError(f"the request lacks {name!r}")
    return body[name]


@contextlib.asynccontextmanager
async def lifespan(state: ServiceState) -> AsyncIterator[None]:
    """While the server runs, sessions that went silent are ended; when it stops, every
    model's ranks and every engine are."""

    async def end_silent() -> None:
        while True:
            await asyncio.sleep(min(state.sessions.timeout_s / 4, 30.0))
            for session_id in state.sessions.silent():
                await state.end_session(session_id)

    watch = asyncio.create_task(end_silent())
    try:
        yield
    finally:
        watch.cancel()
        await asyncio.to_thread(state.close)


def build_app(state: ServiceState) -> FastAPI:
    """The FastAPI app of ``state`` (module docstring)."""
    app = FastAPI(title="ascent service (Tinker API)", lifespan=lambda _: lifespan(state))

    @app.exception_handler(SessionFinished)
    async def finished(_: Request, error: SessionFinished) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=410)

    @app.exception_handler(UnknownId)
    async def unknown(_: Request, error: UnknownId) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=404)

    @app.exception_handler(WireError)
    @app.exception_handler(ValueError)
    async def bad_request(_: Request, error: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=400)

    def future(work: Callable[[], Any], **extra: Any) -> JSONResponse:
        return JSONResponse({"request_id": state.futures.start(work()), **extra})

    def model_future(
        model: TrainedModel, seq_id: int, work: Callable[[], Any], **extra: Any
    ) -> JSONResponse:
        """A model's numbered call: a retried submit of the same ``seq_id`` gets the first
        submit's future, not a second run."""
        requests = model.calls.requests
        if seq_id not in requests:
            requests[seq_id] = state.futures.start(work())
        return JSONResponse({"request_id": requests[seq_id], **extra})

    @app.post("/api/v1/client/config")
    async def client_config() -> dict:
        # plain httpx, whole requests: what this server implements
        return {
            "pjwt_auth_enabled": False,
            "use_pyqwest_transport": False,
            "parallel_fwdbwd_chunks": False,
            "proto_compress_fwdbwd": False,
        }

    @app.post("/api/v1/client/dynamic_config")
    async def dynamic_config() -> dict:
        return {}

    @app.post("/api/v1/create_session")
    async def create_session() -> dict:
        return {"type": "create_session", "session_id": state.sessions.new()}

    @app.post("/api/v1/session_heartbeat")
    async def heartbeat(request: Request) -> dict:
        state.sessions.beat(field_of(await body_of(request), "session_id"))
        return {"type": "session_heartbeat"}

    @app.post("/api/v1/telemetry")
    async def telemetry() -> dict:
        return {"status": "accepted"}

    @app.post("/api/v1/sessions/{session_id}/finish")
    async def finish(session_id: str) -> dict:
        await state.end_session(session_id)
        return {}

    @app.get("/api/v1/healthz")
    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok"}

    @app.get("/api/v1/get_server_capabilities")
    async def capabilities() -> dict:
        models = [
            {"model_name": name, "trainable": True, "sampleable": True}
            for name in state.base_models
        ]
        return {"supported_models": models}

    @app.post("/api/v1/create_model")
    async def create_model(request: Request) -> JSONResponse:
        body = await body_of(request)
        base_model = field_of(body, "base_model")
        state.base_path(base_model)  # an unknown base model: 404 now, not a failed future
        model_id = f"{field_of(body, 'session_id')}:train:{field_of(body, 'model_seq_id')}"
        lora = body.get("lora_config")

        async def create() -> Outcome:
            await state.create_model(model_id, base_model, lora)
            return Outcome("json", {"model_id": model_id, "type": "create_model"})

        return future(create, model_id=model_id)

    @app.post("/api/v1/get_info")
    async def get_info(request: Request) -> dict:
        return state.model(field_of(await body_of(request), "model_id")).info()

    @app.post("/api/v1/forward_backward")
    async def forward_backward(request: Request) -> JSONResponse:
        call = decode_forward_backward(await request.body())
        model = state.model(call.model_id)

        async def run() -> Outcome:
            parts = await model.calls.run(
                call.seq_id,
                lambda: model.group.forward_backward(
                    call.data, call.loss_fn, call.config, call.forward_only
                ),
            )
            log_probs, metrics = merge_outputs(parts, len(call.data))
            return Outcome("proto", encode_forward_backward_output(log_probs, metrics))

        return model_future(model, call.seq_id, run, model_id=call.model_id)

    @app.post("/api/v1/optim_step")
    async def optim_step(request: Request) -> JSONResponse:
        body = await body_of(request)
        model = state.model(field_of(body, "model_id"))
        adam = field_of(body, "adam_params")

        async def run() -> Outcome:
            metrics = await model.calls.run(
                body.get("seq_id", 0), lambda: model.group.optim_step(adam)[0]
            )
            return Outcome("json", {"metrics": metrics})

        return model_future(model, body.get("seq_id", 0), run, model_id=model.model_id)

    @app.post("/api/v1/save_weights")
    async def save_weights(request: Request) -> JSONResponse:
        body = await body_of(request)
        model = state.model(field_of(body, "model_id"))
        path, directory = state.checkpoint(model.model_id, "weights", field_of(body, "path"))

        def save() -> None:
            model.group.save_state(str(directory))
            about = {"base_model": model.base_model, "lora": model.lora}
            (directory / "service.json").write_text(json.dumps(about))

        async def run() -> Outcome:
            await model.calls.run(body.get("seq_id", 0), save)
            return Outcome("json", {"path": path, "type": "save_weights"})

        return model_future(model, body.get("seq_id", 0), run, model_id=model.model_id)

    @app.post("/api/v1/save_weights_for_sampler")
    async def save_for_sampler(request: Request) -> JSONResponse:
        """Named: merged weights at a tinker:// path. Without a path: a sampling session on
        a snapshot of the weights (``save_weights_and_get_sampling_client``)."""
        body = await body_of(request)
        model = state.model(field_of(body, "model_id"))
        source = state.base_path(model.base_model)
        if body.get("path"):
            path, directory = state.checkpoint(model.model_id, "sampler_weights", body["path"])
            session_id, answer = None, {"path": path}
        else:
            session = model.model_id.split(":train:")[0]
            session_id = f"{session}:sample:{field_of(body, 'sampling_session_seq_id')}"
            path, directory = None, state.root / model.model_id / "sampler_sessions" / session_id
            answer = {"sampling_session_id": session_id}

        async def run() -> Outcome:
            export = lambda: model.group.export(str(directory), source)  # noqa: E731
            await model.calls.run(body.get("seq_id", 0), export)
            about = {"base_model": model.base_model, "lora": model.lora}
            (directory / "service.json").write_text(json.dumps(about))
            if session_id is not None:
                made = SamplingSession(session_id, model.base_model, directory, path)
                state.samplers.add(made)
                retire = lambda: state.samplers.retire_snapshots(directory.parent)  # noqa: E731
                await asyncio.get_running_loop().run_in_executor(state.executor, retire)
            return Outcome("json", {**answer, "type": "save_weights_for_sampler"})

        return model_future(model, body.get("seq_id", 0), run, model_id=model.model_id)

    @app.post("/api/v1/create_sampling_session")
    async def create_sampling_session(request: Request) -> dict:
        body = await body_of(request)
        state.sessions.check(field_of(body, "session_id"))
        session_id = (
            f"{field_of(body, 'session_id')}:sample:{field_of(body, 'sampling_session_seq_id')}"
        )
        if body.get("model_path"):
            _, directory = state.resolve(body["model_path"])
            if directory.parent.name != "sampler_weights":
                raise WireError(f"{body['model_path']!r} is not a sampler_weights path")
            base_model = json.loads((directory / "service.json").read_text())["base_model"]
        else:
            base_model = field_of(body, "base_model")
            directory = Path(state.base_path(base_model))
        made = SamplingSession(session_id, base_model, directory, body.get("model_path"))
        state.samplers.add(made)
        return {"type": "create_sampling_session", "sampling_session_id": session_id}

    @app.get("/api/v1/samplers/{session_id}")
    async def sampler(session_id: str) -> dict:
        return sampler_info(state.sampling_session(session_id))

    @app.post("/api/v1/asample")
    async def asample(request: Request) -> JSONResponse:
        body = await body_of(request)
        session = state.sampling_session(field_of(body, "sampling_session_id"))
        params = sampling_params(body)  # a bad parameter or prompt: 400 now
        ids = prompt_ids(body.get("prompt", {}))
        loop = asyncio.get_running_loop()

        async def run() -> Outcome:
            state.samplers.busy[session.session_id] += 1
            try:
                backend = await loop.run_in_executor(
                    state.executor, lambda: state.samplers.backend(session)
                )
                scored = bool(body.get("prompt_logprobs"))
                return Outcome("proto", await sample(backend, ids, params, scored))
            finally:
                state.samplers.busy[session.session_id] -= 1

        seq = body.get("seq_id", 0)
        sequences = [f"{session.session_id}:{seq}:{i}" for i in range(params.n)]
        return future(run, sample_sequence_ids=sequences)

    @app.post("/api/v1/load_weights")
    async def load_weights(request: Request) -> JSONResponse:
        body = await body_of(request)
        _, directory = state.resolve(field_of(body, "path"))
        about = json.loads((directory / "service.json").read_text())
        if "model_id" in body:  # a model's own call: load into it
            model = state.model(body["model_id"])
            seq_id = body.get("seq_id", 0)
        else:  # create a model from the checkpoint (how a client resumes)
            model_id = f"{field_of(body, 'session_id')}:train:{field_of(body, 'model_seq_id')}"
            model, seq_id = None, 0

        async def run() -> Outcome:
            target = model or await state.create_model(model_id, about["base_model"], about["lora"])
            await target.calls.run(seq_id, lambda: target.group.load_state(str(directory)))
            return Outcome("json", {"path": body["path"], "model_id": target.model_id})

        return future(run)

    @app.post("/api/v1/retrieve_future")
    async def retrieve(request: Request) -> Response:
        request_id = field_of(await body_of(request), "request_id")
        if not state.futures.known(request_id):
            raise UnknownId(f"unknown request_id {request_id!r}")
        outcome = await state.futures.retrieve(request_id, state.poll_s)
        if outcome is None:
            return JSONResponse(
                {"type": "try_again", "request_id": request_id, "queue_state": "active"}
            )
        if outcome.kind == "proto":
            return Response(outcome.payload, media_type=PROTOBUF)
        return JSONResponse(outcome.payload)

    return app
