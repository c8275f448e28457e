"""An outside agent's episodes as gateway sessions: one per episode, each with its own secret
``base_url``, its call budget, its run's sampling settings, and the calls it recorded.

A session's id is 32 random bytes (URL-safe): the URL is the capability, so an agent can
reach only its own live episode, and a guessed or stale URL (another episode's, or one that
has ended) gets a 404. What the agent may choose and what the run decides:

- the run decides how to sample (temperature, top-p, top-k, the seed stream): the recorded
  log-probs must be those of the distribution the trainer scores, whatever the agent asks;
- the agent chooses its messages, tools, stop strings (beside the run's) and ``max_tokens``,
  within the room
  left in the sample its call joins (``samples.py``): a sample's response, every turn and
  everything rendered between them, holds at most the run's ``max_new_tokens``
  (``rollout.max_response_length``), as in the in-process loop. A call with no room left
  gets a 400 and the episode ends as ``length``;
- ``max_calls`` calls per episode (the agent's turns); the next one gets a 400 naming the
  limit, and the episode ends as ``max_turns``;
- with a seed, call k samples with seed + k (the in-process agent loop's rule per turn).

An agent may report rewards to its session instead of (or beside) returning one
(``report``): the episode's, or one call's (kept on that call, ``RecordedCall.reward``).
"""

import dataclasses
import math
import secrets
import threading
from dataclasses import dataclass, field

from ascent.gateway.continuation import ChatHistory
from ascent.gateway.samples import RecordedCall, extends
from ascent.rollout.protocol import TokenOut
from ascent.rollout.types import SamplingParams


class SessionGone(LookupError):
    """No live session has this id (never opened, or its episode ended)."""


class CallBudgetSpent(RuntimeError):
    """The session made its ``max_calls`` calls already."""


class ContextSpent(RuntimeError):
    """The sample a call would join has no room left for a response."""


class BadReport(ValueError):
    """A reward report's ``field`` (reward or call) holds what cannot be one."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass
class Session:
    """One episode's gateway session. ``calls``: what the engine ran for it, in order;
    ``reward``: the episode's reward as the agent reported it (``report``; None: not
    reported); ``call_rewards``: rewards reported for single calls, by call index;
    ``errors``: why calls were refused (the episode's end reason when the agent gives up
    on them)."""

    id: str
    row: dict
    sampling: SamplingParams
    max_calls: int
    calls: list[RecordedCall] = field(default_factory=list)
    reward: float | None = None
    call_rewards: dict[int, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    started: int = 0  # calls admitted (recorded or still running)
    # The sample the next extending call joins (``calls_to_samples``'s rule, kept as calls
    # are recorded): its tokens so far, and where its response begins.
    held: list[int] = field(default_factory=list)
    held_prompt: int = 0
    history: ChatHistory | None = None  # the chain of chat calls (``continuation.py``)

    def admit(self) -> None:
        """Count a call in, or refuse it over the budget."""
        if self.started >= self.max_calls:
            self.errors.append("max_turns")
            raise CallBudgetSpent(
                f"this episode made its {self.max_calls} calls (rollout.agent.max_turns); "
                "end the episode"
            )
        self.started += 1

    def room(self, prompt: list[int]) -> int:
        """Response tokens left for a call with ``prompt``: the run's budget less what the
        sample it joins holds already (its whole budget when it starts a new one)."""
        budget = self.sampling.max_new_tokens
        if self._joins(prompt):
            return budget - (len(prompt) - self.held_prompt)
        return budget

    def _joins(self, prompt: list[int]) -> bool:
        """Whether a call with ``prompt`` joins the held sample (there is one, and the
        prompt extends its tokens)."""
        return bool(self.held) and extends(self.held, prompt)

    def sampling_for(self, prompt: list[int], asked: SamplingParams) -> SamplingParams:
        """The run's way to sample, with the agent's stops and its length within the room
        its sample has left; ContextSpent when there is none."""
        room = self.room(prompt)
        if room <= 0:
            self.errors.append("length")
            raise ContextSpent(
                f"this episode's sample holds its {self.sampling.max_new_tokens} response "
                "tokens (rollout.max_response_length): end the episode, or start a shorter "
                "history"
            )
        seed = self.sampling.seed
        return self.sampling.model_copy(
            update={
                "n": 1,
                "seed": None if seed is None else seed + max(self.started - 1, 0),
                "max_new_tokens": min(asked.max_new_tokens, room),
                "stop": sorted({*asked.stop, *self.sampling.stop}),
                "stop_token_ids": sorted({*asked.stop_token_ids, *self.sampling.stop_token_ids}),
            }
        )

    def report(self, reward: object, call: object = None) -> None:
        """The agent's reward: the episode's (``call`` None), or that of one of its calls
        (``call``: its index from 0, or "last": the latest finished call). BadReport,
        naming the field, for what cannot be one."""
        if isinstance(reward, bool) or not isinstance(reward, int | float):
            raise BadReport("reward", f"'reward' must be a number, not {reward!r}")
        if not math.isfinite(reward):
            raise BadReport("reward", f"'reward' must be finite, not {reward!r}")
        if call is None:
            self.reward = float(reward)
            return
        index = len(self.calls) - 1 if call == "last" else call
        if (
            isinstance(index, bool)
            or not isinstance(index, int)
            or not 0 <= index < len(self.calls)
        ):
            raise BadReport(
                "call",
                f"'call' must be 'last' or the index of a finished call (0 to "
                f"{len(self.calls) - 1}), not {call!r}",
            )
        self.call_rewards[index] = float(reward)

    def recorded_calls(self) -> list[RecordedCall]:
        """The calls in order, each with the reward reported for it."""
        return [
            dataclasses.replace(call, reward=self.call_rewards[k])
            if k in self.call_rewards
            else call
            for k, call in enumerate(self.calls)
        ]

    def record(self, prompt: list[int], out: TokenOut, images: list[str] | None = None) -> None:
        if not self._joins(prompt):
            self.held_prompt = len(prompt)  # a new sample starts at this call
        self.held = [*prompt, *out.token_ids]
        self.calls.append(
            RecordedCall(
                tuple(prompt),
                tuple(out.token_ids),
                tuple(out.log_probs),
                tuple(out.weight_versions),
                images=tuple(images or ()),
            )
        )


class Sessions:
    """The live sessions of one gateway, by id; safe to use from the server's thread and the
    episodes' event loop at once."""

    def __init__(self, tokenizer: object = None) -> None:
        self.tokenizer = tokenizer
        self._live: dict[str, Session] = {}
        self._lock = threading.Lock()

    def open(self, row: dict, sampling: SamplingParams, max_calls: int) -> Session:
        session = Session(secrets.token_urlsafe(32), row, sampling, max_calls)
        session.history = ChatHistory(self.tokenizer)
        with self._lock:
            self._live[session.id] = session
        return session

    def get(self, session_id: str) -> Session:
        with self._lock:
            session = self._live.get(session_id)
        if session is None:
            raise SessionGone("no live episode has this URL (it ended, or never was)")
        return session

    def close(self, session: Session) -> Session:
        """End the session: its URL stops answering; returns it with what it recorded."""
        with self._lock:
            self._live.pop(session.id, None)
        return session

    def __len__(self) -> int:
        with self._lock:
            return len(self._live)
