"""``POST /v1/chat/completions``: messages rendered with the model's chat template (``tools``
included; ``image_url`` parts for a vision-language model, ``ascent.serve.images``), Hermes
tool calls parsed into ``tool_calls``; streamed for ``n=1``."""

from collections.abc import AsyncIterator

from fastapi import Request
from fastapi.responses import StreamingResponse

from ascent.rollout.protocol import TokenOut
from ascent.serve import responses as r
from ascent.serve.images import request_images, with_image_tokens
from ascent.serve.logprobs import ScoredTokens, chat_logprobs, scored_tokens
from ascent.serve.schema import ChatRequest, RequestError, parse
from ascent.serve.served import Served


class Chat:
    """The chat route over ``served``."""

    def __init__(self, served: Served) -> None:
        self.served = served

    async def chat(self, request: Request) -> object:
        served = self.served
        body = await parse(request, ChatRequest)
        served.check(body)
        tools = body.tools if body.tool_choice != "none" else None
        images = request_images(body.messages)

        def render(messages: list[dict]) -> list[int]:
            return served.render(messages, tools)

        prompt = with_image_tokens(served.engine, body.messages, images, render)
        # Without a limit the reply may fill the context (the engine stops it there).
        limit = body.max_completion_tokens or body.max_tokens or served.engine.max_model_len
        sampling = body.sampling(limit, limit, served.eos)
        served.check_prompt(prompt, sampling, "messages")
        if body.stream:
            if body.n != 1:
                raise RequestError("stream needs n=1", "stream")
            stream = self.stream(body, prompt, sampling, bool(tools), images)
            return StreamingResponse(stream, media_type="text/event-stream")
        outs = await served.run(prompt, sampling, images, body.top_logprobs or 0)
        logprobs = [
            chat_logprobs(served.tokenizer, scored_tokens(prompt, o)) if body.logprobs else None
            for o in outs
        ]
        choices = [
            r.chat_choice(
                j,
                served.tokenizer,
                prompt,
                out,
                sampling.stop,
                body.skip_special_tokens,
                logprobs[j],
                bool(tools),
            )
            for j, out in enumerate(outs)
        ]
        generated = sum(len(o.token_ids) for o in outs)
        return r.envelope(
            "chat.completion",
            r.new_id("chatcmpl"),
            served.model_name,
            choices,
            usage=r.usage(len(prompt), generated),
        )

    async def stream(
        self,
        body: ChatRequest,
        prompt: list[int],
        sampling: object,
        tools: bool,
        images: list[str] | None = None,
    ) -> AsyncIterator[str]:
        """Content deltas as they are final; with tools, one delta at the end (a tool call
        is only known once its block closes)."""
        tokenizer, model_name = self.served.tokenizer, self.served.model_name
        request_id = r.new_id("chatcmpl")
        text = r.TextStream(tokenizer, sampling.stop, body.skip_special_tokens)

        def chunk(delta: dict, finish: str | None = None, **extra: object) -> str:
            choice = {"index": 0, "delta": delta, "finish_reason": finish, **extra}
            return r.sse(r.envelope("chat.completion.chunk", request_id, model_name, [choice]))

        yield chunk({"role": "assistant", "content": ""})
        top = body.top_logprobs or 0
        async for item in self.served.token_items(prompt, sampling, images, top):
            if isinstance(item, str):  # an error event
                yield item
                return
            if isinstance(item, TokenOut):
                final = r.chat_choice(
                    0,
                    tokenizer,
                    prompt,
                    item,
                    sampling.stop,
                    body.skip_special_tokens,
                    None,
                    tools,
                )
                if tools:
                    delta = {k: v for k, v in final["message"].items() if k != "role"}
                else:
                    delta = {"content": text.finish(item)}
                yield chunk(delta, final["finish_reason"], token_ids=[])
                yield r.sse("[DONE]")
                return
            delta = {} if tools else {"content": text.push(item.token)}
            logprobs = None
            if body.logprobs:
                scored = ScoredTokens([item.token], [item.log_prob], [item.top_logprobs])
                logprobs = chat_logprobs(tokenizer, scored)
            yield chunk(
                delta,
                None,
                logprobs=logprobs,
                token_ids=[item.token],
                weight_versions=[item.weight_version],
            )
