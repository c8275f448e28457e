"""Teacher-forced log-probs of a given token sequence under the engine's model: what
evaluation clients ask for as ``echo`` with ``logprobs`` (a prompt's log-probs, for
log-likelihood scoring).

For ids x_0 .. x_{T-1}, under the model's own distribution p = softmax(logits):

    log_probs[t] = log p(x_t | x_<t)                  for t >= 1; None for t = 0 (no context)
    top[t]       = the k most likely tokens at t, most likely first, with their log-probs

One full forward over the sequence, nothing cached (``DecoderRunner.teacher_forced``); the
vocabulary head runs over ``rows_per_slice`` positions at a time, so a long prompt never holds
(T, V) logits at once. Generated tokens need none of this: the engine keeps their log-probs,
and their alternatives when asked (``EngineRequest.top_logprobs``), as it samples them.
"""

from dataclasses import dataclass

import torch

from ascent.rollout.decoder import DecoderRunner
from ascent.rollout.sampling import Alternatives, top_alternatives

MAX_TOP_LOGPROBS = 20  # as OpenAI's API and vLLM's default limit


@dataclass(frozen=True)
class TokenScores:
    """Per position of the scored ids (T entries each): ``log_probs[t]`` and ``top[t]`` (k
    (token id, log-prob) pairs); both None at t = 0."""

    log_probs: list[float | None]
    top: list[Alternatives | None]


def score_tokens(
    runner: DecoderRunner, ids: list[int], top_k: int, rows_per_slice: int = 256
) -> TokenScores:
    """``ids`` scored by ``runner``'s model, with ``top_k`` alternatives per position."""
    if not 0 <= top_k <= MAX_TOP_LOGPROBS:
        raise ValueError(f"top_k must be in [0, {MAX_TOP_LOGPROBS}], got {top_k}")
    tokens = torch.tensor(ids, dtype=torch.long, device=runner.head.device)
    hidden = runner.teacher_forced(tokens)  # (T, hidden)
    log_probs: list[float | None] = [None]
    top: list[Alternatives | None] = [None]
    # Position t's logits predict token t + 1: the rows 0 .. T-2 score tokens 1 .. T-1.
    for start in range(0, len(ids) - 1, rows_per_slice):
        stop = min(start + rows_per_slice, len(ids) - 1)
        scored = torch.log_softmax(runner.logits(hidden[start:stop]), dim=-1)  # (S, V)
        chosen = scored.gather(-1, tokens[start + 1 : stop + 1, None]).squeeze(-1)
        log_probs.extend(chosen.tolist())
        top.extend(top_alternatives(scored, top_k) if top_k else [[] for _ in chosen])
    return TokenScores(log_probs, top)
