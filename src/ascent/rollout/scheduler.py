"""The native engine's running batch: requests from any number of callers share it.

``step`` = admit, then one decode step. Admission moves waiting samples into free cache slots:
each prompt is prefilled once, however many samples it has, and its keys and values copied
into each sample's slot; every admitted sample draws its first token from the prompt's logits.
A decode step advances every running sequence by one token. A sequence that finishes frees its
slot at once (the last running sequence moves into it, so running sequences always occupy
slots [0, B)), and the next step admits whatever arrived in the meantime: requests join a
batch already in flight, from whichever caller sent them.

Per-slot buffers are ``max_model_len`` wide (a response never outgrows its slot): token ids
(int64), log-probs (float32) and the weight version of each token (int32).

A failure fails the requests it concerns and no others: a prefill that raises fails the
prompts in it (a batch of several is retried one prompt at a time first, so one bad prompt
fails alone); a decode step that raises fails the running batch, whose cache it may have left
half written. Their samples finish with finish_reason "error" and ``request.error`` set, the
exception propagates to whoever called ``step``, and the scheduler serves the rest.
"""

import math
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor

from ascent.rollout.kv_cache import SlotCache
from ascent.rollout.requests import EngineRequest
from ascent.rollout.sampling import sample
from ascent.rollout.types import Sample

Prefill = Callable[[Tensor, Tensor], tuple[Tensor, Tensor, Tensor]]  # (ids, lengths) -> l, k, v
Decode = Callable[[Tensor, Tensor], Tensor]  # (tokens (B,), positions (B,)) -> logits (B, V)


@dataclass
class _Prefix:
    """A prefilled prompt waiting for its samples to get slots."""

    keys: Tensor  # (layers, kv_heads, length, head_dim)
    values: Tensor
    logits: Tensor  # (V,) of the prompt's last token
    remaining: int


