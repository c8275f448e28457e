"""``ascent service SOURCE [key=value ...]``: serve the Tinker API (uvicorn) with the settings
of ``ascent.service.config``; SOURCE is a YAML config or the base checkpoint's directory."""

from pathlib import Path

from ascent.controller.group import resolve_backend
from ascent.controller.ray_backend import ensure_ray
from ascent.service.config import ServiceConfig


def run_service(config: ServiceConfig) -> int:
    """Serve until interrupted; returns the exit code."""
    import uvicorn

    from ascent.service.app import build_app
    from ascent.service.state import ServiceState

    if not (Path(config.model.path) / "config.json").is_file():
        print(
            f"ascent service: {config.model.path} is not a transformers checkpoint (no config.json)"
        )
        return 2
    resources = config.resources
    backend = resolve_backend(resources.backend, resources.pool(), resources.ray_address)
    if backend == "ray":
        # Now, in the main thread: uvicorn's signal handlers, installed after Ray's, then
        # stop the server (and its models' ranks) on SIGTERM instead of Ray's killing it.
        ensure_ray(resources.ray_address)
    print(
        f"ascent service: base model {config.served_name()!r} from {config.model.path}; "
        f"{resources.world_size} rank(s) per trained model ({backend}, {resources.device}); "
        f"checkpoints in {config.root}"
    )
    try:
        app = build_app(ServiceState(config))
        uvicorn.run(app, host=config.host, port=config.port, log_level="warning")
    finally:
        if backend == "ray":
            import ray

            ray.shutdown()
    return 0
