"""Teacher-forced log-probs of a given token sequence under the engine's model: what
evaluation clients ask for as ``echo`` with ``logprobs`` (the prompt's log-probs, for
log-likelihood scoring) and as top alternatives (``logprobs`` k, ``top_logprobs`` k).

For ids x_0 .. x_{T-1}:

    log_probs[t] = log p(x_t | x_<t)                  for t >= 1; None for t = 0 (no context)
    top[t]       = the k most likely tokens at t, most likely first, with their log-probs

where p at a position is the model's own distribution, softmax(logits), for the prompt, and
for a generated token (t >= ``sampled_from``) the distribution it was sampled from
(``ascent.rollout.sampling.distribution``: temperature, top-k and top-p applied; greedy is
the model's own), so that a generated token's alternatives and the log-prob the engine
reported for it come from one distribution.

One full forward over the sequence, nothing cached (``DecoderRunner.teacher_forced``); the
vocabulary head runs over ``rows_per_slice`` positions at a time, so a long prompt never holds
(T, V) logits at once.
"""

from dataclasses import dataclass
from math import inf

import torch
from torch import Tensor

from ascent.rollout.decoder import DecoderRunner
from ascent.rollout.sampling import distribution
from ascent.rollout.types import SamplingParams

MAX_TOP_LOGPROBS = 20  # as OpenAI's API and vLLM's default limit


@dataclass(frozen=True)
class TokenScores:
    """Per position of the scored ids (T entries each): ``log_probs[t]`` and ``top[t]`` (k
    (token id, log-prob) pairs); both None at t = 0."""

    log_probs: list[float | None]
    top: list[list[tuple[int, float]] | None]


def score_tokens(
    runner: DecoderRunner,
    ids: list[int],
    top_k: int,
    sampling: SamplingParams | None = None,
    sampled_from: int | None = None,
    rows_per_slice: int = 256,
) -> TokenScores:
    """``ids`` scored by ``runner``; positions from ``sampled_from`` on
    under ``sampling``'s distribution (None: every position under the model's own)."""
    if not 0 <= top_k <= MAX_TOP_LOGPROBS:
        raise ValueError(f"top_k must be in [0, {MAX_TOP_LOGPROBS}], got {top_k}")
    tokens = torch.tensor(ids, dtype=torch.long, device=runner.head.device)
    hidden = runner.teacher_forced(tokens)  # (T, hidden)
    boundary = len(ids) if sampling is None or sampled_from is None else sampled_from
    log_probs: list[float | None] = [None]
    top: list[list[tuple[int, float]] | None] = [None]
    # Position t's logits predict token t + 1: the rows 0 .. T-2 score tokens 1 .. T-1.
    for start in range(0, len(ids) - 1, rows_per_slice):
        stop = min(start + rows_per_slice, len(ids) - 1)
        logits = runner.logits(hidden[start:stop])  # (S, V) float32
        predicted = torch.arange(start + 1, stop + 1, device=logits.device)
        scored = _log_probs(logits, predicted, boundary, sampling)
        chosen = scored.gather(-1, tokens[start + 1 : stop + 1, None]).squeeze(-1)
        log_probs.extend(chosen.tolist())
        if top_k:
            values, indices = scored.topk(top_k, dim=-1)
            top.extend(_pairs(indices, values))
        else:
            top.extend([] for _ in range(stop - start))
    return TokenScores(log_probs, top)


def _log_probs(
    logits: Tensor, predicted: Tensor, boundary: int, sampling: SamplingParams | None
) -> Tensor:
    """(S, V) log-probs of the rows predicting tokens ``predicted`` (S,): the model's own
    before ``boundary``, ``sampling``'s distribution from it on."""
    own = torch.log_softmax(logits, dim=-1)
    generated = predicted >= boundary
    if sampling is None or not bool(generated.any()):
        return own
    own[generated] = distribution(logits[generated], sampling)
    return own


def _pairs(indices: Tensor, values: Tensor) -> list[list[tuple[int, float]]]:
    """Each row's (id, log-prob) pairs; tokens top-k or top-p left out (-inf) are no
    alternatives, so a row may hold fewer than k."""
    return [
        [(token, value) for token, value in zip(row_ids, row_values, strict=True) if value > -inf]
        for row_ids, row_values in zip(indices.tolist(), values.tolist(), strict=True)
    ]
