"""A teacher behind an OpenAI-compatible completions endpoint (``ascent serve``, vLLM): what it
gives the student's own sampled tokens, for on-policy distillation.

One request per sample: POST ``{base_url}/completions`` with the sample's token ids (its prompt,
then its response, padding left out) as ``prompt``, ``echo`` with ``logprobs`` K, temperature 1,
``return_tokens_as_token_ids`` (vLLM's name: alternatives come back as ``"token_id:N"``, exact
where texts collide) and ``max_tokens`` 0 (a server that refuses 0, as vLLM did before it
scored a bare prompt, gets 1 from then on, and the generated token is not read). From the
echoed entries of the response positions, for B samples of R response columns:

    teacher_log_probs[b, t]        = log p_T(y_t | x, y_<t)               (B, R) float32
    teacher_top_ids[b, t, :]       = the K likeliest next tokens, first first (B, R, K) int64
    teacher_top_log_probs[b, t, :] = their log-probs                       (B, R, K) float32

with K = max(top_k, 1), p_T the teacher's own distribution (servers score an echoed prompt from
its raw logits: temperature 1), for every generated position, tool and observation tokens
included (they are tokens of the sequence the teacher reads); padding positions hold 0 (id 0).

Unlike a judge's grade, a missing teacher score cannot be replaced by a neutral value: every
failure is an error naming the URL and what to do. Connection errors, timeouts (``timeout_s`` for
the whole reply) and 5xx replies are retried ``retries`` times after a short pause; other
replies are not. The vocabulary check (``check_vocabulary``, run at construction) echoes 64 ids
spread over the policy's vocabulary and compares each token's text with the policy tokenizer's.
"""

import asyncio
from typing import Any

import httpx
import torch
from pydantic import Field

from ascent.batch import Batch
from ascent.engine.config import Strict
from ascent.errors import InputError
from ascent.http_client import BackgroundClient, api_key_headers
from ascent.rollout.types import response_lengths
from ascent.teacher.vocab import VocabularyMismatch

PROBE_SIZE = 64  # ids the vocabulary check echoes


class TeacherEndpointConfig(Strict):
    """A teacher model served behind an OpenAI-compatible completions API."""

    base_url: str = Field(
        description="Base URL of the API, e.g. http://127.0.0.1:8000/v1 (requests go to "
        "{base_url}/completions); ascent serve or vLLM serving the teacher."
    )
    model: str = Field(description="The served model name sent with each request.")
    api_key_env: str | None = Field(
        None, description="Environment variable holding an API key, sent as a Bearer token."
    )
    timeout_s: float = Field(
        120.0, gt=0, description="Time limit for one request's whole reply (then it is retried)."
    )
    max_concurrency: int = Field(32, ge=1, description="Requests in flight at most.")
    retries: int = Field(
        2,
        ge=0,
        description="Retries of a request after a connection error, a timeout or a 5xx reply "
        "(after 0.5 s, then 1 s, 2 s, ...).",
    )


