"""Client sessions of the Tinker service and their end.

The SDK opens a session (``create_session``), beats every 10 s (``session_heartbeat``) and
ends it with ``ServiceClient.close`` (``sessions/<id>/finish``). An ended session frees what
it held: its trained models' ranks (devices, over Ray a placement group) and memory, and its
sampling sessions; their checkpoints stay. A session whose heartbeats stop for
``session_timeout_s`` (a client that crashed or lost the network) ends the same way, so a
lost client cannot hold devices forever. Calls on an ended session answer 410 Gone, which is
how the SDK learns it (it stops its heartbeats).
"""

import itertools
import time
import uuid
from dataclasses import dataclass, field


class SessionFinished(Exception):
    """A call on a session that has ended (answered 410)."""

    def __str__(self) -> str:
        return f"session {self.args[0]!r} has finished; open a new ServiceClient"


def session_of(any_id: str) -> str:
    """The session a model id (``<session>:train:<n>``) or sampler id belongs to."""
    return any_id.split(":", 1)[0]


@dataclass
class Sessions:
    timeout_s: float
    start: str = field(default_factory=lambda: uuid.uuid4().hex[:8])  # this server's run
    counter: itertools.count = field(default_factory=itertools.count)
    seen: dict[str, float] = field(default_factory=dict)  # live session -> last heartbeat
    finished: set[str] = field(default_factory=set)

    def new(self) -> str:
        """``sess-<start>-<n>``: unique across restarts of the server too, so that a new
        client's model ids (and checkpoint paths) never meet an earlier one's."""
        session_id = f"sess-{self.start}-{next(self.counter)}"
        self.seen[session_id] = time.monotonic()
        return session_id

    def check(self, session_id: str) -> None:
        if session_id in self.finished:
            raise SessionFinished(session_id)

    def beat(self, session_id: str) -> None:
        """A heartbeat (also of a session from before a restart: it lives on)."""
        self.check(session_id)
        self.seen[session_id] = time.monotonic()

    def finish(self, session_id: str) -> bool:
        """Mark ``session_id`` ended; False if it already was."""
        if session_id in self.finished:
            return False
        self.finished.add(session_id)
        self.seen.pop(session_id, None)
        return True

    def silent(self) -> list[str]:
        """Live sessions without a heartbeat for ``timeout_s``."""
        now = time.monotonic()
        return [s for s, last in self.seen.items() if now - last > self.timeout_s]
