"""The seat of a verifiers environment, played by the policy in process
(``verifiers_hub``): stand-ins for verifiers' ``Agent`` and ``Interaction`` whose model calls
wait for the policy's turns (``Bridge``), recorded on a real ``vf.Trace`` through verifiers'
own ``RolloutSession`` (the seat's limits, ``@vf.stop`` and ``@vf.intercept`` hooks) and its
message graph, and scored by the task's own ``score``, as verifiers' interception server and
rollout do for a harness program.
"""

import asyncio
import time
import uuid
from contextlib import asynccontextmanager
from typing import Any


class Bridge:
    """The seat's model calls ("ask", messages) and the episode's end ("end", reward) or
    failure, in order, for reset and step; the policy's replies back to the seat."""

    def __init__(self) -> None:
        self.events: asyncio.Queue = asyncio.Queue()
        self.replies: asyncio.Queue = asyncio.Queue()

    async def ask(self, messages: list[dict]) -> str:
        self.events.put_nowait(("ask", messages))
        return await self.replies.get()

    async def next(self) -> tuple[str, Any]:
        kind, value = await self.events.get()
        if kind == "error":
            raise value
        return kind, value


class Seat:
    """A verifiers ``Agent`` (``run``, ``interaction``) whose model is the policy. A harness's
    ``runtime`` and ``tools`` arguments do not apply in process and are ignored."""

    def __init__(self, name: str, config: Any, bridge: Bridge, episode: Any) -> None:
        self.name, self.config, self.bridge, self.episode = name, config, bridge, episode
        self.trainable = True

    async def run(self, task: Any, **_: Any) -> Any:
        async with self.interaction(task) as exchange:
            await exchange.turn()
            exchange.trace.stop("agent_completed")
        return exchange.trace

    @asynccontextmanager
    async def interaction(self, task: Any, **_: Any) -> Any:
        exchange = Exchange(self, task)
        try:
            yield exchange
        except Exception as error:
            exchange.trace.record_error(error)
            raise
        else:
            exchange.trace.stop("user_closed")  # the first stop condition stays
            await task.score(exchange.trace)
            exchange.trace.is_completed = exchange.trace.ok = True
        finally:
            self.episode.traces.append(exchange.trace)


class Exchange:
    """A verifiers ``Interaction``: each ``turn`` is one model call of the seat, answered by
    the policy's next sampled turn, recorded on a real ``vf.Trace``."""

    def __init__(self, seat: Seat, task: Any) -> None:
        import verifiers.v1 as vf
        from verifiers.v1.clients import ModelContext
        from verifiers.v1.session import RolloutLimits, RolloutSession, hook_boundary
        from verifiers.v1.state import state_cls
        from verifiers.v1.utils.decorators import discover_decorated

        self.task, self.bridge = task, seat.bridge
        info = vf.AgentInfo(config=seat.config, name=seat.name, trainable=seat.trainable)
        self.trace = vf.Trace(task=trace_task(task), state=state_cls(type(task))(), agent=info)
        stops = [(hook_boundary(f, allow_trace=True), f) for f in task.hooks("stop")]
        edits = [
            (hook_boundary(f, allow_trace=False), f) for f in discover_decorated(task, "intercept")
        ]

        def at(hooks: list, boundary: type) -> list:
            return [f for kind, f in hooks if kind is boundary]

        self.session = RolloutSession(
            ctx=ModelContext(model="ascent", client=vf.EvalClientConfig()),
            trace=self.trace,
            limits=RolloutLimits(max_turns=seat.config.max_turns),
            trace_stops=at(stops, vf.Trace),
            request_stops=at(stops, vf.Request),
            response_stops=at(stops, vf.Response),
            request_interceptors=at(edits, vf.Request),
            response_interceptors=at(edits, vf.Response),
        )
        prompt, system = task.data.prompt, task.data.system_prompt
        self.messages = (
            [vf.UserMessage(content=prompt)] if isinstance(prompt, str) else list(prompt or [])
        )
        if system is not None:
            self.messages.insert(0, vf.SystemMessage(content=system))

    async def turn(self, message: Any = None) -> Any:
        import verifiers.v1 as vf
        from verifiers.v1 import graph
        from verifiers.v1.dialects import parse_message

        if isinstance(message, str):
            self.messages.append(vf.UserMessage(content=message))
        elif message is not None:
            self.messages += [parse_message(m) if isinstance(m, dict) else m for m in message]
        if self.session.stopped or await self.session.refused() is not None:
            return vf.Segment([], terminated=True)
        request, edits, stopped = await self.session.rewrite_request(
            vf.Request(messages=self.messages)
        )
        self.trace.request_rewrites.extend(edits)
        turn = graph.prepare_turn(self.trace, request.messages)
        if stopped is not None:
            turn.commit_prompt()
            self.trace.stop(stopped)
            return vf.Segment([], terminated=True)
        reply = await self.bridge.ask(
            [m.model_dump(mode="json", exclude_none=True) for m in turn.tail]
        )
        response = vf.Response(
            id=uuid.uuid4().hex,
            created=int(time.time()),
            model="ascent",
            message=vf.AssistantMessage(content=reply),
            finish_reason="stop",
        )
        response, edits, stopped = await self.session.rewrite_response(response)
        self.trace.response_rewrites.extend(edits)
        turn.commit(response)
        if stopped is not None:  # the reply stands; the next turn finds the exchange over
            self.trace.stop(stopped)
        self.messages = [*request.messages, response.message]
        return vf.Segment([response.message])


def trace_task(task: Any) -> Any:
    import verifiers.v1 as vf

    return vf.TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash)
