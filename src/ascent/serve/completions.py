"""``POST /v1/completions``: text or token-id prompts, one or many, each sampled ``n`` times;
streamed token by token for one prompt and ``n=1``."""

import asyncio
from collections.abc import AsyncIterator

from fastapi import Request
from fastapi.responses import StreamingResponse

from ascent.rollout.protocol import TokenOut
from ascent.rollout.scoring import TokenScores
from ascent.serve import responses as r
from ascent.serve.logprobs import ScoredTokens, completion_logprobs, scored_tokens
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
        top = body.logprobs or 0
        if body.max_tokens == 0:  # echo scores the prompt alone
            groups = [[TokenOut([], [], "length", [], [])] * body.n for _ in prompts]
        else:
            groups = await asyncio.gather(*(served.run(p, sampling, None, top) for p in prompts))
        scores: list = [None] * len(prompts)
        if body.scores_prompt:  # once per prompt, however many samples it has
            scores = await asyncio.gather(*(served.score_prompt(p, top) for p in prompts))
        choices = [
            self.choice(i * body.n + j, body, prompts[i], texts[i], out, scores[i], sampling.stop)
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

    def choice(
        self,
        index: int,
        body: CompletionRequest,
        prompt: list[int],
        text: str | None,
        out: TokenOut,
        prompt_scores: TokenScores | None,
        stop: list[str],
    ) -> dict:
        """One choice: the response (after the prompt's text when echoed), and its log-probs
        (after the prompt's ``prompt_scores`` when echoed) when asked for."""
        tokenizer, logprobs, echoed = self.served.tokenizer, None, None
        if body.logprobs is not None:
            scored = scored_tokens(prompt, out, prompt_scores)
            logprobs = completion_logprobs(
                tokenizer, scored, as_ids=body.return_tokens_as_token_ids
            )
        if body.echo:
            echoed = text if text is not None else tokenizer.decode(prompt)
        return r.completion_choice(
            index, tokenizer, prompt, out, stop, body.skip_special_tokens, logprobs, echoed
        )

    async def stream(
        self,
        body: CompletionRequest,
        prompt: list[int],
        sampling: object,
        stop: list,
    ) -> AsyncIterator[str]:
        """One chunk per token with the text that is final so far (and the token's log-prob
        and alternatives when asked for); the last chunk carries the rest of the text and the
        finish reason."""
        model_name, tokenizer = self.served.model_name, self.served.tokenizer
        request_id = r.new_id("cmpl")
        text = r.TextStream(tokenizer, stop, body.skip_special_tokens)
        offset = 0  # characters of the tokens streamed so far (text_offset)
        async for item in self.served.token_items(prompt, sampling, None, body.logprobs or 0):
            if isinstance(item, str):  # an error event
                yield item
                return
            if isinstance(item, TokenOut):
                tail = text.finish(item)
                choice = {"index": 0, "text": tail, "finish_reason": item.finish_reason}
                yield r.sse(r.envelope("text_completion", request_id, model_name, [choice]))
                yield r.sse("[DONE]")
                return
            logprobs = None
            if body.logprobs is not None:
                scored = ScoredTokens([item.token], [item.log_prob], [item.top_logprobs])
                logprobs = completion_logprobs(
                    tokenizer, scored, offset, body.return_tokens_as_token_ids
                )
                offset += len(tokenizer.decode([item.token]))
            choice = {
                "index": 0,
                "text": text.push(item.token),
                "finish_reason": None,
                "token_ids": [item.token],
                "weight_versions": [item.weight_version],
                "logprobs": logprobs,
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
