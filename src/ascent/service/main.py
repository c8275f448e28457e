"""``ascent service MODEL_DIR``: serve the Tinker API over a base checkpoint (uvicorn)."""

import json
from pathlib import Path


def base_model_name(model_dir: str, name: str | None) -> str:
    """What clients call the base model: ``name``, else the checkpoint's own
    ``_name_or_path``, else the directory."""
    if name:
        return name
    config = Path(model_dir) / "config.json"
    own = json.loads(config.read_text()).get("_name_or_path") if config.is_file() else None
    return own or str(model_dir)


def run_service(
    model_dir: str,
    *,
    name: str | None = None,
    root: str = "tinker-service",
    host: str = "127.0.0.1",
    port: int = 8000,
    tokens_per_micro_batch: int = 8192,
) -> int:
    """Serve until interrupted; returns the exit code."""
    import uvicorn

    from ascent.service.app import build_app
    from ascent.service.state import ServiceState

    if not (Path(model_dir) / "config.json").is_file():
        print(f"ascent service: {model_dir} is not a transformers checkpoint (no config.json)")
        return 2
    served = base_model_name(model_dir, name)
    state = ServiceState(
        {served: str(model_dir)}, Path(root), tokens_per_micro_batch=tokens_per_micro_batch
    )
    print(f"ascent service: base model {served!r} from {model_dir}; checkpoints in {root}")
    uvicorn.run(build_app(state), host=host, port=port, log_level="warning")
    return 0
