"""Admission: from waiting prefill jobs to running sequences, block by block.

A job is planned when the batch has a seat for it and the cache has the blocks: those its
prompt needs beyond what the prefix cache already holds, one copy of the partial last block
for each further sample, and one spare block per admitted sample (its next write), so that a
fresh admission is not preempted by the very next decode step. When nothing runs, the job at
the head is admitted (one sample) whatever the spare: the budget always holds one whole
sequence, so the queue cannot stall. Jobs are prefilled together up to
``MAX_PREFILL_TOKENS`` new tokens (at least one job), fresh prompts and prompts that
continue cached context in separate passes (causal SDPA for the first, attention over
blocks for the second). A job with more samples than free seats or blocks starts as many as
fit; the rest wait and, when admitted, find the prompt's full blocks in the prefix cache.
"""

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from ascent.rollout.decoder import PrefillChunk
from ascent.rollout.kv_cache import PagedKVCache
from ascent.rollout.sequence import PrefillJob, Running

# New tokens prefilled together in one pass (a job longer than this still goes alone): what
# bounds a prefill's activations, not a knob a run needs to turn.
MAX_PREFILL_TOKENS = 8192


@dataclass(eq=False)
class Planned:
    """A job (or its first ``samples``) with its blocks taken: ``table`` holds the context
    (``start`` positions found in the prefix cache, the rest to compute); ``copies`` are
    the further samples' own last blocks."""

    job: PrefillJob
    samples: list[int]
    table: list[int]
    copies: list[int]
    names: list[int]
    start: int


