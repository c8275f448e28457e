"""OpenAI response bodies from ``TokenOut``s: text, log-probs, tool calls, and stream chunks.

Text follows the OpenAI convention (a stop string is cut from ``text``, special tokens are
skipped); ``token_ids`` keep the exact trace, the token that completed a stop string
included, because training must see the tokens the model produced.
"""

import json
import time
import uuid

from ascent.rollout.protocol import TokenOut
from ascent.rollout.tool_calls import assistant_message


def error_body(status: int, message: str, param: str | None = None) -> dict:
    """OpenAI's error body: a 4xx is the client's ``invalid_request_error``, a 5xx ours."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def visible_text(tokenizer: object, out: TokenOut, stop: list[str], skip_special: bool) -> str:
    """The response's text, ending before the first stop string it contains."""
    text = tokenizer.decode(out.token_ids, skip_special_tokens=skip_special)
    cuts = [text.find(s) for s in stop if s and s in text]
    return text[: min(cuts)] if cuts else text


def trace(prompt_ids: list[int], out: TokenOut) -> dict:
    """The fields every choice adds to OpenAI's: what exactly was sampled, and by which
    weights."""
    return {
        "token_ids": out.token_ids,
        "prompt_token_ids": prompt_ids,
        "weight_versions": out.weight_versions,
    }


def completion_choice(
    index: int,
    tokenizer: object,
    prompt_ids: list[int],
    out: TokenOut,
    stop: list[str],
    skip_special: bool,
    logprobs: dict | None,
    echoed: str | None = None,
) -> dict:
    """A completion choice; ``logprobs`` its built object (``ascent.serve.logprobs``),
    ``echoed`` the prompt's text when ``echo`` asked for it before the response's."""
    text = visible_text(tokenizer, out, stop, skip_special)
    return {
        "index": index,
        "text": text if echoed is None else echoed + text,
        "logprobs": logprobs,
        "finish_reason": out.finish_reason,
        **trace(prompt_ids, out),
    }


def chat_choice(
    index: int,
    tokenizer: object,
    prompt_ids: list[int],
    out: TokenOut,
    stop: list[str],
    skip_special: bool,
    logprobs: dict | None,
    tools: bool,
) -> dict:
    """A chat choice; ``logprobs`` its built object (``ascent.serve.logprobs``)."""
    text = visible_text(tokenizer, out, stop, skip_special)
    message = assistant_message(text, tools)
    return {
        "index": index,
        "message": message,
        "logprobs": logprobs,
        "finish_reason": "tool_calls" if "tool_calls" in message else out.finish_reason,
        **trace(prompt_ids, out),
    }


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def envelope(kind: str, request_id: str, model: str, choices: list[dict], **extra: object) -> dict:
    return {
        "id": request_id,
        "object": kind,
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        **extra,
    }


def sse(payload: dict | str) -> str:
    """One server-sent event."""
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return f"data: {data}\n\n"


class TextStream:
    """Incremental text of a growing token list: emits only text that is final. A partial
    UTF-8 character (decoded as U+FFFD) and anything that may still become a stop string is
    held back until later tokens, or the end, decide it."""

    def __init__(self, tokenizer: object, stop: list[str], skip_special: bool) -> None:
        self.tokenizer, self.stop, self.skip = tokenizer, stop, skip_special
        self.hold = max((len(s) for s in stop), default=1) - 1
        self.ids: list[int] = []
        self.sent = 0

    def push(self, token: int) -> str:
        self.ids.append(token)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=self.skip)
        if text.endswith("\ufffd"):
            return ""
        final = len(text) - self.hold
        for stop in self.stop:
            if stop and stop in text:
                final = min(final, text.find(stop))
        if final <= self.sent:
            return ""
        delta, self.sent = text[self.sent : final], final
        return delta

    def finish(self, out: TokenOut) -> str:
        text = visible_text(self.tokenizer, out, self.stop, self.skip)
        return text[self.sent :]
