"""One outside agent's episode: the user's agent function, run against its own session.

    async def run(base_url: str, row: dict) -> float | dict | None     (or a plain function)

``row`` is the dataset row (``prompt``, ``reward_model``, ``extra_info``, ...); the agent
talks to ``base_url`` with any OpenAI client, and returns the episode's reward: a number, or
a dict with ``reward`` and other numbers (kept as the episode's metrics). A coroutine
function runs in the caller's event loop (its async client's calls are served by the
gateway's thread); a plain function runs in a thread of its own, so a synchronous client
blocks no other episode.

How an episode ends (``OutsideEpisode.end``), and what it is worth:

- ``done``: the agent returned a reward;
- ``max_turns``: a call past the budget was refused (the agent may still return a reward,
  which counts; else it gets ``failed_reward``);
- ``error``: the agent raised (``error`` holds what); ``timeout``: it ran past
  ``timeout_s`` and was cancelled. Both get ``failed_reward``.

Whatever the end, the calls the engine answered are the episode's samples (their tokens were
sampled by the policy), and the session closes, so a late call from a cancelled agent is a
404 and cannot add to a finished episode.
"""

import asyncio
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from ascent.agents.trajectory import Trajectory
from ascent.gateway.samples import RecordedCall, calls_to_samples
from ascent.gateway.server import Gateway
from ascent.rollout.types import SamplingParams

OutsideEnd = Literal["done", "max_turns", "error", "timeout"]


@dataclass(frozen=True)
class EpisodeLimits:
    max_calls: int = 4
    timeout_s: float = 600.0
    failed_reward: float = 0.0


@dataclass
class OutsideEpisode:
    calls: list[RecordedCall]
    reward: float
    end: OutsideEnd
    metrics: dict[str, float] = field(default_factory=dict)
    error: str | None = None

    @property
    def samples(self) -> list[Trajectory]:
        return calls_to_samples(self.calls)


async def play_outside_episode(
    gateway: Gateway,
    agent: Callable[..., Any],
    row: dict,
    sampling: SamplingParams,
    limits: EpisodeLimits,
) -> OutsideEpisode:
    """Open a session for ``row``, run ``agent`` against it (see the module docstring), close
    the session; the episode with what it recorded."""
    session = gateway.sessions.open(row, sampling, limits.max_calls)
    end: OutsideEnd = "done"
    result, error = None, None
    try:
        call = _call(agent, gateway.base_url(session), row)
        result = await asyncio.wait_for(call, limits.timeout_s)
    except TimeoutError:
        end, error = "timeout", f"the agent ran past {limits.timeout_s:g} s"
    except Exception as raised:  # the agent's own failure: this episode's, not the run's
        end, error = "error", f"{type(raised).__name__}: {raised}"
    finally:
        gateway.sessions.close(session)
    if end == "done" and "max_turns" in session.errors:
        end = "max_turns"
    reward, metrics = limits.failed_reward, {}
    if end in ("done", "max_turns") and result is not None:
        try:
            reward, metrics = _reward(result)
        except ValueError as bad:
            end, error = "error", str(bad)
    elif end == "done":
        end, error = "error", "the agent returned None: return its reward (a number or a dict)"
    return OutsideEpisode(list(session.calls), reward, end, metrics, error)


async def _call(agent: Callable[..., Any], base_url: str, row: dict) -> Any:
    if inspect.iscoroutinefunction(agent):
        return await agent(base_url, row)
    return await asyncio.to_thread(agent, base_url, row)


def _reward(result: Any) -> tuple[float, dict[str, float]]:
    """The episode's reward and metrics from what the agent returned; ValueError for what
    cannot be one (the agent's mistake, reported with its episode)."""
    metrics = {}
    if isinstance(result, dict):
        if "reward" not in result:
            raise ValueError(f"the agent's dict needs a 'reward' key; got keys {sorted(result)}")
        metrics = {
            k: float(v)
            for k, v in result.items()
            if k != "reward" and isinstance(v, int | float) and not isinstance(v, bool)
        }
        result = result["reward"]
    if isinstance(result, bool) or not isinstance(result, int | float) or not math.isfinite(result):
        raise ValueError(f"the agent's reward must be a finite number, not {result!r}")
    return float(result), metrics
