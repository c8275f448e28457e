"""The native engine as a rollout backend: many concurrent callers, one step loop.

The engine runs on one thread of its own (started at the first async call). Callers, from any
event loop or thread, hand it commands: add a request, abort one, pause, load weights. The
thread runs every waiting command between two decode steps, so a request joins the running
batch at the next step, and weights change between steps while responses are in flight (each
token records its weight version). With no work, or paused, the thread sleeps on its queue.

``generate_batch`` (the RL worker's call) runs on the caller's thread when the step thread
was never started: an RL run with the in-process backend stays single-threaded, and a
debugger steps straight into the engine.

A step that raises has failed only the requests it concerned (``Scheduler``): their callers
get the error, everyone else is served on. Health turns "degraded" only while steps keep
failing (``DEGRADED_AFTER`` in a row), not for one bad request.
"""

import asyncio
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from concurrent.futures import Future

from torch import Tensor

from ascent.models.families import native_refusal
from ascent.rollout.engine import NativeEngine, WeightUpdate
from ascent.rollout.protocol import (
    Capability,
    Images,
    PauseMode,
    RolloutBackend,
    StreamedToken,
    TokenOut,
    WeightReceiver,
)
from ascent.rollout.requests import EngineRequest
from ascent.rollout.scoring import TokenScores
from ascent.rollout.types import Sample, SamplingParams

DEGRADED_AFTER = 3  # failed steps in a row before /health reports "degraded"


