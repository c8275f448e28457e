"""The ``logprobs`` of completion and chat choices, shaped as OpenAI's API and vLLM shape them.

A generated token's log-prob and its top alternatives are the engine's, kept as it sampled
the token (``TokenOut.log_probs`` and ``top_logprobs``): from the distribution it was drawn
from, so the chosen token's entry and its log-prob agree. An echoed prompt's log-probs come
from one teacher-forced pass over it (``ascent.rollout.scoring``); its first token has no
context, so its log-prob and alternatives are ``null``, as in vLLM.

Completions (``logprobs`` k): ``tokens``, ``token_logprobs``, ``top_logprobs`` (per token a
dict from token text to log-prob holding the k most likely tokens and the chosen one, so up
to k + 1 entries) and ``text_offset``; with ``return_tokens_as_token_ids`` (vLLM's name) each
token and each key is ``"token_id:N"`` instead of its text, which names a token exactly where
texts collide or are not valid UTF-8 (the offsets still count the text's characters). Chat
(``logprobs: true``, ``top_logprobs`` k): a ``content`` list of {token, logprob, bytes,
top_logprobs: [k entries]}.
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
    prompt: list[int], out: TokenOut, prompt_scores: TokenScores | None = None
) -> ScoredTokens:
    """What a choice reports: the response's tokens with the log-probs and alternatives the
    engine kept (none asked: empty lists), after the prompt's ``prompt_scores`` when the
    prompt is echoed."""
    top = out.top_logprobs if out.top_logprobs is not None else [[] for _ in out.token_ids]
    if prompt_scores is None:
        return ScoredTokens(list(out.token_ids), list(out.log_probs), list(top))
    return ScoredTokens(
        prompt + list(out.token_ids),
        prompt_scores.log_probs + list(out.log_probs),
        prompt_scores.top + list(top),
    )


def completion_logprobs(
    tokenizer: object, scored: ScoredTokens, offset: int = 0, as_ids: bool = False
) -> dict:
    """The completions API's ``logprobs`` object of ``scored``, whose text starts at
    character ``offset`` of the choice's (a streamed chunk's tokens); tokens named
    ``"token_id:N"`` with ``as_ids``."""
    texts = [tokenizer.decode([t]) for t in scored.ids]
    offsets, position = [], offset
    for text in texts:
        offsets.append(position)
        position += len(text)

    def name(token: int) -> str:
        return f"token_id:{token}" if as_ids else tokenizer.decode([token])

    strings = [f"token_id:{t}" for t in scored.ids] if as_ids else texts
    top_logprobs = []
    for text, log_prob, alternatives in zip(strings, scored.log_probs, scored.top, strict=True):
        if alternatives is None:
            top_logprobs.append(None)
            continue
        entry = {name(t): value for t, value in reversed(alternatives)}
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
