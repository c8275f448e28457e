"""The Tinker API's futures, and the order a model's calls run in.

A submitted call answers at once with a ``request_id``; the client then polls
``retrieve_future`` for it. ``Futures.retrieve`` holds a poll until the call is done or
``wait_s`` pass (the SDK re-polls at once, so a poll must not return immediately while the
call runs), and gives the result: JSON, protobuf bytes, or a failure the SDK raises as
``RequestFailedError`` (category ``user`` for a request the client must fix, ``server``
for anything else).

A training client numbers its calls (``seq_id``, 1 up) and sends the next before the last
is done, chunks of one call in parallel: ``Sequenced`` runs a model's calls in that order,
one at a time, skipping a number that has not arrived after ``gap_s`` (a call the client
dropped) so that no call waits forever.
"""

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from ascent.errors import UserError


@dataclass
class Outcome:
    kind: str  # "json", "proto" or "error"
    payload: Any  # dict, bytes, or {"error": message, "category": ...}


def failure(error: BaseException) -> Outcome:
    category = "user" if isinstance(error, (UserError, KeyError, ValueError)) else "server"
    message = str(error) if not isinstance(error, KeyError) else f"missing {error}"
    return Outcome("error", {"error": f"{type(error).__name__}: {message}", "category": category})


class Futures:
    """request_id -> the call's outcome, once it has one."""

    def __init__(self) -> None:
        self._done: dict[str, asyncio.Event] = {}
        self._outcomes: dict[str, Outcome] = {}
        self._tasks: set[asyncio.Task] = set()

    def start(self, work: Awaitable[Outcome]) -> str:
        request_id = str(uuid.uuid4())
        self._done[request_id] = asyncio.Event()
        task = asyncio.create_task(self._settle(request_id, work))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return request_id

    async def _settle(self, request_id: str, work: Awaitable[Outcome]) -> None:
        try:
            self._outcomes[request_id] = await work
        except Exception as error:  # the call failed: the client gets it, the server goes on
            self._outcomes[request_id] = failure(error)
        self._done[request_id].set()

    def known(self, request_id: str) -> bool:
        return request_id in self._done

    async def retrieve(self, request_id: str, wait_s: float) -> Outcome | None:
        """The outcome, or None when the call is still running after ``wait_s``."""
        try:
            await asyncio.wait_for(self._done[request_id].wait(), timeout=wait_s)
        except TimeoutError:
            return None
        return self._outcomes[request_id]


class Sequenced:
    """One model's calls, one at a time in ``seq_id`` order, on ``executor`` (module
    docstring)."""

    def __init__(self, executor: Executor, first: int = 1, gap_s: float = 2.0) -> None:
        self.executor, self.next, self.gap_s = executor, first, gap_s
        self.waiting: set[int] = set()
        self.changed = asyncio.Condition()
        self.requests: dict[int, str] = {}  # seq_id -> request_id (a retried submit)

    async def run(self, seq_id: int, call: Callable[[], Any]) -> Any:
        loop = asyncio.get_running_loop()
        async with self.changed:
            self.waiting.add(seq_id)
            deadline = loop.time() + self.gap_s
            while seq_id > self.next:
                first_waiting = min(self.waiting) == seq_id
                if first_waiting and loop.time() > deadline:
                    break  # the numbers before it never came
                with contextlib.suppress(TimeoutError):  # look at the deadline again
                    await asyncio.wait_for(self.changed.wait(), timeout=0.1)
            self.waiting.discard(seq_id)
            self.next = max(self.next, seq_id) + 1
            try:
                return await loop.run_in_executor(self.executor, call)
            finally:
                self.changed.notify_all()
