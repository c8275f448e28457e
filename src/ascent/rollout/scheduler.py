"""The native engine's running batch over a paged KV cache: requests from any number of
callers share it.

``step`` = admit, then one decode step.

- **Admission** (``Admission``) takes waiting prefill jobs while the batch has seats and the
  cache has blocks: a new request's prompt is prefilled once, however many samples it has
  (they share its full blocks and each copies the partial last one), and only the part of it
  not already in the prefix cache is computed, so an agent's next turn prefills just its new
  tokens. Every admitted sample draws its first token from its prompt's logits.
- **Decode** advances every running sequence by one token. A sequence that reaches a block
  boundary gets a new block first; when none is left, the most recently admitted sequence is
  preempted: its blocks go back (its full ones stay in the prefix cache), and it waits at the
  head of the queue to be prefilled again, tokens so far kept.
- A sequence that finishes frees its seat and blocks at once, and the next step admits
  whatever arrived in the meantime, from whichever caller sent it.

A failure fails the requests it concerns and no others: a prefill that raises fails the
prompts in it (a batch of several is retried one prompt at a time first, so one bad prompt
fails alone); a decode step that raises fails the running batch, whose cache it may have left
half written. Their samples finish with finish_reason "error" and ``request.error`` set, the
exception propagates to whoever called ``step``, and the scheduler serves the rest.
"""

from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import Tensor

from ascent.rollout.admission import Admission
from ascent.rollout.kv_blocks import block_hash
from ascent.rollout.kv_cache import PagedKVCache
from ascent.rollout.requests import EngineRequest
from ascent.rollout.sampling import Scratch, distribution, sample, top_alternatives
from ascent.rollout.sequence import PrefillJob, Running
from ascent.rollout.types import Sample

# (tokens (B,), positions (B,), tables (B, nb), slots (B,)) -> logits (B, V)
Decode = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]


