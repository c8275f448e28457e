"""The agent loop: many episodes at once (asyncio) against one rollout backend, each a
conversation of sampled assistant turns and environment steps, kept as exact tokens.

    episode:  messages = env.reset(row)                      # the row's images in place
              repeat up to max_turns:
                  out  = await backend.generate(sample's tokens so far, its images)  # mask 1
                  step = env.step(assistant message)                       # tools run here
                  stop if step.done, or the turn did not end by itself (length, abort)
                  append the template's tokens for step.observations      # mask 0

Every episode's requests go to the backend as they come, so the engine batches the turns of
all episodes that are generating while others wait for their tools (continuous batching across
sessions). Budgets: a sample's response (sampled and rendered tokens together) holds at most
``max_response_tokens``; each tool result at most ``max_tool_response_tokens`` (cut, and
marked as cut); a prompt that has outgrown ``max_model_len`` (after a new sample started on
drift) ends the episode.

Images (``ascent.agents.images``) ride with the sample whose tokens show them: each request
carries its sample's images in the order of their image tokens. A turn that sampled the
image token ends the episode (``image_token``): no engine could tell it from an image's in
the next turn's prompt.
"""

import asyncio
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from ascent.agents.conversation import Conversation, DriftMode
from ascent.agents.environment import Environment, Step
from ascent.agents.images import ImageTokens, with_row_images
from ascent.agents.trajectory import Trajectory
from ascent.rollout.protocol import RolloutBackend
from ascent.rollout.types import SamplingParams

# error, timeout: an outside agent's (``ascent.gateway``) raised, or ran past its time;
# image_token: a turn sampled the image token, which no turn may follow (module docstring)
EpisodeEnd = Literal["done", "max_turns", "length", "abort", "error", "timeout", "image_token"]
EPISODE_ENDS: tuple[str, ...] = get_args(EpisodeEnd)
TRUNCATED = "\n[... cut: the tool's output was longer than the limit]"


@dataclass
class AgentLimits:
    max_turns: int = 4
    max_response_tokens: int = 512
    max_tool_response_tokens: int = 256
    max_model_len: int = 2048
    on_drift: DriftMode = "new_sample"
    tools_in_prompt: bool = True  # the tools' schemas go to the chat template (a row's own win)


@dataclass
class Episode:
    """One episode: its training samples, the conversation as messages, what ended it."""

    samples: list[Trajectory]
    messages: list[dict]
    turns: int
    end: EpisodeEnd
    rewards: list[float] = field(default_factory=list)  # the environment's, one per turn
    drifts: int = 0
    tool_calls: int = 0  # as the environment counts them (ToolEnvironment: malformed ones too)
    tool_errors: int = 0  # of those, the ones that failed

    @property
    def reward(self) -> float:
        return sum(self.rewards)


async def run_episode(
    backend: RolloutBackend,
    tokenizer: Any,
    environment: Environment,
    row: dict,
    sampling: SamplingParams,
    limits: AgentLimits,
    images: ImageTokens | None = None,
) -> Episode:
    """Play one episode (see the module docstring). ``sampling.seed``, when set, seeds the
    first turn; turn t uses seed + t. ``images``: how the policy reads images (None: it
    takes none)."""
    conversation = await _open(environment, row, tokenizer, limits, images)
    rewards: list[float] = []
    end: EpisodeEnd = "max_turns"
    for turn in range(limits.max_turns):
        sample = conversation.current
        room = min(
            limits.max_response_tokens - len(sample.response_ids),
            limits.max_model_len - len(sample.token_ids),
        )
        if room <= 0:
            end = "length"
            break
        params = sampling.model_copy(
            update={
                "n": 1,
                "max_new_tokens": min(sampling.max_new_tokens, room),
                "seed": None if sampling.seed is None else sampling.seed + turn,
            }
        )
        out = await backend.generate(sample.token_ids, params, images=list(sample.images) or None)
        message = conversation.add_assistant(out)
        step: Step = await _call(environment.step, message)
        rewards.append(float(step.reward))
        if len(sample.response_ids):  # this turn's reward sits on its last sampled token
            sample.turn_rewards.append((len(sample.response_ids) - 1, float(step.reward)))
        if out.finish_reason != "stop":
            end = "abort" if out.finish_reason == "abort" else "length"
            break
        if step.done:
            end = "done"
            break
        if turn + 1 < limits.max_turns:
            if conversation.sampled_image_token:
                end = "image_token"
                break
            conversation.add_messages(_cut(step.observations, tokenizer, limits))
    conversation.current.drop_trailing_rendered()  # nothing sampled follows them
    return Episode(
        conversation.samples,
        conversation.messages,
        len(rewards),
        end,
        rewards,
        conversation.drifts,
        getattr(environment, "calls", 0),
        getattr(environment, "errors", 0),
    )


async def _open(
    environment: Environment,
    row: dict,
    tokenizer: Any,
    limits: AgentLimits,
    images: ImageTokens | None,
) -> Conversation:
    """The episode's conversation from the environment's opening messages, the row's images
    in their places (``with_row_images``)."""
    messages = with_row_images(await _call(environment.reset, row), row.get("images") or [])
    tools = row.get("tools")  # the row's own definitions, as its prompt was rendered
    if not tools and limits.tools_in_prompt:
        tools = [tool.schema for tool in environment.tools]
    return Conversation(
        tokenizer, messages, tools=tools or None, on_drift=limits.on_drift, images=images
    )


async def run_episodes(
    backend: RolloutBackend,
    tokenizer: Any,
    make_environment: Callable[[dict], Environment],
    rows: list[dict],
    sampling: SamplingParams,
    limits: AgentLimits,
    images: ImageTokens | None = None,
) -> list[Episode]:
    """``sampling.n`` episodes of every row, all at once; ordered by row, then sample. With a
    seed, episode k (of all) seeds its turns from seed + 1000 * k."""
    jobs = [
        run_episode(backend, tokenizer, make_environment(row), row, params, limits, images)
        for row, params in episode_samplings(rows, sampling)
    ]
    return list(await asyncio.gather(*jobs))


def episode_samplings(
    rows: list[dict], sampling: SamplingParams
) -> Iterator[tuple[dict, SamplingParams]]:
    """(row, its episode's sampling) for ``sampling.n`` episodes of every row, ordered by
    row, then sample; each samples one answer, and with a seed, episode k (of all) seeds
    from seed + 1000 * k (its turns from there on)."""
    for index, row in enumerate(rows):
        for sample in range(sampling.n):
            k = index * sampling.n + sample
            seed = None if sampling.seed is None else sampling.seed + 1000 * k
            yield row, sampling.model_copy(update={"seed": seed, "n": 1})


def _cut(observations: list[dict], tokenizer: Any, limits: AgentLimits) -> list[dict]:
    """Tool results cut to ``max_tool_response_tokens`` of their own tokens."""
    kept = []
    for message in observations:
        content = message.get("content")
        if message.get("role") == "tool" and isinstance(content, str):
            ids = tokenizer(content, add_special_tokens=False)["input_ids"]
            if len(ids) > limits.max_tool_response_tokens:
                head = tokenizer.decode(ids[: limits.max_tool_response_tokens])
                message = {**message, "content": head + TRUNCATED}
        kept.append(message)
    return kept


async def _call(function: Callable, *arguments: Any) -> Any:
    """Await a coroutine function; run a plain one on a worker thread."""
    if inspect.iscoroutinefunction(function):
        return await function(*arguments)
    return await asyncio.to_thread(function, *arguments)