class Admission:
    def __init__(
        self,
        cache: PagedKVCache,
        prefill: Callable[[PrefillChunk], Tensor],
        max_model_len: int,
    ) -> None:
        self.cache, self.prefill, self.max_model_len = cache, prefill, max_model_len
        self.prefilled_tokens = 0  # positions computed by prefill (cached ones excluded)
        self.reused_tokens = 0  # positions taken from the prefix cache instead
        self.log: list[tuple[int, int]] | None = None  # a list: (context, computed) per job

    def admit(
        self, waiting: deque[PrefillJob], seats: int, running: int, fail: Callable
    ) -> tuple[list[tuple[Running, Tensor]], Exception | None]:
        """Prefill jobs from the head of ``waiting`` into at most ``seats`` rows (``running``
        rows hold blocks already) -> the new rows with the logits their first token is drawn
        from, and the first prefill error (its requests already failed through ``fail``)."""
        admitted, failure = [], None
        while waiting and seats > 0:
            planned = self._plan(waiting, seats, running + len(admitted))
            if not planned:
                break
            try:
                results = list(zip(planned, self.prefill(self._chunk(planned)), strict=True))
            except Exception:
                results, error = self._alone(planned, waiting, fail)
                failure = failure or error
            for plan, logits in results:
                rows = self._start(plan)
                admitted.extend((row, logits) for row in rows)
                seats -= len(rows)
        return admitted, failure

    # -- planning -------------------------------------------------------------------------

    def _plan(self, waiting: deque[PrefillJob], seats: int, running: int) -> list[Planned]:
        cache, size = self.cache, self.cache.block_size
        planned, tokens_budget = [], MAX_PREFILL_TOKENS
        while waiting and seats > 0:
            job = waiting[0]
            tokens = job.tokens
            keyed = job.request.prefix_tokens(tokens)  # image tokens named by their image
            prefix = cache.blocks.lookup(keyed, len(tokens) - 1)  # compute one at least
            found = prefix.blocks
            start = len(found) * size + prefix.partial_length
            new_blocks = math.ceil(len(tokens) / size) - len(found)
            kept = found + ([prefix.partial] if prefix.partial is not None else [])
            revived = sum(cache.blocks.refs[b] == 0 for b in kept)
            # Each sample needs its next block, and each after the first its own copy of a
            # partial last block: as many samples as the blocks left allow.
            partial = len(tokens) % size != 0
            spare = cache.available - new_blocks - revived + partial
            count = min(job.seats, seats, spare // (1 + partial))
            if count < 1:
                if planned or running:
                    break  # wait for blocks (running sequences free them as they finish)
                count = 1  # alone: the budget holds one whole sequence (see PagedKVCache)
            copies = count - 1 if partial else 0
            if planned and len(tokens) - start > tokens_budget:
                break
            if planned and (start == 0) != (planned[0].start == 0):
                break  # fresh prompts prefill with causal SDPA, the others over their blocks
            for block in kept:
                cache.blocks.share(block)  # (the partial one: safe from eviction meanwhile)
            table = found + cache.allocate(new_blocks)
            if prefix.partial is not None:  # copy-on-write: it stays as the cache has it
                cache.copy_block(prefix.partial, table[len(found)])
                cache.blocks.release([prefix.partial])
            names = prefix.names
            samples = job.samples[:count]
            planned.append(Planned(job, samples, table, cache.allocate(copies), names, start))
            if job.resume is not None or count == job.seats:
                waiting.popleft()
            else:
                job.samples = job.samples[count:]
            seats -= count
            tokens_budget -= len(tokens) - start
        return planned

    def _chunk(self, planned: list[Planned]) -> PrefillChunk:
        cache, device = self.cache, self.cache.device
        new = [p.job.tokens[p.start :] for p in planned]
        lengths = torch.tensor([len(n) for n in new], device=device)
        ids = torch.zeros(len(new), int(lengths.max()), dtype=torch.long, device=device)
        slots = []
        for row, (plan, tokens) in enumerate(zip(planned, new, strict=True)):
            ids[row, : len(tokens)] = torch.tensor(tokens, device=device)
            slots.extend(cache.slots(plan.table, plan.start, plan.start + len(tokens)))
        return PrefillChunk(
            ids=ids,
            lengths=lengths,
            starts=torch.tensor([p.start for p in planned], device=device),
            valid=torch.arange(ids.shape[1], device=device) < lengths[:, None],
            slots=torch.tensor(slots, dtype=torch.long, device=device),
            tables=cache.table_tensor([p.table for p in planned]),
            fresh=all(p.start == 0 for p in planned),
            prompts=tuple(p.job.request.prepared for p in planned),
        )

    def _alone(
        self, planned: list[Planned], waiting: deque[PrefillJob], fail: Callable
    ) -> tuple[list[tuple[Planned, Tensor]], Exception | None]:
        """Prefill each job by itself; those that fail alone go back to the queue with their
        blocks freed, and ``fail`` finishes their requests there."""
        results, first_error = [], None
        for plan in planned:
            try:
                results.append((plan, self.prefill(self._chunk([plan]))[0]))
            except Exception as error:
                self.cache.blocks.release(plan.table + plan.copies)
                job = plan.job
                waiting.appendleft(PrefillJob(job.request, plan.samples, job.resume))
                fail([job.request], error)
                first_error = first_error or error
        return results, first_error

    # -- starting rows ------------------------------------------------------------------------

    def _start(self, plan: Planned) -> list[Running]:
        """The rows of a prefilled job: its full blocks named in the prefix cache, shared by
        every sample; the partial last block copied for each sample after the first."""
        cache, size = self.cache, self.cache.block_size
        tokens = plan.job.tokens
        full = len(tokens) // size
        for block, name in zip(plan.table[:full], plan.names, strict=True):
            cache.blocks.register(block, name)
        self.prefilled_tokens += len(tokens) - plan.start
        self.reused_tokens += plan.start
        if self.log is not None:
            self.log.append((len(tokens), len(tokens) - plan.start))
        if plan.job.resume is not None:
            rows = [plan.job.resume]
            rows[0].blocks = plan.table
        else:
            request = plan.job.request
            limit = min(request.params.max_new_tokens, self.max_model_len - len(tokens))
            rows = []
            for number, sample_index in enumerate(plan.samples):
                table = list(plan.table)
                if number > 0:
                    for block in table[:full]:
                        cache.blocks.share(block)
                    if len(table) > full:
                        copy = plan.copies[number - 1]
                        cache.copy_block(table[full], copy)
                        table[full] = copy
                rows.append(Running(request, sample_index, len(tokens), limit, list(tokens), table))
        for row in rows:
            row.cached, row.names, row.root = len(tokens), plan.names[:full], cache.blocks.root
        return rows
