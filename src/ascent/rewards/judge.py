"""A generative judge: a reward that asks an OpenAI-compatible chat endpoint (``ascent serve``,
vLLM or any other) to grade each response.

One request per sample: POST ``{url}/chat/completions`` with the optional ``system`` message and
a user message, ``template`` with ``{prompt}``, ``{response}`` and ``{ground_truth}`` replaced
literally in one pass (other braces, e.g. JSON, stay as written, and a placeholder inside a
replaced text is not replaced again; a ground truth that is not a string goes in as JSON, None
as nothing). The grade g is the first group of the LAST match of
``grade_pattern`` in the reply (a judge that reasons first ends with its verdict), and

    score = clamp((g - min_grade) / (max_grade - min_grade), 0, 1)

Failures never stop a step: the sample scores 0 (grade NaN) and is counted in
``judge/timeouts`` (no complete reply within ``timeout_s`` of the request's start, the wait for
one of ``concurrency`` slots not included; not retried), ``judge/unparsable`` (no match, or a
non-finite grade) or ``judge/errors`` (connection errors and 5xx replies once ``retries``
immediate retries failed too; other non-200 replies and bodies without a message at once). The
first failure of a run is printed with its sample. One exception: when every sample of a batch
of more than one fails to connect, the judge is not flaky but absent, and ``JudgeUnreachable``
names the URL.
"""

import asyncio
import json
import math
import re
from dataclasses import dataclass
from typing import Any

import httpx
import torch
from pydantic import Field, ValidationInfo, field_validator

from ascent.engine.config import Strict
from ascent.errors import InputError
from ascent.http_client import BackgroundClient, api_key_headers

PLACEHOLDER = re.compile(r"\{(prompt|response|ground_truth)\}")


class JudgeConfig(Strict):
    """A generative judge: an OpenAI-compatible chat endpoint grading each response."""

    url: str = Field(
        description="Base URL of the API, e.g. http://127.0.0.1:8000/v1 (requests go to "
        "{url}/chat/completions)."
    )
    model: str = Field(description="Model name sent with each request.")
    template: str = Field(
        description="The user message; {prompt}, {response} and {ground_truth} are replaced "
        "literally (other braces stay). {response} is required."
    )
    system: str | None = Field(None, description="A system message before it (None: none).")
    grade_pattern: str = Field(
        r"(-?\d+(?:\.\d+)?)",
        description="Regex; the grade is the first group of its last match in the reply.",
    )
    min_grade: float = Field(0.0, description="The grade that scores 0.")
    max_grade: float = Field(
        10.0, description="The grade that scores 1: score = clamp((g - min) / (max - min), 0, 1)."
    )
    weight: float = Field(
        1.0, description="Weight of its score in the reward (beside reward.function_weight)."
    )
    timeout_s: float = Field(60.0, gt=0, description="Time limit per request (then it scores 0).")
    concurrency: int = Field(32, ge=1, description="Requests in flight at most.")
    max_tokens: int = Field(1024, ge=1, description="Tokens the judge may write per grade.")
    temperature: float = Field(0.0, ge=0, description="The judge's sampling temperature.")
    api_key_env: str | None = Field(
        None, description="Environment variable holding an API key, sent as a Bearer token."
    )
    retries: int = Field(
        1, ge=0, description="Retries of a request after a connection error or a 5xx reply."
    )

    @field_validator("template")
    @classmethod
    def _has_response(cls, template: str) -> str:
        if "{response}" not in template:
            raise InputError("judge.template must contain {response} (the graded answer)")
        return template

    @field_validator("grade_pattern")
    @classmethod
    def _has_group(cls, pattern: str) -> str:
        try:
            groups = re.compile(pattern).groups
        except re.error as error:
            raise InputError(f"judge.grade_pattern is not a valid regex: {error}") from None
        if not groups:
            raise InputError("judge.grade_pattern needs a group, (...), around the grade")
        return pattern

    @field_validator("max_grade")
    @classmethod
    def _above_min(cls, value: float, info: ValidationInfo) -> float:
        low = info.data.get("min_grade")
        if low is not None and value <= low:
            raise InputError(f"judge.max_grade={value} must be above judge.min_grade={low}")
        return value


def prompt_text(prompt: str | list[dict]) -> str:
    """A row's ``{prompt}``: a string as it is; chat messages: a lone user message's content,
    else one ``role: content`` line per message."""
    if isinstance(prompt, str):
        return prompt
    if len(prompt) == 1 and prompt[0]["role"] == "user":
        return prompt[0]["content"]
    return "\n".join(f"{m['role']}: {m['content']}" for m in prompt)


def fill(template: str, values: dict[str, str]) -> str:
    """``template`` with its placeholders replaced literally, in one pass."""
    return PLACEHOLDER.sub(lambda match: values[match.group(1)], template)


def _as_text(ground_truth: Any) -> str:
    if isinstance(ground_truth, str):
        return ground_truth
    return "" if ground_truth is None else json.dumps(ground_truth, default=str)


