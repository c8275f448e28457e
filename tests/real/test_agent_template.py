"""Multi-turn episodes on the real chat template (ChatML with SmolLM2's default system
prompt): what the agent loop trains on is the template's own rendering of the conversation,
with the model's sampled tokens in place, and the SFT renderer gives a finished conversation
the same tokens and trains every token RL samples in it."""

import asyncio

from ascent.agents.conversation import Conversation
from ascent.agents.environment import Environment, Step
from ascent.agents.loop import AgentLimits, run_episodes
from ascent.data.chat import render_chat
from ascent.data.sft import chat_example
from ascent.models import load_causal_lm, load_tokenizer
from ascent.quickstart import real_task
from ascent.quickstart.tools_task import question, tool_call
from ascent.rollout import EngineLimits, NativeEngine, SamplingParams
from ascent.rollout.native_backend import NativeBackend
from ascent.rollout.protocol import TokenOut


class AskAgain(Environment):
    """A user who asks for a check after every answer, for ``turns`` turns."""

    def __init__(self, turns: int):
        self.turns, self.seen = turns, 0

    def reset(self, row):
        return list(row["prompt"])

    def step(self, message):
        self.seen += 1
        again = {"role": "user", "content": "Are you sure? Check it once more."}
        return Step([again], reward=0.0, done=self.seen >= self.turns)


def test_sampled_episodes_are_the_templates_rendering(smollm2):
    tokenizer = load_tokenizer(smollm2)
    engine = NativeEngine(
        load_causal_lm(smollm2),
        EngineLimits(max_num_seqs=8, max_model_len=512),
        tokenizer=tokenizer,
    )
    backend = NativeBackend(engine, tokenizer)
    asks = [real_task.question((12, 7)), real_task.question((3, 5))]
    rows = [{"prompt": [{"role": "user", "content": ask}]} for ask in asks]
    sampling = SamplingParams(
        n=2, temperature=1.0, max_new_tokens=24, seed=0, stop_token_ids=[tokenizer.eos_token_id]
    )
    limits = AgentLimits(max_turns=3, max_response_tokens=200, max_model_len=512)

    async def play():
        try:
            return await run_episodes(
                backend, tokenizer, lambda row: AskAgain(3), rows, sampling, limits
            )
        finally:
            await backend.close()

    episodes = asyncio.run(play())
    assert len(episodes) == 4
    assert max(e.turns for e in episodes) >= 2  # (a turn cut at 24 tokens ends its episode)
    for episode in episodes:
        assert episode.drifts == 0 and len(episode.samples) == 1  # ChatML only appends
        [sample] = episode.samples
        rendered = render_chat(tokenizer, episode.messages, generation=False)
        assert rendered.startswith("<|im_start|>system\nYou are a helpful AI assistant")
        text = tokenizer.decode(sample.token_ids)
        # Everything up to the last sampled token is the template's text; after it the
        # template adds the "\n" that follows an end-of-turn token, and closes a turn that
        # was cut at the token limit.
        assert rendered.startswith(text)
        cut = episode.end == "length"
        assert rendered[len(text) :] in ("\n", "<|im_end|>\n" if cut else "\n")


def test_a_tool_call_episode_gives_sft_and_rl_the_same_tokens(smollm2):
    tokenizer = load_tokenizer(smollm2)
    end = tokenizer.eos_token_id  # <|im_end|>

    def turn(text):
        ids = [*tokenizer(text, add_special_tokens=False)["input_ids"], end]
        return TokenOut(ids, [-0.5] * len(ids), "stop", [0] * len(ids))

    conversation = Conversation(tokenizer, question((123, 45)))
    conversation.add_assistant(turn(tool_call((123, 45))))
    conversation.add_messages([{"role": "tool", "content": "5535"}])
    conversation.add_assistant(turn("5535"))
    [sample] = conversation.samples
    example = chat_example(tokenizer, conversation.messages)
    count = len(sample.token_ids)
    assert example.input_ids[:count] == sample.token_ids
    rl_mask = [0] * len(sample.prompt_ids) + sample.response_mask
    assert all(s >= r for s, r in zip(example.loss_mask[:count], rl_mask, strict=True))
    sampled = tokenizer.decode([t for t, m in zip(sample.token_ids, rl_mask, strict=True) if m])
    assert sampled == f"{tool_call((123, 45))}<|im_end|>5535<|im_end|>"
    assert "<|im_start|>tool\n5535<|im_end|>" in tokenizer.decode(sample.token_ids)
