"""One outside agent's episode: the user's agent function, run against its own session.

    async def run(base_url: str, row: dict) -> float | dict | None     (or a plain function)

``row`` is the dataset row (``prompt``, ``reward_model``, ``extra_info``, ...); the agent
talks to ``base_url`` with any OpenAI client, and returns the episode's reward: a number, or
a dict with ``reward`` and other numbers (kept as the episode's metrics), or None when it
reported its reward to the session (``POST {base_url}/reward``; a returned reward wins). A
coroutine function runs in the caller's event loop (its async client's calls are served by
the gateway's thread); a plain function runs on a daemon thread of its own, so a synchronous
client blocks no other episode, and one that hangs past ``timeout_s`` is left behind without
holding up the step (its late calls find the session closed).

How an episode ends (``OutsideEpisode.end``), and what it is worth:

- ``done``: the agent returned (or reported) a reward;
- ``max_turns``: a call past the budget was refused; ``length``: a call past the sample's
  response budget or the context. Whether the agent then raised or returned, this is the
  end; a reward it returned counts, else it gets ``failed_reward``;
- ``error``: the agent raised (``error`` holds what); ``timeout``: it ran past
  ``timeout_s`` and was cancelled. Both get ``failed_reward``.

Whatever the end, the calls the engine answered are the episode's samples (their tokens were
sampled by the policy), and the session closes, so a late call from a cancelled agent is a
404 and cannot add to a finished episode.
"""

import asyncio
import contextlib
import inspect
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from ascent.agents.trajectory import Trajectory
from ascent.gateway.samples import RecordedCall, calls_to_samples
from ascent.gateway.server import Gateway
from ascent.rollout.types import SamplingParams

OutsideEnd = Literal["done", "max_turns", "length", "error", "timeout"]


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
    refused = session.errors[-1] if session.errors else None  # max_turns or length
    if result is None and session.reward is not None:
        result = session.reward
    reward, metrics = limits.failed_reward, {}
    if end == "done" and result is not None:
        try:
            reward, metrics = _reward(result)
        except ValueError as bad:
            end, error = "error", str(bad)
    elif end == "done" and refused is None:
        end, error = (
            "error",
            (
                "the agent returned None and reported no reward: return it (a number or a dict "
                "with 'reward'), or POST it to {base_url}/reward"
            ),
        )
    if refused is not None and end != "timeout":
        end = refused  # the cause: a refused call, whether the agent returned or raised on it
    return OutsideEpisode(session.recorded_calls(), reward, end, metrics, error)


async def _call(agent: Callable[..., Any], base_url: str, row: dict) -> Any:
    if inspect.iscoroutinefunction(agent):
        return await agent(base_url, row)
    return await _on_own_thread(agent, base_url, row)


async def _on_own_thread(function: Callable[..., Any], *arguments: Any) -> Any:
    """``function(*arguments)`` on a daemon thread, awaited. Not the loop's default executor:
    ``asyncio.run`` joins that executor's threads on the way out, so one hung agent would
    hang the whole rollout; a daemon thread that outlives its episode is simply abandoned."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future = loop.create_future()

    def settle(outcome: Any, failed: BaseException | None) -> None:
        if done.cancelled():
            return
        if failed is not None:
            done.set_exception(failed)
        else:
            done.set_result(outcome)

    def target() -> None:
        try:
            outcome, failed = function(*arguments), None
        except BaseException as raised:  # handed to the episode, which reports it
            outcome, failed = None, raised
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits for it now
            loop.call_soon_threadsafe(settle, outcome, failed)

    threading.Thread(target=target, name="outside-agent", daemon=True).start()
    return await done


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