class TeacherEndpointError(RuntimeError):
    """The teacher's endpoint could not be reached or answered what cannot be used."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status  # the HTTP status of a refusal, None otherwise


class EndpointTeacher:
    """``log_probs(batch) -> Batch`` of the teacher's scores (module docstring), callable from
    synchronous code: the requests run on an event loop of the teacher's own, on its own thread,
    so a caller's running loop (if any) is not involved. ``close()`` ends both."""

    def __init__(self, config: TeacherEndpointConfig, top_k: int, tokenizer: Any) -> None:
        self.config, self.top_k, self.tokenizer = config, max(top_k, 1), tokenizer
        self.endpoint = f"{config.base_url.rstrip('/')}/completions"
        self.max_tokens = 0  # 1 once a server refuses 0
        headers = api_key_headers(
            config.api_key_env, "teacher.endpoint.api_key_env", "the teacher endpoint's"
        )
        self.http = BackgroundClient("teacher", config.max_concurrency, config.timeout_s, headers)
        try:
            self.check_vocabulary()
        except BaseException:
            self.close()
            raise

    def log_probs(self, batch: Batch) -> Batch:
        """The teacher's scores of ``batch``'s responses (a rollout batch: left-padded
        ``prompts`` with ``prompt_mask``, right-padded ``responses`` (B, R), ``attention_mask``):
        ``teacher_log_probs`` (B, R), ``teacher_top_ids`` and ``teacher_top_log_probs``
        (B, R, K); zeros at padding."""
        images = batch.get("images")
        if images and any(images):
            raise InputError(
                "the teacher endpoint scores token ids only, and rows of this batch have images "
                "(a completions API cannot take them beside token ids): use a local teacher "
                "checkpoint (teacher.model) for a vision-language student"
            )
        rows, width, k = len(batch), batch["responses"].shape[1], self.top_k
        lengths = response_lengths(batch).tolist()  # tool tokens count: response_mask does not
        sequences = [
            (prompt[mask.bool()].tolist(), response[:length].tolist())
            for prompt, mask, response, length in zip(
                batch["prompts"], batch["prompt_mask"], batch["responses"], lengths, strict=True
            )
        ]
        log_probs = torch.zeros(rows, width, dtype=torch.float32)
        top_ids = torch.zeros(rows, width, k, dtype=torch.int64)
        top_log_probs = torch.zeros(rows, width, k, dtype=torch.float32)
        scored_rows = [i for i, (_, response) in enumerate(sequences) if response]
        scored = self.http.run(self._score_all([sequences[i] for i in scored_rows]))
        for row, (chosen, top) in zip(scored_rows, scored, strict=True):
            length = len(chosen)
            log_probs[row, :length] = torch.tensor(chosen)
            top_ids[row, :length] = torch.tensor([[i for i, _ in t] for t in top])
            top_log_probs[row, :length] = torch.tensor([[v for _, v in t] for t in top])
        return Batch.from_dict(
            {
                "teacher_log_probs": log_probs,
                "teacher_top_ids": top_ids,
                "teacher_top_log_probs": top_log_probs,
            }
        )

    def check_vocabulary(self) -> None:
        """Raise ``VocabularyMismatch`` where the teacher's text of a token id differs from the
        policy tokenizer's (``renderings``): ``PROBE_SIZE`` ids spread over the policy's
        vocabulary, echoed; those that are a piece of a character are not compared."""
        size = len(self.tokenizer)
        ids = sorted(set(torch.linspace(0, size - 1, PROBE_SIZE).round().long().tolist()))
        try:
            # K alternatives, though unread: a server that cannot return them says so now
            logprobs = self.http.run(self._complete(ids, self.top_k, as_ids=False))
        except TeacherEndpointError as refused:
            if refused.status != 400:
                raise
            if "logprobs" in str(refused):
                raise TeacherEndpointError(
                    f"{refused}; teacher.top_k={self.top_k} log-probs per position are more "
                    "than the endpoint returns (ascent serve and vLLM: 20 unless vLLM's "
                    "--max-logprobs raises it): lower teacher.top_k",
                    400,
                ) from None
            raise VocabularyMismatch(
                f"{refused}; the probe held ids up to {size - 1} of the policy's vocabulary "
                f"({size} tokens): a teacher with a smaller vocabulary refuses them, and "
                "on-policy distillation scores the student's token ids, so both must share one"
            ) from None
        texts = logprobs.get("tokens") or []
        if len(texts) < len(ids):
            raise self._bad(f"{len(texts)} echoed tokens for a prompt of {len(ids)}", logprobs)
        # A piece of a multi-byte character decodes alone to "\ufffd", which servers show as
        # it is (ascent serve), as "" or joined to its neighbours (vLLM): not comparable.
        compared = [
            (token, text)
            for token, text in zip(ids, texts, strict=False)
            if "\ufffd" not in self.tokenizer.decode([token])
        ]
        differing = [(t, text) for t, text in compared if text not in renderings(self.tokenizer, t)]
        if differing:
            token, text = differing[0]
            ours = self.tokenizer.decode([token])
            raise VocabularyMismatch(
                f"the teacher's vocabulary ({self.config.model} at {self.endpoint}) differs "
                f"from the policy's at token id {token} (teacher {text!r} vs policy {ours!r}; "
                f"{len(differing)} of {len(compared)} compared ids differ); on-policy distillation "
                "scores the student's token ids, so both must share a vocabulary: use a "
                "teacher of the policy's tokenizer family"
            )

    async def _score_all(
        self, sequences: list[tuple[list[int], list[int]]]
    ) -> list[tuple[list[float], list[list[tuple[int, float]]]]]:
        """Each (prompt, response)'s scores, ``max_concurrency`` requests at a time; the first
        failure cancels the rest."""
        slots = asyncio.Semaphore(self.config.max_concurrency)

        async def score(prompt: list[int], response: list[int]) -> tuple:
            async with slots:
                logprobs = await self._complete(prompt + response, self.top_k, as_ids=True)
            return self._read(logprobs, len(prompt), len(response))

        tasks = [asyncio.ensure_future(score(p, r)) for p, r in sequences]
        try:
            return await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            raise

    def _read(
        self, logprobs: dict, start: int, count: int
    ) -> tuple[list[float], list[list[tuple[int, float]]]]:
        """Entries ``start .. start + count - 1`` of an echo: each token's log-prob and the K
        likeliest (id, log-prob) pairs, most likely first. A server lists the chosen token
        beside the K (K + 1 entries where it is not among them): ranking and keeping K drops it."""
        try:
            chosen = [float(v) for v in logprobs["token_logprobs"][start : start + count]]
            top = [
                sorted(((_token_id(key), float(v)) for key, v in entry.items()), key=_rank)
                for entry in logprobs["top_logprobs"][start : start + count]
            ]
        except (KeyError, TypeError, ValueError) as bad:
            raise self._bad(f"{type(bad).__name__}: {bad}", logprobs) from None
        if len(chosen) != count or any(len(t) < self.top_k for t in top):
            raise self._bad(f"fewer than {count} scored tokens of {self.top_k} each", logprobs)
        return chosen, [t[: self.top_k] for t in top]

    def _bad(self, what: str, logprobs: object) -> TeacherEndpointError:
        return TeacherEndpointError(
            f"the teacher endpoint {self.endpoint} answered without the echoed log-probs a "
            f"teacher needs ({what}): {str(logprobs)[:300]}; it must be a completions API "
            "that scores an echoed prompt of token ids, with token ids among the top "
            "log-probs (return_tokens_as_token_ids), as ascent serve and vLLM are"
        )

    async def _complete(self, ids: list[int], top: int, as_ids: bool) -> dict:
        """The ``logprobs`` of ``ids`` echoed and scored with ``top`` alternatives."""
        body = {
            "model": self.config.model,
            "prompt": ids,
            "echo": True,
            "max_tokens": self.max_tokens,
            "logprobs": top,
            "temperature": 1.0,
            "return_tokens_as_token_ids": as_ids,
        }
        try:
            reply = await self._post(body)
        except TeacherEndpointError as refused:
            if refused.status == 400 and self.max_tokens == 0 and "max_tokens" in str(refused):
                self.max_tokens = 1  # it scores an echo only beside one generated token
                return await self._complete(ids, top, as_ids)
            raise
        try:
            return reply["choices"][0]["logprobs"] or {}
        except (KeyError, IndexError, TypeError):
            raise self._bad("no choice with logprobs", reply) from None

    async def _post(self, body: dict) -> dict:
        """The JSON reply to ``body``; transport errors, timeouts and 5xx replies retried."""
        c = self.config
        for attempt in range(c.retries + 1):
            if attempt:
                await asyncio.sleep(0.5 * 2 ** (attempt - 1))
            try:
                async with asyncio.timeout(c.timeout_s):  # the whole reply, body included
                    reply = await self.http.client.post(self.endpoint, json=body)
            except (TimeoutError, httpx.TimeoutException):
                failure = f"no reply within timeout_s={c.timeout_s} s"
                continue
            except httpx.TransportError as error:  # refused, reset, closed mid-reply
                failure = f"no connection ({type(error).__name__}: {error})"
                continue
            if reply.status_code < 500:
                break
            failure = f"HTTP {reply.status_code}: {reply.text[:300]}"
        else:
            raise TeacherEndpointError(
                f"the teacher endpoint {self.endpoint} failed {c.retries + 1} times, last with "
                f"{failure}: start the teacher's server (ascent serve or vLLM), fix "
                "teacher.endpoint.base_url, or give it more time (timeout_s) or fewer requests "
                "(max_concurrency)"
            )
        if reply.status_code != 200:
            raise TeacherEndpointError(
                f"the teacher endpoint {self.endpoint} refused a request with HTTP "
                f"{reply.status_code}: {reply.text[:300]} (check teacher.endpoint.model and "
                "api_key_env, and that the server's context fits prompt and response)",
                reply.status_code,
            )
        try:
            return reply.json()
        except ValueError:
            raise self._bad("a reply that is not JSON", reply.text) from None

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> "EndpointTeacher":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def renderings(tokenizer: Any, token: int) -> set[str]:
    """The texts a server may show for ``token`` of ``tokenizer``: its decoded text (ascent
    serve, vLLM), the raw vocabulary piece, and a SentencePiece piece's text with the leading
    space that decoding it alone drops (vLLM restores it)."""
    text, piece = tokenizer.decode([token]), tokenizer.convert_ids_to_tokens(token)
    forms = {text, piece}
    if piece.startswith("\u2581") and not text.startswith(" "):
        forms.add(" " + text)
    return forms


def _token_id(key: str) -> int:
    if not key.startswith("token_id:"):
        raise ValueError(f"a top-log-prob key {key!r} is not 'token_id:N'")
    return int(key.removeprefix("token_id:"))


def _rank(pair: tuple[int, float]) -> float:
    return -pair[1]