class Scheduler:
    """The running batch over ``cache``'s slots. It is given what it uses: ``prefill``
    (prompts -> last logits, keys, values), ``decode`` (one step of the running slots), the
    limits, the default random stream, a tokenizer for stop strings, and ``weight_version``,
    which the engine sets on each refresh and every token records."""

    def __init__(
        self,
        cache: SlotCache,
        prefill: Prefill,
        decode: Decode,
        *,
        max_model_len: int,
        max_prefill_tokens: int,
        generator: torch.Generator,
        tokenizer: object | None,
    ) -> None:
        self.cache, self.prefill_model, self.decode_model = cache, prefill, decode
        self.max_model_len, self.max_prefill_tokens = max_model_len, max_prefill_tokens
        self.generator, self.tokenizer = generator, tokenizer
        self.weight_version = 0
        slots, width, device = cache.slots, max_model_len, cache.device
        self.device = device
        self.tokens = torch.zeros(slots, width, dtype=torch.long, device=device)
        self.log_probs = torch.zeros(slots, width, dtype=torch.float32, device=device)
        self.versions = torch.zeros(slots, width, dtype=torch.int32, device=device)
        self.last = torch.zeros(slots, dtype=torch.long, device=device)
        self.position = torch.zeros(slots, dtype=torch.long, device=device)  # next cache write
        self.length = torch.zeros(slots, dtype=torch.long, device=device)  # tokens generated
        self.limit = torch.zeros(slots, dtype=torch.long, device=device)  # length at which it ends
        self.prompt_length = torch.zeros(slots, dtype=torch.long, device=device)
        self.stop_table = torch.full((slots, 1), -1, dtype=torch.long, device=device)
        self.rows: list[tuple[EngineRequest, int]] = []  # per running slot: request, sample index
        self.pending: deque[EngineRequest] = deque()  # not prefilled yet
        self.waiting: deque[tuple[EngineRequest, int]] = deque()  # prefilled, no slot yet
        self.prefixes: dict[int, _Prefix] = {}  # id(request) -> its prefill

    # -- requests -----------------------------------------------------------------------

    def add(self, request: EngineRequest) -> None:
        self.pending.append(request)

    def has_work(self) -> bool:
        return bool(self.pending or self.waiting or self.rows)

    @property
    def running(self) -> int:
        return len(self.rows)

    def abort(self, request: EngineRequest, reason: str = "abort") -> None:
        """Finish every sample of ``request`` now (finish_reason ``reason``, the tokens so
        far); samples not started yet finish empty."""
        request.aborted = True
        if request in self.pending:
            self.pending.remove(request)
            self._finish_unstarted(request, range(request.params.n), reason)
            return
        for slot in reversed(range(len(self.rows))):
            if self.rows[slot][0] is request:
                self._retire(slot, reason)
        for entry in [w for w in self.waiting if w[0] is request]:
            self.waiting.remove(entry)
            self._finish_unstarted(request, [entry[1]], reason)
        self.prefixes.pop(id(request), None)

    def fail(self, requests: list[EngineRequest], error: Exception) -> None:
        """Finish ``requests`` with ``error`` (finish_reason "error"), wherever they are."""
        for request in dict.fromkeys(requests):  # once each, in order
            request.error = error
            self.abort(request, "error")

    def _finish_unstarted(self, request: EngineRequest, samples: object, reason: str) -> None:
        for sample_index in samples:
            request.on_sample(self._sample_of(request, sample_index, [], [], [], reason))

    # -- one step -----------------------------------------------------------------------

    def step(self) -> None:
        """Admit, then decode one token for every running sequence. Whatever raises fails
        the requests it concerned (see the module's docstring) and propagates."""
        self._admit()
        if self.rows:
            running = len(self.rows)
            with self._running_batch_fails():
                logits = self.decode_model(self.last[:running], self.position[:running])
                self._record(torch.arange(running, device=self.device), logits)

    @contextmanager
    def _running_batch_fails(self) -> Iterator[None]:
        """Whatever raises inside fails every running request (its cache rows may be half
        written), and propagates."""
        try:
            yield
        except Exception as error:
            self.fail([request for request, _ in self.rows], error)
            raise

    def _admit(self) -> None:
        """Move waiting samples into free slots (prefilling prompts as needed) and draw their
        first tokens; a failed prefill is raised once the others are admitted."""
        slots, first = self.cache.slots, len(self.rows)
        logits, failure = [], None
        while len(self.rows) < slots and (self.waiting or self.pending):
            if not self.waiting:
                error = self._prefill(
                    math.ceil((slots - len(self.rows)) / self.pending[0].params.n)
                )
                failure = failure or error
                continue  # every prompt it took may have failed
            request, sample_index = self.waiting.popleft()
            prefix = self.prefixes[id(request)]
            slot = len(self.rows)
            self.cache.write_prefix(slot, prefix.keys, prefix.values)
            self._start_slot(slot, request)
            self.rows.append((request, sample_index))
            logits.append(prefix.logits)
            prefix.remaining -= 1
            if prefix.remaining == 0:
                del self.prefixes[id(request)]
        if logits:  # every admitted sample draws its first token from its prompt's logits
            rows = torch.arange(first, len(self.rows), device=self.device)
            with self._running_batch_fails():
                self._record(rows, torch.stack(logits))
        if failure is not None:
            raise failure

    def _start_slot(self, slot: int, request: EngineRequest) -> None:
        prompt_length = len(request.prompt)
        self.prompt_length[slot] = prompt_length
        self.length[slot] = 0  # the slot may still hold a retired sequence's count
        room = self.max_model_len - prompt_length
        self.limit[slot] = min(request.params.max_new_tokens, room)
        stop_ids = request.params.stop_token_ids
        if len(stop_ids) > self.stop_table.shape[1]:
            wider = torch.full_like(self.stop_table[:, :1], -1).repeat(1, len(stop_ids))
            wider[:, : self.stop_table.shape[1]] = self.stop_table
            self.stop_table = wider
        self.stop_table[slot] = -1
        if stop_ids:
            self.stop_table[slot, : len(stop_ids)] = torch.tensor(stop_ids)

    def _prefill(self, count: int) -> Exception | None:
        """Prefill up to ``count`` pending prompts (within the prefill token budget). If that
        raises, each prompt is tried alone, and those that fail alone fail; returns the
        first such error. A prompt leaves ``pending`` once prefilled or failed."""
        chosen, tokens = [], 0
        for request in self.pending:
            if len(chosen) == max(count, 1):
                break
            if chosen and tokens + len(request.prompt) > self.max_prefill_tokens:
                break
            chosen.append(request)
            tokens += len(request.prompt)
        try:
            self._prefill_together(chosen)
        except Exception:
            return self._prefill_alone(chosen)
        for _ in chosen:
            self.pending.popleft()
        return None

    def _prefill_alone(self, chosen: list[EngineRequest]) -> Exception | None:
        first_error = None
        for request in chosen:
            try:
                self._prefill_together([request])
            except Exception as error:
                self.fail([request], error)
                first_error = first_error or error
            else:
                self.pending.remove(request)
        return first_error

    def _prefill_together(self, chosen: list[EngineRequest]) -> None:
        device = self.device
        lengths = torch.tensor([len(r.prompt) for r in chosen], device=device)
        ids = torch.zeros(len(chosen), int(lengths.max()), dtype=torch.long, device=device)
        for row, request in enumerate(chosen):
            ids[row, : lengths[row]] = torch.tensor(request.prompt, device=device)
        logits, keys, values = self.prefill_model(ids, lengths)
        for row, request in enumerate(chosen):
            length = int(lengths[row])
            self.prefixes[id(request)] = _Prefix(
                keys[:, row, :, :length], values[:, row, :, :length], logits[row], request.params.n
            )
            self.waiting.extend((request, s) for s in range(request.params.n))

    # -- sampling and finishing -----------------------------------------------------------

    def _sample(self, rows: Tensor, row_list: list[int], logits: Tensor) -> tuple[Tensor, Tensor]:
        """One batched draw per group of rows sharing sampling settings and random stream
        (a single group in the common case: one caller, or callers with default settings)."""
        default = self.generator
        requests = [self.rows[r][0] for r in row_list]
        keys = [r.sampling_key(default) for r in requests]
        if len(set(keys)) == 1:
            return sample(logits, requests[0].params, requests[0].generator or default)
        tokens = torch.empty(len(keys), dtype=torch.long, device=logits.device)
        log_probs = torch.empty(len(keys), dtype=torch.float32, device=logits.device)
        for key in dict.fromkeys(keys):
            index = torch.tensor([i for i, k in enumerate(keys) if k == key], device=rows.device)
            first = requests[int(index[0])]
            tokens[index], log_probs[index] = sample(
                logits[index], first.params, first.generator or default
            )
        return tokens, log_probs

    def _record(self, rows: Tensor, logits: Tensor) -> None:
        """Sample a token for ``rows`` from ``logits``, store it, retire finished rows."""
        row_list = rows.tolist()
        tokens, log_probs = self._sample(rows, row_list, logits)
        length = self.length[rows]
        self.tokens[rows, length] = tokens
        self.log_probs[rows, length] = log_probs
        self.versions[rows, length] = self.weight_version
        prompt_lengths = self.prompt_length[rows]
        self.position[rows] = torch.where(length == 0, prompt_lengths, self.position[rows] + 1)
        self.length[rows] = length + 1
        self.last[rows] = tokens
        stopped = (tokens[:, None] == self.stop_table[rows]).any(-1)
        finished = stopped | (length + 1 >= self.limit[rows])
        reasons = {int(r): "stop" for r in rows[stopped].tolist()}
        streaming = [i for i, r in enumerate(row_list) if self.rows[r][0].on_token is not None]
        if streaming:
            token_list, log_prob_list = tokens.tolist(), log_probs.tolist()
            for i in streaming:
                request, sample_index = self.rows[row_list[i]]
                request.on_token(sample_index, token_list[i], log_prob_list[i], self.weight_version)
        string_rows = [r for r in row_list if self.rows[r][0].params.stop]
        if string_rows:
            open_rows = set(rows[~finished].tolist())
            for r in string_rows:
                if r in open_rows and self._hits_stop_string(r):
                    reasons[r] = "stop"
            finished = finished | torch.tensor([r in reasons for r in row_list], device=rows.device)
        for slot in sorted(rows[finished].tolist(), reverse=True):
            self._retire(slot, reasons.get(slot, "length"))

    def _hits_stop_string(self, slot: int) -> bool:
        stops = self.rows[slot][0].params.stop
        count = int(self.length[slot])
        tail = max(len(s) for s in stops) + 8  # tokens are at least one character
        ids = self.tokens[slot, max(0, count - tail) : count].tolist()
        # Special tokens are not text (as in vLLM): "<|endoftext|>" does not contain "e".
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return any(stop in text for stop in stops)

    def _sample_of(
        self,
        request: EngineRequest,
        sample_index: int,
        token_ids: list[int],
        log_probs: list[float],
        versions: list[int],
        reason: str,
    ) -> Sample:
        return Sample(
            prompt_index=request.index,
            sample_index=sample_index,
            token_ids=token_ids,
            log_probs=log_probs if request.params.logprobs else None,
            finish_reason=reason,
            weight_version=versions[-1] if versions else self.weight_version,
            weight_versions=versions,
        )

    def _retire(self, slot: int, reason: str) -> None:
        request, sample_index = self.rows[slot]
        count = int(self.length[slot])
        request.on_sample(
            self._sample_of(
                request,
                sample_index,
                self.tokens[slot, :count].tolist(),
                self.log_probs[slot, :count].tolist(),
                self.versions[slot, :count].tolist(),
                reason,
            )
        )
        last = len(self.rows) - 1
        if slot != last:  # keep running sequences in slots [0, B): move the last one here
            self.cache.move(last, slot, int(self.position[last]))
            buffers = (self.tokens, self.log_probs, self.versions, self.last, self.position)
            for buffer in (*buffers, self.length, self.limit, self.prompt_length, self.stop_table):
                buffer[slot] = buffer[last]
            self.rows[slot] = self.rows[last]
        self.rows.pop()
