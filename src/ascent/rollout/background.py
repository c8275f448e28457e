"""Generation beside training (``trainer.mode`` one_step_off and async) as a backend that wraps
another: a step's prompts are submitted now and their samples taken later, while the engine
keeps decoding and the trainer keeps training; new weights arrive between two decode steps
without stopping it.

One event loop on a thread of its own drives the wrapped backend's ``generate_n`` (one task
per prompt, so a prompt's samples come back together and one prompt can be restarted alone).
Weight refreshes and every other ``call`` run on the same loop. Two policies for the
responses in flight when weights change:

- ``partial_rollouts=True``: they go on under the new weights; each token records the version
  that sampled it (``Sample.weight_versions``), so a response may span versions.
- ``partial_rollouts=False``: they are cancelled (the engine frees their slots) and their
  prompts regenerated from the start under the new weights: no response mixes versions, at
  the price of the tokens thrown away (counted in ``restarted``).
"""

import asyncio
import threading
import time
from collections.abc import Coroutine, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from ascent.rollout.protocol import Images, RolloutBackend, TokenOut, samples_of, seed_of_prompt
from ascent.rollout.types import Sample, SamplingParams


@dataclass
class _Prompt:
    ids: list[int]
    params: SamplingParams
    future: Future
    images: list[str] | None = None


@dataclass
class Job:
    """One submitted batch: its prompts' tasks (or one task for a whole agent batch)."""

    prompts: list[_Prompt] = field(default_factory=list)
    whole: Future | None = None  # one coroutine for the batch: an agent's, or together


class BackgroundBackend(RolloutBackend):
    """``inner`` driven from a loop of its own; ``submit`` / ``take`` add the beside-training
    calls, and ``refresh_weights`` applies ``partial_rollouts`` to what is in flight. The
    data plane and ``generate_batch`` are the wrapped backend's."""

    def __init__(self, inner: RolloutBackend, partial_rollouts: bool = True) -> None:
        self.inner, self.partial_rollouts = inner, partial_rollouts
        self.name = f"{inner.name} (beside training)"
        self.capabilities = inner.capabilities
        self.tokenizer, self.engine = inner.tokenizer, inner.engine
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="ascent-rollouts", daemon=True
        )
        self.thread.start()
        self.jobs: dict[str, Job] = {}
        self.restarted = 0  # responses regenerated after a weight update (partial_rollouts off)
        self._lock = threading.Lock()
        self._running = 0  # generation tasks not finished
        self._busy_since = 0.0
        self._busy_s = 0.0

    @property
    def version(self) -> int:
        return self.inner.version

    async def generate_n(
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        session_id: str | None = None,
        images: list[str] | None = None,
    ) -> list[TokenOut]:
        return await self.inner.generate_n(prompt_ids, sampling, session_id, images)

    def generate_batch(
        self, prompts: list[list[int]], sampling: SamplingParams, images: Images = None
    ) -> list[Sample]:
        return self.inner.generate_batch(prompts, sampling, images)

    async def generate_together(
        self, prompts: list[list[int]], sampling: SamplingParams, images: Images = None
    ) -> list[Sample]:
        return await self.inner.generate_together(prompts, sampling, images)

    def busy_seconds(self) -> float:
        """Seconds so far during which some generation was in flight (the engine's side of
        the overlap: the rest of the time it waited for prompts)."""
        with self._lock:
            ongoing = time.perf_counter() - self._busy_since if self._running else 0.0
            return self._busy_s + ongoing

    def _start(self, coroutine: Coroutine, generation: bool = True) -> Future:
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        if generation:
            with self._lock:
                if self._running == 0:
                    self._busy_since = time.perf_counter()
                self._running += 1
            future.add_done_callback(self._finished)
        return future

    def _finished(self, _: Future) -> None:
        with self._lock:
            self._running -= 1
            if self._running == 0:
                self._busy_s += time.perf_counter() - self._busy_since

    def submit(
        self,
        tag: str,
        prompts: list[list[int]],
        sampling: SamplingParams,
        together: bool = False,
        images: Images = None,
    ) -> None:
        """Start ``sampling.n`` samples of every prompt (with its ``images``), seeded as
        ``generate_batch`` seeds them (``seed_of_prompt``). ``together``: the prompts as one
        batch (``generate_together``: the same samples whatever the timing)."""
        if tag in self.jobs:
            raise ValueError(f"rollouts {tag!r} were submitted already and not taken")
        if together:
            whole = self.inner.generate_together(prompts, sampling, images)
            self.jobs[tag] = Job(whole=self._start(whole))
            return
        job = Job()
        for index, ids in enumerate(prompts):
            params = seed_of_prompt(sampling, index)
            urls = images[index] if images else None
            future = self._start(self._generate(ids, params, urls))
            job.prompts.append(_Prompt(ids, params, future, urls))
        self.jobs[tag] = job

    def submit_coroutine(self, tag: str, coroutine: Coroutine) -> None:
        """Run a coroutine producing a whole batch (an agent's episodes) in the background."""
        if tag in self.jobs:
            raise ValueError(f"rollouts {tag!r} were submitted already and not taken")
        self.jobs[tag] = Job(whole=self._start(coroutine))

    async def _generate(
        self, ids: list[int], params: SamplingParams, images: list[str] | None = None
    ) -> list[TokenOut]:
        return await self.inner.generate_n(ids, params, images=images or None)

    def take(self, tag: str) -> Any:
        """Wait for ``tag``'s samples: ``Sample``s ordered by prompt then sample (or the
        coroutine's result for an agent batch)."""
        job = self.jobs.pop(tag)
        if job.whole is not None:
            return job.whole.result()
        return samples_of([prompt.future.result() for prompt in job.prompts])

    async def refresh_weights(
        self,
        named_tensors: Iterable[tuple[str, Tensor]],
        version: int,
        *,
        alias: bool = False,
    ) -> int:
        """The wrapped backend's refresh, on the loop between two decode steps, never aliased
        (the optimiser would change the weights under a decode step). Without partial
        rollouts, responses in flight are cancelled first and their prompts resubmitted
        after, under the new weights."""
        unfinished = [] if self.partial_rollouts else self._unfinished()
        for prompt in unfinished:
            prompt.future.cancel()
        version = await self.inner.refresh_weights(named_tensors, version)
        for prompt in unfinished:
            self.restarted += prompt.params.n
            prompt.future = self._start(self._generate(prompt.ids, prompt.params, prompt.images))
        return version

    def _unfinished(self) -> list[_Prompt]:
        if any(job.whole is not None for job in self.jobs.values()):
            raise ValueError(
                "partial_rollouts=false cannot restart agent episodes; use partial_rollouts=true"
            )
        return [p for job in self.jobs.values() for p in job.prompts if not p.future.done()]

    def call(self, coroutine: Coroutine) -> Any:
        """Run a coroutine on the loop (a control call to the backend) and wait for it; from
        any thread but the loop's."""
        return self._start(coroutine, generation=False).result()

    async def release_connections(self) -> None:
        await self.inner.release_connections()

    def stop(self) -> None:
        """Cancel what is in flight and stop the loop; the wrapped backend stays open."""
        for job in self.jobs.values():
            for future in [job.whole] if job.whole is not None else [p.future for p in job.prompts]:
                future.cancel()
        self.jobs.clear()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)

    async def close(self) -> None:
        """``stop``, then close the wrapped backend."""
        self.stop()
        await self.inner.close()
