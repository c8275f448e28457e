"""``POST /v1/completions``: text or token-id prompts, one or many, each sampled ``n`` times;
streamed token by token for one prompt and ``n=1``."""

import asyncio
from collections.abc import AsyncIterator

from fastapi import Request
from fastapi.responses import StreamingResponse

from ascent.rollout.protocol import TokenOut
from ascent.serve import responses as r
from ascent.serve.schema import CompletionRequest, RequestError, parse
from ascent.serve.served import Served


class Completions:
    """The completions route over ``served``."""

    def __init__(self, served: Served) -> None:
        self.served = served

    async def completions(self, request: Request) -> object:
        served = self.served
        body = await parse(request, CompletionRequest)
        served.check(body)
        prompts = tokenize_prompts(served.tokenizer, body.prompt)
        sampling = body.sampling(body.max_tokens, 16, served.eos)
        for prompt in prompts:
            served.check_prompt(prompt, sampling)
        stop, logprobs = sampling.stop, body.logprobs is not None
        if body.stream:
            if len(prompts) != 1 or body.n != 1:
                raise RequestError("stream needs one prompt and n=1", "stream")
            stream = self.stream(body, prompts[0], sampling, stop, logprobs)
            return StreamingResponse(stream, media_type="text/event-stream")
        groups = await asyncio.gather(*(served.run(p, sampling) for p in prompts))
        choices = [
            r.completion_choice(
                i * body.n + j,
                served.tokenizer,
                prompts[i],
                out,
                stop,
                body.skip_special_tokens,
                logprobs,
            )
            for i, outs in enumerate(groups)
            for j, out in enumerate(outs)
        ]
        generated = sum(len(o.token_ids) for outs in groups for o in outs)
        return r.envelope(
            "text_completion",
            r.new_id("cmpl"),
            served.model_name,
            choices,
            usage=r.usage(sum(map(len, prompts)), generated),
        )

    async def stream(
        self,
        body: CompletionRequest,
        prompt: list[int],
        sampling: object,
        stop: list,
        logprobs: bool,
    ) -> AsyncIterator[str]:
        """One chunk per token with the text that is final so far; the last chunk carries the
        rest of the text and the finish reason."""
        model_name = self.served.model_name
        request_id = r.new_id("cmpl")
        text = r.TextStream(self.served.tokenizer, stop, body.skip_special_tokens)
        async for item in self.served.token_items(prompt, sampling):
            if isinstance(item, str):  # an error event
                yield item
                return
            if isinstance(item, TokenOut):
                tail = text.finish(item)
                choice = {"index": 0, "text": tail, "finish_reason": item.finish_reason}
                yield r.sse(r.envelope("text_completion", request_id, model_name, [choice]))
                yield r.sse("[DONE]")
                return
            token, log_prob, version = item
            choice = {
                "index": 0,
                "text": text.push(token),
                "finish_reason": None,
                "token_ids": [token],
                "weight_versions": [version],
                "logprobs": {"token_logprobs": [log_prob]} if logprobs else None,
            }
            yield r.sse(r.envelope("text_completion", request_id, model_name, [choice]))


def tokenize_prompts(tokenizer: object, prompt: object) -> list[list[int]]:
    """A completion's ``prompt`` as token-id lists: text, texts, ids, or lists of ids."""
    if isinstance(prompt, str):
        prompt = [prompt]
    if not prompt:
        raise RequestError("prompt is empty", "prompt")
    if all(isinstance(p, int) for p in prompt):
        return [list(prompt)]
    if all(isinstance(p, str) for p in prompt):
        return [tokenizer(p)["input_ids"] for p in prompt]
    return [list(p) for p in prompt]