class Scheduler:
    """The running batch over ``cache``'s blocks. It is given what it uses: ``prefill``
    (a ``PrefillChunk`` -> last logits), ``decode`` (one step of the running rows), the
    limits, the default random stream, a tokenizer for stop strings, and ``weight_version``,
    which the engine sets on each refresh and every token records."""

    def __init__(
        self,
        cache: PagedKVCache,
        prefill: Callable,
        decode: Decode,
        *,
        max_num_seqs: int,
        max_model_len: int,
        generator: torch.Generator,
        tokenizer: object | None,
    ) -> None:
        self.cache, self.decode_model = cache, decode
        self.max_num_seqs, self.max_model_len = max_num_seqs, max_model_len
        self.generator, self.tokenizer = generator, tokenizer
        self.device = cache.device
        self._version = 0
        self.rows: list[Running] = []
        self.waiting: deque[PrefillJob] = deque()
        self.admission = Admission(cache, prefill, max_model_len)
        self.preemptions = 0  # sequences sent back to the queue for want of blocks
        self.sampling_scratch = Scratch()  # the sampler's (B, V) weights, step after step
        # When the most blocks were held: how many, the running sequences' cached tokens
        # (+1: the one this step writes), and how many sequences ran.
        self.peak_usage = {"held_blocks": 0, "live_tokens": 0, "running": 0}

    @property
    def weight_version(self) -> int:
        return self._version

    @weight_version.setter
    def weight_version(self, version: int) -> None:
        if version != self._version:  # keys and values cached from other weights are stale
            self.cache.blocks.forget_prefixes()
        self._version = version

    # -- requests -----------------------------------------------------------------------

    def add(self, request: EngineRequest) -> None:
        self.waiting.append(PrefillJob(request, list(range(request.params.n))))

    def has_work(self) -> bool:
        return bool(self.waiting or self.rows)

    @property
    def running(self) -> int:
        return len(self.rows)

    def generated_lengths(self) -> list[int]:
        """Tokens generated so far by each running sequence."""
        return [len(row.log_probs) for row in self.rows]

    def abort(self, request: EngineRequest, reason: str = "abort") -> None:
        """Finish every sample of ``request`` now (finish_reason ``reason``, the tokens so
        far); samples not started yet finish empty."""
        request.aborted = True
        for index in reversed(range(len(self.rows))):
            if self.rows[index].request is request:
                self._retire(index, reason)
        for job in [j for j in self.waiting if j.request is request]:
            self.waiting.remove(job)
            if job.resume is not None:
                request.on_sample(self._sample_of(job.resume, reason))
            for sample_index in job.samples:
                request.on_sample(self._unstarted(request, sample_index, reason))

    def fail(self, requests: list[EngineRequest], error: Exception) -> None:
        """Finish ``requests`` with ``error`` (finish_reason "error"), wherever they are."""
        for request in dict.fromkeys(requests):  # once each, in order
            request.error = error
            self.abort(request, "error")

    # -- one step -----------------------------------------------------------------------

    def step(self) -> None:
        """Admit, then decode one token for every running sequence. Whatever raises fails
        the requests it concerned (see the module's docstring) and propagates."""
        self._admit()
        if self.rows:
            with self._running_batch_fails():
                self._reserve_blocks()
                self._decode()

    @contextmanager
    def _running_batch_fails(self) -> Iterator[None]:
        """Whatever raises inside fails every running request (its cache rows may be half
        written), and propagates."""
        try:
            yield
        except Exception as error:
            self.fail([row.request for row in self.rows], error)
            raise

    def _admit(self) -> None:
        """Prefill waiting jobs into free seats and draw their first tokens; a failed
        prefill is raised once the others are admitted."""
        first = len(self.rows)
        admitted, failure = self.admission.admit(
            self.waiting, self.max_num_seqs - len(self.rows), len(self.rows), self.fail
        )
        logits = []
        for row, row_logits in admitted:
            self.rows.append(row)
            logits.append(row_logits)
        if logits:
            rows = list(range(first, len(self.rows)))
            with self._running_batch_fails():
                self._record(rows, torch.stack(logits))
        if failure is not None:
            raise failure

    def _reserve_blocks(self) -> None:
        """Give each row whose next write starts a block a new one, preempting the most
        recently admitted rows while none is left."""
        size = self.cache.block_size
        index = 0
        while index < len(self.rows):
            row = self.rows[index]
            if row.cached // size == len(row.blocks):
                got = self.cache.allocate(1)
                if got is None:
                    self._preempt(len(self.rows) - 1)
                    continue  # the same row again (or, if it was the one preempted, done)
                row.blocks.extend(got)
            index += 1

    def _preempt(self, index: int) -> None:
        row = self.rows.pop(index)
        self._let_go(row)
        row.blocks, row.cached, row.names = [], 0, []
        self.waiting.appendleft(PrefillJob(row.request, [], resume=row))
        self.preemptions += 1

    def _decode(self) -> None:
        cache, size = self.cache, self.cache.block_size
        if cache.held_blocks > self.peak_usage["held_blocks"]:
            self.peak_usage = {
                "held_blocks": cache.held_blocks,
                "live_tokens": sum(row.cached + 1 for row in self.rows),
                "running": len(self.rows),
            }
        positions = [row.cached for row in self.rows]
        slots = [cache.slot(row.blocks, p) for row, p in zip(self.rows, positions, strict=True)]
        device = self.device
        shifts = [row.request.rope_shift for row in self.rows]
        logits = self.decode_model(
            torch.tensor([row.tokens[-1] for row in self.rows], device=device),
            torch.tensor(positions, device=device),
            cache.table_tensor([row.blocks for row in self.rows]),
            torch.tensor(slots, device=device),
            torch.tensor(shifts, device=device) if any(shifts) else None,
        )
        for row in self.rows:
            row.cached += 1
            if row.cached % size == 0:  # a block just filled: name it for the prefix cache
                parent = row.names[-1] if row.names else row.root
                name = block_hash(
                    parent, row.request.prefix_tokens(row.tokens, row.cached - size, row.cached)
                )
                row.names.append(name)
                cache.blocks.register(row.blocks[row.cached // size - 1], name)
        self._record(list(range(len(self.rows))), logits)

    # -- sampling and finishing -----------------------------------------------------------

    def _sample(self, rows: list[int], logits: Tensor) -> tuple[Tensor, Tensor]:
        """Sample every row in batched draws: each random stream (a seeded request's own,
        or the engine's) gives its rows one uniform each, in row order; then one draw per
        group of rows sharing temperature, top-k and top-p (a single group in the common
        case, however many seeded requests run)."""
        requests = [self.rows[r].request for r in rows]
        uniform = torch.empty(len(rows), dtype=torch.float64, device=self.device)
        streams: dict[int, tuple[torch.Generator, list[int]]] = {}
        for position, request in enumerate(requests):
            if request.params.temperature > 0:
                generator = request.generator or self.generator
                streams.setdefault(id(generator), (generator, []))[1].append(position)
        if streams:  # one scatter for all streams (an agent's turns are a stream each)
            order = [p for _, positions in streams.values() for p in positions]
            draws = [
                torch.rand(len(positions), generator=g, dtype=torch.float64, device=self.device)
                for g, positions in streams.values()
            ]
            uniform[torch.tensor(order, device=self.device)] = torch.cat(draws)
        settings = [(r.params.temperature, r.params.top_k, r.params.top_p) for r in requests]
        if len(set(settings)) == 1:
            return sample(logits, requests[0].params, uniform, self.sampling_scratch)
        tokens = torch.empty(len(rows), dtype=torch.long, device=logits.device)
        log_probs = torch.empty(len(rows), dtype=torch.float32, device=logits.device)
        for setting in dict.fromkeys(settings):
            index = [i for i, other in enumerate(settings) if other == setting]
            first = requests[index[0]]
            tokens[index], log_probs[index] = sample(
                logits[index], first.params, uniform[index], self.sampling_scratch
            )
        return tokens, log_probs

    def _record(self, rows: list[int], logits: Tensor) -> None:
        """Sample a token for ``rows`` from ``logits``, store it, retire finished rows."""
        tokens, log_probs = self._sample(rows, logits)
        token_list, log_prob_list = tokens.tolist(), log_probs.tolist()
        version = self.weight_version
        finished: dict[int, str] = {}
        for position, (index, token, log_prob) in enumerate(
            zip(rows, token_list, log_prob_list, strict=True)
        ):
            row = self.rows[index]
            params, others = row.request.params, []
            if row.request.top_logprobs:  # only the rows that ask pay for a top-k
                scores = distribution(logits[position : position + 1], params)
                others = top_alternatives(scores, row.request.top_logprobs)[0]
                row.alternatives.append(others)
                log_prob = float(scores[0, token])  # the same number its alternatives show
            row.tokens.append(token)
            row.log_probs.append(log_prob)
            row.versions.append(version)
            if row.request.on_token is not None:
                row.request.on_token(row.sample_index, token, log_prob, version, others)
            if token in params.stop_token_ids:
                finished[index] = "stop"
            elif len(row.log_probs) >= row.limit:
                finished[index] = "length"
            elif params.stop and self._hits_stop_string(row):
                finished[index] = "stop"
        for index in sorted(finished, reverse=True):
            self._retire(index, finished[index])

    def _hits_stop_string(self, row: Running) -> bool:
        stops = row.request.params.stop
        tail = max(len(s) for s in stops) + 8  # tokens are at least one character
        ids = row.generated[-tail:]
        # Special tokens are not text (as in vLLM): "<|endoftext|>" does not contain "e".
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return any(stop in text for stop in stops)

    def _unstarted(self, request: EngineRequest, sample_index: int, reason: str) -> Sample:
        row = Running(request, sample_index, len(request.prompt), 0, list(request.prompt))
        return self._sample_of(row, reason)

    def _sample_of(self, row: Running, reason: str) -> Sample:
        records = self.cache.records_of(row.blocks, row.cached) if row.blocks else None
        return Sample(
            prompt_index=row.request.index,
            sample_index=row.sample_index,
            token_ids=row.generated,
            log_probs=row.log_probs if row.request.params.logprobs else None,
            finish_reason=reason,
            weight_version=row.versions[-1] if row.versions else self.weight_version,
            weight_versions=row.versions,
            routed_experts=records,
            top_logprobs=row.alternatives if row.request.top_logprobs else None,
        )

    def _retire(self, index: int, reason: str) -> None:
        row = self.rows.pop(index)
        sample = self._sample_of(row, reason)  # before its blocks (and records) go back
        self._let_go(row)
        row.blocks = []
        row.request.on_sample(sample)

    def _let_go(self, row: Running) -> None:
        """Release a leaving row's blocks, its partial last one named first, so that a
        continuation of its context (the next turn, or its own resumption) can copy it."""
        size = self.cache.block_size
        full, filled = divmod(row.cached, size)
        if filled:
            parent = row.names[-1] if row.names else row.root
            name = block_hash(
                parent, row.request.prefix_tokens(row.tokens, full * size, row.cached)
            )
            self.cache.blocks.register(row.blocks[full], name)
        self.cache.blocks.release(row.blocks)