@dataclass
class JudgeGrades:
    scores: torch.Tensor  # (B,) float32 in [0, 1]; 0 where grading failed
    grades: torch.Tensor  # (B,) float64, the parsed grades; NaN where grading failed
    counts: dict[str, float]  # judge/timeouts, judge/unparsable, judge/errors


class JudgeUnreachable(RuntimeError):
    """No sample of a batch could connect to the judge: a configuration error, not noise."""


class Judge:
    """``grade(prompts, responses, ground_truths) -> JudgeGrades``, callable from synchronous
    code: the requests run on an event loop of the judge's own, on its own thread, so a
    caller's running loop (if any) is not involved. ``close()`` ends both."""

    def __init__(self, config: JudgeConfig) -> None:
        self.config, self.reported = config, False
        self.endpoint = f"{config.url.rstrip('/')}/chat/completions"
        self.pattern = re.compile(config.grade_pattern)
        headers = api_key_headers(config.api_key_env, "judge.api_key_env", "the judge's")
        self.http = BackgroundClient("judge", config.concurrency, config.timeout_s, headers)

    def grade(self, prompts: list[str], responses: list[str], ground_truths: list) -> JudgeGrades:
        requests = [
            self._messages(p, r, t)
            for p, r, t in zip(prompts, responses, ground_truths, strict=True)
        ]
        outcomes = self.http.run(self._grade_all(requests))
        unreachable = [reason for _, kind, reason in outcomes if kind == "unreachable"]
        if len(unreachable) == len(outcomes) > 1:
            raise JudgeUnreachable(
                f"judge: no connection to {self.endpoint} for any of the {len(outcomes)} samples "
                f"({unreachable[0]}); start the judge's server or fix judge.url"
            )
        counts = {"judge/timeouts": 0.0, "judge/unparsable": 0.0, "judge/errors": 0.0}
        for prompt, response, (_, kind, reason) in zip(prompts, responses, outcomes, strict=True):
            if kind is not None:
                counts["judge/errors" if kind == "unreachable" else f"judge/{kind}"] += 1
                self._report(reason, prompt, response)
        grades = torch.tensor([grade for grade, _, _ in outcomes], dtype=torch.float64)
        low, high = self.config.min_grade, self.config.max_grade
        scores = ((grades - low) / (high - low)).clamp(0, 1).nan_to_num(0.0).float()
        return JudgeGrades(scores=scores, grades=grades, counts=counts)

    def _messages(self, prompt: str, response: str, ground_truth: Any) -> list[dict]:
        values = {"prompt": prompt, "response": response, "ground_truth": _as_text(ground_truth)}
        user = {"role": "user", "content": fill(self.config.template, values)}
        if self.config.system is None:
            return [user]
        return [{"role": "system", "content": self.config.system}, user]

    async def _grade_all(self, requests: list[list[dict]]) -> list[tuple[float, str | None, str]]:
        slots = asyncio.Semaphore(self.config.concurrency)
        return await asyncio.gather(*(self._grade_one(slots, messages) for messages in requests))

    async def _grade_one(
        self, slots: asyncio.Semaphore, messages: list[dict]
    ) -> tuple[float, str | None, str]:
        """(grade, failure kind or None, reason)."""
        c = self.config
        body = {
            "model": c.model,
            "messages": messages,
            "max_tokens": c.max_tokens,
            "temperature": c.temperature,
        }
        async with slots:
            for _ in range(c.retries + 1):
                try:
                    async with asyncio.timeout(c.timeout_s):  # the whole reply, body included
                        reply = await self.http.client.post(self.endpoint, json=body)
                except (TimeoutError, httpx.TimeoutException):
                    return math.nan, "timeouts", f"no reply within {c.timeout_s} s"
                except httpx.TransportError as error:  # refused, reset, closed mid-reply
                    kind = "unreachable" if isinstance(error, httpx.ConnectError) else "errors"
                    failure = (math.nan, kind, f"{type(error).__name__}: {error}")
                    continue
                failure = (math.nan, "errors", f"HTTP {reply.status_code}: {reply.text[:200]}")
                if reply.status_code < 500:
                    break
            else:
                return failure
        if reply.status_code != 200:
            return failure
        try:
            text = reply.json()["choices"][0]["message"]["content"] or ""
        except (ValueError, LookupError, TypeError):
            return math.nan, "errors", f"a reply without a message: {reply.text[:200]}"
        return self._parse(text)

    def _parse(self, text: str) -> tuple[float, str | None, str]:
        found = [match.group(1) for match in self.pattern.finditer(text)]
        try:
            grade = float(found[-1])
        except (IndexError, TypeError, ValueError):  # no match, group unmatched, not a number
            grade = math.nan
        if math.isfinite(grade):
            return grade, None, ""
        return math.nan, "unparsable", f"no finite grade in the reply {text[-200:]!r}"

    def _report(self, reason: str, prompt: str, response: str) -> None:
        if self.reported:
            return
        self.reported = True
        print(
            f"judge: grading failed ({reason}) on a sample with prompt={prompt[:200]!r}, "
            f"response={response[:200]!r}; it scores 0 and such failures are counted in "
            "judge/* metrics (reported once per run)"
        )

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> "Judge":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
