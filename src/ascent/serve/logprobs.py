"""The ``logprobs`` of completion and chat choices, shaped as OpenAI's API and vLLM shape them.

A generated token's log-prob is the one the engine sampled it with (``TokenOut.log_probs``,
the trace training uses); its top alternatives, and every log-prob of an echoed prompt, come
from one teacher-forced pass over prompt and response (``ascent.rollout.scoring``). The first
prompt token has no context: its log-prob and alternatives are ``null``, as in vLLM.

Completions (``logprobs`` k): ``tokens``, ``token_logprobs``, ``top_logprobs`` (per token a
dict from token text to log-prob holding the k most likely tokens and the chosen one, so up
to k + 1 entries) and ``text_offset``. Chat (``logprobs: true``, ``top_logprobs`` k): a
``content`` list of {token, logprob, bytes, top_logprobs: [k entries]}.
"""

from dataclasses import dataclass

from ascent.rollout.protocol import TokenOut
from ascent.rollout.scoring import TokenScores


@dataclass(frozen=True)
class ScoredTokens:
    """The tokens a choice reports (the prompt's first when echoed, then the response's),
    each one's log-prob (None: the first prompt token), and its alternatives ((id, log-prob)
    pairs, most likely first; None for the first prompt token)."""

    ids: list[int]
    log_probs: list[float | None]
    top: list[list[tuple[int, float]] | None]


def scored_tokens(
    prompt: list[int], out: TokenOut, scores: TokenScores | None, echo: bool
) -> ScoredTokens:
    """What a choice reports: ``scores`` (of prompt + response, or None when neither the
    prompt nor alternatives were asked for) split at the prompt's end."""
    start = len(prompt)
    top = scores.top[start:] if scores is not None else [[] for _ in out.token_ids]
    if not echo:
        return ScoredTokens(list(out.token_ids), list(out.log_probs), top)
    assert scores is not None, "an echoed prompt's log-probs come from scoring it"
    return ScoredTokens(
        prompt + list(out.token_ids),
        scores.log_probs[:start] + list(out.log_probs),
        scores.top[:start] + top,
    )


def completion_logprobs(tokenizer: object, scored: ScoredTokens) -> dict:
    """The completions API's ``logprobs`` object of ``scored``."""
    strings = [tokenizer.decode([t]) for t in scored.ids]
    offsets, position = [], 0
    for text in strings:
        offsets.append(position)
        position += len(text)
    top_logprobs = []
    for text, log_prob, alternatives in zip(strings, scored.log_probs, scored.top, strict=True):
        if alternatives is None:
            top_logprobs.append(None)
            continue
        entry = {tokenizer.decode([t]): value for t, value in reversed(alternatives)}
        # Two ids may decode to one text: the more likely one's log-prob is kept (reversed
        # order writes it last), and the chosen token is added if its text is not there.
        entry.setdefault(text, log_prob)
        top_logprobs.append(entry)
    return {
        "tokens": strings,
        "token_logprobs": scored.log_probs,
        "top_logprobs": top_logprobs,
        "text_offset": offsets,
    }


def chat_logprobs(tokenizer: object, scored: ScoredTokens) -> dict:
    """The chat API's ``logprobs`` object of ``scored`` (a response: no prompt tokens)."""

    def token(token_id: int, log_prob: float) -> dict:
        text = tokenizer.decode([token_id])
        return {"token": text, "logprob": log_prob, "bytes": list(text.encode())}

    return {
        "content": [
            {**token(t, lp), "top_logprobs": [token(a, v) for a, v in alternatives or []]}
            for t, lp, alternatives in zip(scored.ids, scored.log_probs, scored.top, strict=True)
        ]
    }
