"""``POST /v1/completions``: text or token-id prompts, one or many, each sampled ``n`` times;
streamed token by token for one prompt and ``n=1``."""

import asyncio
from collections.abc import AsyncIterator

from fastapi import Request
from fastapi.responses import StreamingResponse

from ascent.rollout.protocol import TokenOut
from ascent.rollout.types import SamplingParams
from ascent.serve import responses as r
from ascent.serve.logprobs import completion_logprobs, scored_tokens
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
        prompts, texts = tokenize_prompts(served.tokenizer, body.prompt)
        sampling = body.sampling(body.max_tokens, 16, served.eos)
        for prompt in prompts:
            served.check_prompt(prompt, sampling)
        if body.stream:
            if len(prompts) != 1 or body.n != 1:
                raise RequestError("stream needs one prompt and n=1", "stream")
            stream = self.stream(body, prompts[0], sampling, sampling.stop)
            return StreamingResponse(stream, media_type="text/event-stream")
        if body.max_tokens == 0:  # echo scores the prompt alone
            groups = [[TokenOut([], [], "length", [])] * body.n for _ in prompts]
        else:
            groups = await asyncio.gather(*(served.run(p, sampling) for p in prompts))
        choices = await asyncio.gather(
            *(
                self.choice(i * body.n + j, body, prompts[i], texts[i], out, sampling)
                for i, outs in enumerate(groups)
                for j, out in enumerate(outs)
            )
        )
        generated = sum(len(o.token_ids) for outs in groups for o in outs)
        return r.envelope(
            "text_completion",
            r.new_id("cmpl"),
            served.model_name,
            list(choices),
            usage=r.usage(sum(map(len, prompts)), generated),
        )

    async def choice(
        self,
        index: int,
        body: CompletionRequest,
        prompt: list[int],
        text: str | None,
        out: TokenOut,
        sampling: SamplingParams,
    ) -> dict:
        """One choice; its log-probs scored when the prompt's or alternatives are asked for."""
        tokenizer, logprobs = self.served.tokenizer, None
        if body.logprobs is not None:
            scores = None
            if body.scores_prompt or body.logprobs > 0:
                scores = await self.served.score(prompt, out, body.logprobs, sampling)
            scored = scored_tokens(prompt, out, scores, body.echo)
            logprobs = completion_logprobs(tokenizer, scored)
        echoed = None
        if body.echo:
            echoed = text if text is not None else tokenizer.decode(prompt)
        return r.completion_choice(
            index,
            tokenizer,
            prompt,
            out,
            sampling.stop,
            body.skip_special_tokens,
            logprobs,
            echoed,
        )

    async def stream(
        self,
        body: CompletionRequest,
        prompt: list[int],
        sampling: object,
        stop: list,
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
                "logprobs": {"token_logprobs": [log_prob]} if body.logprobs is not None else None,
            }
            yield r.sse(r.envelope("text_completion", request_id, model_name, [choice]))


def tokenize_prompts(tokenizer: object, prompt: object) -> tuple[list[list[int]], list[str | None]]:
    """A completion's ``prompt`` as token-id lists (text, texts, ids, or lists of ids), and
    each one's text where it came as text (what ``echo`` repeats)."""
    if isinstance(prompt, str):
        prompt = [prompt]
    if not prompt:
        raise RequestError("prompt is empty", "prompt")
    if all(isinstance(p, int) for p in prompt):
        return [list(prompt)], [None]
    if all(isinstance(p, str) for p in prompt):
        return [tokenizer(p)["input_ids"] for p in prompt], list(prompt)
    return [list(p) for p in prompt], [None] * len(prompt)
