"""``ascent serve``: an OpenAI-compatible HTTP server over the native engine.

Data plane: ``/v1/models``, ``/v1/completions`` (text or token-id prompts),
``/v1/chat/completions`` (the model's chat template, ``tools``, Hermes tool calls parsed into
``tool_calls``); ``n``, stop strings and tokens, ``logprobs``, ``stream``. Every choice also
carries ``token_ids``, ``prompt_token_ids`` and ``weight_versions`` (one per token), so an RL
client trains on exactly what was sampled. Control plane, as in vLLM's dev mode:
``POST /pause?mode=abort|wait|keep``, ``/resume``, ``/update_weights`` (``{"path": DIR,
"version": N}``), ``/update_weight_version`` (``{"new_version": N}``, as vLLM's),
``/sleep``, ``/wake_up``; ``GET /weight_version``, ``/health``. Who may call which:
``ascent.serve.access`` (an API key on ``/v1``, an admin token on the control routes).

Every request is served concurrently: each becomes engine requests that join the running
batch. A bad request gets an OpenAI-style error body (``{"error": {"message", "type",
"param", "code"}}``) with a 4xx status, before it reaches the engine (token ids outside the
vocabulary included); an engine failure fails only the requests it concerned, with a 500 (or,
mid-stream, an error event), and the server keeps serving.
"""

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from ascent.rollout.native_backend import NativeBackend
from ascent.serve.access import Access, AccessControl
from ascent.serve.chat import Chat
from ascent.serve.completions import Completions
from ascent.serve.control import Control
from ascent.serve.responses import error_body
from ascent.serve.schema import RequestError
from ascent.serve.served import Served


def error(status: int, message: str, param: str | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, message, param), status_code=status)


async def request_error(_: Request, bad: RequestError) -> JSONResponse:
    return error(bad.status, str(bad), bad.param)


async def server_error(_: Request, bad: Exception) -> JSONResponse:
    return error(500, f"{type(bad).__name__}: {bad}")


def build_app(
    backend: NativeBackend,
    model_name: str,
    *,
    request_timeout_s: float | None = 600.0,
    access: Access | None = None,
) -> FastAPI:
    """The FastAPI app serving ``backend`` under the name ``model_name``: every route, each
    handled by a method of the route group it belongs to, behind the keys of ``access`` (none
    by default). Route methods have no docstrings: FastAPI would publish them as the routes'
    OpenAPI descriptions."""
    app = FastAPI(title="ascent serve")
    if access is not None and access.guarded:
        app.add_middleware(AccessControl, access=access)
    app.exception_handler(RequestError)(request_error)
    app.exception_handler(Exception)(server_error)
    served = Served(backend, model_name, request_timeout_s)
    completions, chat, control = Completions(served), Chat(served), Control(backend)
    # data plane
    app.get("/v1/models")(served.models)
    app.post("/v1/completions")(completions.completions)
    app.post("/v1/chat/completions")(chat.chat)
    # control plane
    app.get("/health")(control.health)
    app.post("/pause")(control.pause)
    app.post("/resume")(control.resume)
    app.post("/update_weights")(control.update_weights)
    app.get("/weight_version")(control.weight_version)
    app.post("/update_weight_version")(control.update_weight_version)
    app.post("/sleep")(control.sleep)
    app.post("/wake_up")(control.wake_up)
    return app
