"""``ascent serve``: the native engine behind an OpenAI-compatible HTTP API."""

from ascent.serve.app import build_app
from ascent.serve.main import serve

__all__ = ["build_app", "serve"]
