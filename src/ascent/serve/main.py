"""Load a checkpoint into the native engine and serve it over HTTP (uvicorn)."""

from pathlib import Path

import torch

from ascent.rollout.engine_settings import EngineSettings

GRACE_S = 5  # seconds in-flight requests get to finish after SIGTERM


def serve(
    settings: EngineSettings,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    served_model_name: str | None = None,
    device: str | None = None,
    seed: int | None = None,
    request_timeout_s: float = 600.0,
    api_key: str | None = None,
    admin_token: str | None = None,
) -> int:
    """Serve the engine ``settings`` describe until interrupted; returns the exit code. The
    keys (``api_key``, ``admin_token``; else the environment's) are checked before the model
    loads, so a server that may not start says so at once."""
    import uvicorn

    from ascent.models.loading import load_tokenizer
    from ascent.rollout.engine import NativeEngine
    from ascent.rollout.native_backend import NativeBackend
    from ascent.serve.access import access_for
    from ascent.serve.app import build_app

    access = access_for(host, api_key, admin_token)
    model_dir = settings.model.path
    if not Path(model_dir).is_dir():
        print(f"ascent serve: {model_dir} is not a directory (a transformers checkpoint)")
        return 2
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    tokenizer = load_tokenizer(model_dir, trust_remote_code=settings.model.trust_remote_code)
    engine = NativeEngine.load(settings, device, tokenizer)
    if seed is not None:  # the stream of requests that bring no seed of their own
        engine.generator.manual_seed(seed)
    backend = NativeBackend(engine, tokenizer)
    name = served_model_name or model_dir
    app = build_app(backend, name, request_timeout_s=request_timeout_s, access=access)
    print(f"ascent serve: {name} on http://{host}:{port}/v1 ({device}, {engine.dtype})", flush=True)
    print(f"ascent serve: {access.describe()}", flush=True)
    # SIGTERM: requests still running after the grace period are cut off, so a stop never
    # waits on a long generation (up to request_timeout_s) to end.
    uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=GRACE_S)
    return 0