class NativeBackend(RolloutBackend):
    name = "native engine"
    capabilities = frozenset(
        {
            Capability.PAUSE,
            Capability.UPDATE_WEIGHTS_IN_PLACE,
            Capability.UPDATE_WEIGHTS_FROM_DISK,
            Capability.WEIGHT_VERSION,
            Capability.TOKEN_WEIGHT_VERSIONS,
            Capability.SLEEP,
            Capability.HEALTH,
            Capability.REFRESH_WEIGHTS,
            Capability.REQUEST_LEVEL,
            Capability.IMAGES,
            Capability.ROUTE_RECORDING,
            Capability.WEIGHT_ALIASING,
            Capability.OPENAI_ROUTES,
        }
    )

    @classmethod
    def refuses_model(cls, model_type: str) -> str | None:
        return native_refusal(model_type)

    def __init__(self, engine: NativeEngine, tokenizer: object | None = None) -> None:
        self.engine = engine
        self.tokenizer = tokenizer or engine.tokenizer
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._live: set[EngineRequest] = set()  # added, not finished
        self._held: list[EngineRequest] = []  # arrived while paused or draining
        self._paused = False
        self._draining: list[Future] = []  # pause(wait) calls waiting for the batch to empty
        self._closed = False
        self.last_error: BaseException | None = None
        self.failed_steps = 0  # in all
        self.failing_steps = 0  # in a row, up to the last step

    # -- the step thread ------------------------------------------------------------------

    def _start(self) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("the native backend is closed")
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="ascent-engine", daemon=True
                )
                self._thread.start()

    def _loop(self) -> None:
        while True:
            idle = self._paused or not self.engine.has_work()
            try:
                command = self._commands.get(block=idle)
            except queue.Empty:
                command = None
            while command is not None:
                if command is _STOP:
                    return
                command()
                try:
                    command = self._commands.get_nowait()
                except queue.Empty:
                    command = None
            if self._paused or not self.engine.has_work():
                continue
            try:
                self.engine.step()
                self.failing_steps = 0
            except Exception as error:  # its requests have failed (their callers hear why)
                self.last_error = error
                self.failed_steps += 1
                self.failing_steps += 1
            if self._draining and not self.engine.has_work():
                self._paused = True
                for future in self._draining:
                    future.set_result(None)
                self._draining.clear()

    def _call(self, function: Callable[[], object]) -> Future:
        """Run ``function`` on the step thread between two steps; a future of its result."""
        self._start()
        future: Future = Future()

        def command() -> None:
            try:
                future.set_result(function())
            except Exception as error:
                future.set_exception(error)

        self._commands.put(command)
        return future

    # -- data plane ---------------------------------------------------------------------------

    async def generate_n(
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        session_id: str | None = None,
        images: list[str] | None = None,
        top_logprobs: int = 0,
    ) -> list[TokenOut]:
        """The ``n`` responses; with ``top_logprobs`` k, each token's k likeliest
        alternatives too (``TokenOut.top_logprobs``)."""
        self.engine.check_request(prompt_ids, sampling, "the prompt")
        loop = asyncio.get_running_loop()
        done: asyncio.Future = loop.create_future()
        samples: list[Sample] = []
        generator = self.engine.seeded_generator(sampling)

        def on_sample(sample: Sample) -> None:  # on the step thread
            samples.append(sample)
            if len(samples) == sampling.n:
                self._live.discard(request)
                loop.call_soon_threadsafe(_settle, done, samples, request.error)

        request = EngineRequest(
            list(prompt_ids),
            sampling,
            on_sample,
            generator=generator,
            images=tuple(images or ()),
            top_logprobs=top_logprobs,
        )
        self.engine.prepare_prompt(request, "the prompt")
        self._call(lambda: self._add(request))
        try:
            finished = await done
        except asyncio.CancelledError:  # the caller gave up (timeout, disconnect): free slots
            self._call(lambda: self._abort(request))
            raise
        return [TokenOut.of(s) for s in sorted(finished, key=lambda s: s.sample_index)]

    async def score(self, ids: list[int], top_k: int) -> TokenScores:
        """``NativeEngine.score`` on the step thread, between two steps (weights cannot
        change under it)."""
        return await asyncio.wrap_future(self._call(lambda: self.engine.score(ids, top_k)))

    async def stream(
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        images: list[str] | None = None,
        top_logprobs: int = 0,
    ) -> AsyncIterator[StreamedToken | TokenOut]:
        """One response token by token (``StreamedToken``s), then the finished ``TokenOut``.
        Leaving early (a client gone, a timeout) aborts the request, which frees its slot."""
        if sampling.n != 1:
            raise ValueError("stream returns one response; use n=1")
        self.engine.check_request(prompt_ids, sampling, "the prompt")
        loop = asyncio.get_running_loop()
        items: asyncio.Queue = asyncio.Queue()

        def on_token(_: int, token: int, log_prob: float, version: int, top: list) -> None:
            item = StreamedToken(token, log_prob, version, top)
            loop.call_soon_threadsafe(items.put_nowait, item)

        def on_sample(sample: Sample) -> None:
            self._live.discard(request)
            item = _failure(request.error) if request.error else TokenOut.of(sample)
            loop.call_soon_threadsafe(items.put_nowait, item)

        generator = self.engine.seeded_generator(sampling)
        request = EngineRequest(
            list(prompt_ids),
            sampling,
            on_sample,
            on_token,
            generator,
            images=tuple(images or ()),
            top_logprobs=top_logprobs,
        )
        self.engine.prepare_prompt(request, "the prompt")
        self._call(lambda: self._add(request))
        finished = False
        try:
            while not finished:
                item = await items.get()
                if isinstance(item, Exception):
                    finished = True
                    raise item
                finished = isinstance(item, TokenOut)
                yield item
        finally:
            if not finished:
                self._call(lambda: self._abort(request))

    def _add(self, request: EngineRequest) -> None:
        self._live.add(request)
        if self._paused or self._draining:
            self._held.append(request)
        else:
            self.engine.add_request(request)

    def _abort(self, request: EngineRequest) -> None:
        if request in self._held:
            self._held.remove(request)
            self.engine.discard(request)
        else:
            self.engine.abort(request)

    def generate_batch(
        self, prompts: list[list[int]], sampling: SamplingParams, images: Images = None
    ) -> list[Sample]:
        if self._thread is None:
            return self.engine.generate(prompts, sampling, images)
        return self._call(lambda: self._batch(prompts, sampling, images)).result()

    async def generate_together(
        self, prompts: list[list[int]], sampling: SamplingParams, images: Images = None
    ) -> list[Sample]:
        """``generate_batch`` on the step thread: queued whole, before its first step."""
        future = self._call(lambda: self._batch(prompts, sampling, images))
        return await asyncio.wrap_future(future)

    def _batch(
        self, prompts: list[list[int]], sampling: SamplingParams, images: Images
    ) -> list[Sample]:
        if self._paused:
            raise RuntimeError("the native engine is paused; resume it before generate_batch")
        return self.engine.generate(prompts, sampling, images)  # others' requests step along

    # -- control plane --------------------------------------------------------------------------

    async def pause(self, mode: PauseMode = "abort") -> None:
        if mode not in ("abort", "wait", "keep"):
            raise ValueError(f"pause mode must be abort, wait or keep, not {mode!r}")
        if mode == "wait":
            drained: Future = Future()

            def start_draining() -> None:
                if self.engine.has_work():
                    self._draining.append(drained)
                else:
                    self._paused = True
                    drained.set_result(None)

            self._call(start_draining)
            await asyncio.wrap_future(drained)
            return

        def pause_now() -> None:
            self._paused = True
            if mode == "abort":
                for request in list(self._live):
                    self._abort(request)

        await asyncio.wrap_future(self._call(pause_now))

    async def resume(self) -> None:
        def resume_now() -> None:
            self._paused = False
            for request in self._held:
                self.engine.add_request(request)
            self._held.clear()

        await asyncio.wrap_future(self._call(resume_now))

    async def update_weights(
        self, named_tensors: Iterable[tuple[str, Tensor]], version: int
    ) -> int:
        """Copy new weights in (between two decode steps: in-flight responses go on with
        them), numbered ``version``; returns it."""
        return await self.refresh_weights(named_tensors, version)

    async def refresh_weights(
        self,
        named_tensors: Iterable[tuple[str, Tensor]],
        version: int,
        *,
        alias: bool = False,
    ) -> int:
        """Straight into the engine while its step thread was never started (one tensor at a
        time: a gathered copy of all the weights never exists); else between two decode
        steps on that thread."""
        if self._thread is None:
            return self.engine.load_weights(named_tensors, alias=alias, version=version)
        tensors = list(named_tensors)  # read here: a gather must not run on the step thread
        load = lambda: self.engine.load_weights(tensors, alias=alias, version=version)  # noqa: E731
        return await asyncio.wrap_future(self._call(load))

    def weight_update(self, version: int) -> WeightReceiver:
        """Buckets load straight into the engine while nothing else drives it (no step
        thread), else gathered first."""
        if self._thread is None:
            return _StreamedWeights(self.engine.begin_weight_update(), version)
        return super().weight_update(version)

    @property
    def version(self) -> int:
        return self.engine.weight_version

    async def update_weights_from_disk(self, path: str, version: int) -> int:
        from ascent.rollout.weight_files import read_weights

        return await self.update_weights(read_weights(path), version)

    async def set_weight_version(self, version: int) -> None:
        await asyncio.wrap_future(self._call(lambda: self.engine.set_weight_version(version)))

    async def weight_version(self) -> int:
        return self.engine.weight_version

    async def sleep(self) -> None:
        await asyncio.wrap_future(self._call(self._sleep))

    def _sleep(self) -> None:
        if self.engine.has_work():
            raise RuntimeError("sleep with requests in flight: pause(mode='abort' or 'wait') first")
        self.engine.sleep()

    async def wake(self) -> None:
        await asyncio.wrap_future(self._call(self.engine.wake))

    async def health(self) -> dict:
        """Read between two steps (on the step thread), so a failure its callers have heard
        of is counted here too."""
        return await asyncio.wrap_future(self._call(self._health))

    def _health(self) -> dict:
        return {
            "status": "degraded" if self.failing_steps >= DEGRADED_AFTER else "ok",
            "last_error": None if self.last_error is None else repr(self.last_error),
            "failed_steps": self.failed_steps,
            "running": self.engine.running,
            "paused": self._paused,
            "weight_version": self.engine.weight_version,
        }

    async def close(self) -> None:
        with self._lock:
            self._closed = True
            thread, self._thread = self._thread, None
        if thread is not None:
            self._commands.put(_STOP)
            await asyncio.to_thread(thread.join)


class _StreamedWeights(WeightReceiver):
    def __init__(self, update: WeightUpdate, version: int) -> None:
        self.update, self.version = update, version

    def load(self, named_tensors: Iterable[tuple[str, Tensor]]) -> None:
        self.update.load(named_tensors)

    def finish(self) -> int:
        return self.update.finish(self.version)


def _STOP() -> None:  # a sentinel command: the step thread returns when it reads it
    pass


def _settle(future: asyncio.Future, samples: list[Sample], error: BaseException | None) -> None:
    if future.done():  # the caller was cancelled meanwhile
        return
    if error is not None:
        future.set_exception(_failure(error))
    else:
        future.set_result(samples)


def _failure(error: BaseException) -> RuntimeError:
    return RuntimeError(f"the native engine failed on this request: {error!r}")
