"""The OpenAI request bodies ``ascent serve`` accepts, and how they become ``SamplingParams``.

Fields the OpenAI API defines that change nothing here (``user``, ``stream_options``) are
accepted and ignored; fields that would change the output and are not implemented
(penalties, ``best_of``) are refused with a 400 naming them, so a client never silently gets
something other than what it asked for. Log-probs as evaluation clients ask for them: top
alternatives (``logprobs`` 0-20 for completions, ``top_logprobs`` 0-20 for chat; streamed too)
and ``echo`` with the prompt's log-probs (``max_tokens`` 0 scores the prompt alone; not
streamed).
Extensions (as in vLLM): ``top_k``, ``stop_token_ids``, ``skip_special_tokens``,
``ignore_eos``, ``return_tokens_as_token_ids`` (completions: log-prob tokens named
``"token_id:N"``); token ids are always returned.
"""

import json
from typing import Literal

from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ascent.rollout.scoring import MAX_TOP_LOGPROBS
from ascent.rollout.types import SamplingParams

DEFAULT = SamplingParams()  # what a request leaves out samples as the engine's defaults


class RequestError(ValueError):
    """A request the server cannot serve: becomes an OpenAI-style 4xx error."""

    def __init__(self, message: str, param: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.param, self.status = param, status


class _Common(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str
    n: int = Field(DEFAULT.n, ge=1, le=1024)
    temperature: float = Field(DEFAULT.temperature, ge=0)
    top_p: float = Field(DEFAULT.top_p, gt=0, le=1)
    top_k: int = Field(DEFAULT.top_k, ge=-1)
    stop: str | list[str] | None = None
    stop_token_ids: list[int] = []
    seed: int | None = None
    stream: bool = False
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    skip_special_tokens: bool = True
    ignore_eos: bool = False

    def unsupported(self) -> None:
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(self, name):
                raise RequestError(f"{name} is not supported by ascent serve", name)

    def sampling(self, max_tokens: int | None, default_max: int, eos: int | None) -> SamplingParams:
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        stop_ids = list(self.stop_token_ids)
        if eos is not None and eos not in stop_ids and not self.ignore_eos:
            stop_ids.append(eos)
        return SamplingParams(
            n=self.n,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=max(self.top_k, 0),
            max_new_tokens=max_tokens or default_max,
            stop=stop,
            stop_token_ids=stop_ids,
            seed=self.seed,
            logprobs=True,
        )


class CompletionRequest(_Common):
    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = Field(16, ge=0)
    logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    echo: bool = False
    best_of: int | None = None
    return_tokens_as_token_ids: bool = False

    def unsupported(self) -> None:
        super().unsupported()
        if self.best_of not in (None, self.n):
            raise RequestError("best_of is not supported by ascent serve", "best_of")
        if self.max_tokens == 0 and not self.echo:
            raise RequestError(
                "max_tokens 0 generates nothing: set echo to score the prompt", "max_tokens"
            )
        if self.stream and self.echo:
            raise RequestError("echo is not supported with stream; leave stream out", "echo")

    @property
    def scores_prompt(self) -> bool:
        """Whether the prompt's tokens are scored: ``echo`` with ``logprobs``."""
        return self.echo and self.logprobs is not None


class ChatRequest(_Common):
    messages: list[dict] = Field(min_length=1)
    tools: list[dict] | None = None
    tool_choice: Literal["auto", "none"] | dict | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)

    def unsupported(self) -> None:
        super().unsupported()
        if self.top_logprobs is not None and not self.logprobs:
            raise RequestError("top_logprobs needs logprobs set to true", "top_logprobs")
        if isinstance(self.tool_choice, dict):
            raise RequestError("a forced tool_choice is not supported; use auto", "tool_choice")


class UpdateWeightsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="A directory of *.safetensors files with the new weights.")
    version: int | None = Field(
        None, ge=0, description="Their version, stamped on the tokens they sample (None: +1)."
    )


class WeightVersionRequest(BaseModel):
    """vLLM's body for ``/update_weight_version``: the version is a string there."""

    model_config = ConfigDict(extra="forbid")

    new_version: int = Field(ge=0, description="What to call the weights held now.")


async def parse(request: Request, model: type[BaseModel]) -> BaseModel:
    """The request's JSON body as ``model``; a body that is not JSON, not an object or not
    valid is a ``RequestError`` naming the first field at fault."""
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
