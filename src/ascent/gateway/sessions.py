"""An outside agent's episodes as gateway sessions: one per episode, each with its own secret
``base_url``, its call budget, its run's sampling settings, and the calls it recorded.

A session's id is 32 random bytes (URL-safe): the URL is the capability, so an agent can
reach only its own live episode, and a guessed or stale URL (another episode's, or one that
has ended) gets a 404. What the agent may choose and what the run decides:

- the run decides how to sample (temperature, top-p, top-k, the seed stream): the recorded
  log-probs must be those of the distribution the trainer scores, whatever the agent asks;
- the agent chooses its messages, tools, stop strings and ``max_tokens``, within the run's
  ``max_new_tokens`` per call;
- ``max_calls`` calls per episode (the agent's turns); the next one gets a 400 naming the
  limit, and the episode ends as ``max_turns``.
"""

import secrets
import threading
from dataclasses import dataclass, field

from ascent.gateway.samples import RecordedCall
from ascent.rollout.protocol import TokenOut
from ascent.rollout.types import SamplingParams


class SessionGone(LookupError):
    """No live session has this id (never opened, or its episode ended)."""


class CallBudgetSpent(RuntimeError):
    """The session made its ``max_calls`` calls already."""


@dataclass
class Session:
    """One episode's gateway session. ``calls``: what the engine ran for it, in order;
    ``rewards``: what the agent reported for it (``report``); ``errors``: why calls were
    refused (the episode's end reason when the agent gives up on them)."""

    id: str
    row: dict
    sampling: SamplingParams
    max_calls: int
    calls: list[RecordedCall] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    started: int = 0  # calls admitted (recorded or still running)

    def admit(self) -> None:
        """Count a call in, or refuse it over the budget."""
        if self.started >= self.max_calls:
            self.errors.append("max_turns")
            raise CallBudgetSpent(
                f"this episode made its {self.max_calls} calls (rollout.agent.max_turns); "
                "end the episode"
            )
        self.started += 1

    def sampling_for(self, asked: SamplingParams) -> SamplingParams:
        """The run's way to sample, with the agent's stops and its length within the run's."""
        return self.sampling.model_copy(
            update={
                "n": 1,
                "max_new_tokens": min(asked.max_new_tokens, self.sampling.max_new_tokens),
                "stop": list(asked.stop),
                "stop_token_ids": sorted({*asked.stop_token_ids, *self.sampling.stop_token_ids}),
            }
        )

    def record(self, prompt: list[int], out: TokenOut) -> None:
        self.calls.append(
            RecordedCall(
                tuple(prompt),
                tuple(out.token_ids),
                tuple(out.log_probs),
                tuple(out.weight_versions),
            )
        )


class Sessions:
    """The live sessions of one gateway, by id; safe to use from the server's thread and the
    episodes' event loop at once."""

    def __init__(self) -> None:
        self._live: dict[str, Session] = {}
        self._lock = threading.Lock()

    def open(self, row: dict, sampling: SamplingParams, max_calls: int) -> Session:
        session = Session(secrets.token_urlsafe(32), row, sampling, max_calls)
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
