"""The native rollout engine: continuous batching over a slotted KV cache.

Loop: admit waiting samples into free cache slots (prefilling each prompt once, however many
samples it has, and copying its keys and values into each sample's slot); then one decode
step for every running sequence at once, batched sampling on the device, stop checks; a
sequence that finishes frees its slot for the next waiting sample at once, so long responses
never hold a whole batch back. Scheduling is deterministic: with a seed, the same prompts and
settings give the same samples.
"""

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ascent.rollout.decoder import DecoderRunner
from ascent.rollout.kv_cache import SlotCache
from ascent.rollout.sampling import sample
from ascent.rollout.types import Sample, SamplingParams


@dataclass
class _Prefix:
    """A prefilled prompt waiting for its samples to get slots."""

    keys: Tensor  # (layers, kv_heads, length, head_dim)
    values: Tensor
    logits: Tensor  # (V,) of the prompt's last token
    length: int
    remaining: int


class NativeEngine:
    """Generates from a Llama-family transformers ``model`` (whose tensors it reads in place).

    max_num_seqs: sequences decoded at once (cache slots); kv_cache_bytes can lower it.
    max_model_len: prompt + response limit (cache slot length).
    tokenizer: needed only for stop strings.
    cuda_graphs: on CUDA, replay captured decode steps (one graph per batch-size bucket).
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        max_num_seqs: int = 64,
        max_model_len: int = 2048,
        kv_cache_bytes: int | None = None,
        max_prefill_tokens: int = 8192,
        tokenizer: object | None = None,
        cuda_graphs: bool = True,
    ) -> None:
        self.model = model.eval().requires_grad_(False)
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        self.runner = DecoderRunner(model, max_model_len)
        self.max_model_len = max_model_len
        self.max_prefill_tokens = max_prefill_tokens
        self.tokenizer = tokenizer
        self.cache = SlotCache(
            layers=len(self.runner.layers),
            kv_heads=self.runner.kv_heads,
            head_dim=self.runner.head_dim,
            max_len=max_model_len,
            max_slots=max_num_seqs,
            dtype=self.dtype,
            device=self.device,
            memory_bytes=kv_cache_bytes,
        )
        self.weight_version = 0
        self.use_cuda_graphs = cuda_graphs and self.device.type == "cuda"
        self.graphs = None

    # -- memory and weights -------------------------------------------------------------

    def sleep(self) -> None:
        """Release the KV cache (e.g. while the trainer runs); ``generate`` wakes it."""
        self.cache.sleep()
        self.graphs = None  # captured against the freed cache

    def wake(self) -> None:
        self.cache.wake()

    def load_weights(
        self, named_tensors: Iterable[tuple[str, Tensor]], *, alias: bool = False
    ) -> int:
        """Take a complete new set of weights, one tensor at a time; returns the new version.

        ``alias=True`` makes each parameter share the given tensor's storage when shape,
        dtype and device match (no copy: a colocated, unsharded trainer's own tensors).
        """
        update = self.begin_weight_update()
        update.load(named_tensors, alias=alias)
        return update.finish()

    def begin_weight_update(self) -> "WeightUpdate":
        """Start a refresh that may arrive in several parts (buckets from another device)."""
        return WeightUpdate(self)

    def max_weight_difference(self, named_tensors: Iterable[tuple[str, Tensor]]) -> float:
        """Debug check after a refresh: the largest |engine - source| over all weights."""
        params = dict(self.model.named_parameters())
        return max(
            float((params[name].float() - tensor.to(params[name].device).float()).abs().max())
            for name, tensor in named_tensors
        )

    def decode(self, tokens: Tensor, positions: Tensor) -> Tensor:
        """One decode step for the running sequences (slots [0, B)): CUDA graphs when
        enabled on CUDA, else the eager pass over the positions in use."""
        if self.use_cuda_graphs:
            if self.graphs is None:
                from ascent.rollout.cuda_graphs import GraphedDecoder

                self.graphs = GraphedDecoder(self.runner, self.cache)
            return self.graphs.decode(tokens, positions)
        span = int(positions.max()) + 1
        return self.runner.decode(self.cache, tokens, positions, span)

    # -- generation ---------------------------------------------------------------------

    def generate(self, prompts: list[list[int]], sampling: SamplingParams) -> list[Sample]:
        """``sampling.n`` samples for every prompt (token ids), ordered by prompt then sample."""
        for index, prompt in enumerate(prompts):
            if not 0 < len(prompt) < self.max_model_len:
                raise ValueError(
                    f"prompt {index} has {len(prompt)} tokens; it needs 1 to "
                    f"{self.max_model_len - 1} (max_model_len)"
                )
        if sampling.stop and self.tokenizer is None:
            raise ValueError("stop strings need the engine to have a tokenizer")
        self.cache.wake()
        return _Generation(self, prompts, sampling).run()


class WeightUpdate:
    """A refresh in progress: parts load as they come; ``finish`` checks that every
    parameter arrived and bumps the engine's weight version."""

    def __init__(self, engine: NativeEngine) -> None:
        self.engine = engine
        self.params = dict(engine.model.named_parameters())
        self.seen: set[str] = set()

    def load(self, named_tensors: Iterable[tuple[str, Tensor]], *, alias: bool = False) -> None:
        for name, tensor in named_tensors:
            param = self.params.get(name)
            if param is None:
                raise KeyError(f"the rollout model has no parameter {name!r}")
            tensor = tensor.detach()
            meta = (tensor.shape, tensor.dtype, tensor.device)
            if alias and meta == (param.shape, param.dtype, param.device):
                param.data = tensor
                self.engine.graphs = None  # captured graphs read the old storage
            else:
                param.data.copy_(tensor)
            self.seen.add(name)

    def finish(self) -> int:
        missing = sorted(set(self.params) - self.seen)
        if missing:
            raise ValueError(f"weights missing for {len(missing)} parameters, e.g. {missing[:3]}")
        self.engine.weight_version += 1
        return self.engine.weight_version


class _Generation:
    """The state of one ``generate`` call."""

    def __init__(
        self, engine: NativeEngine, prompts: list[list[int]], sampling: SamplingParams
    ) -> None:
        self.engine, self.prompts, self.params = engine, prompts, sampling
        device, slots = engine.device, engine.cache.slots
        self.generator = None
        if sampling.temperature > 0:
            self.generator = torch.Generator(device=device)
            if sampling.seed is None:
                self.generator.seed()
            else:
                self.generator.manual_seed(sampling.seed)
        self.stop_ids = torch.tensor(sampling.stop_token_ids, dtype=torch.long, device=device)
        width = sampling.max_new_tokens
        self.tokens = torch.zeros(slots, width, dtype=torch.long, device=device)
        self.log_probs = torch.zeros(slots, width, dtype=torch.float32, device=device)
        self.last = torch.zeros(slots, dtype=torch.long, device=device)
        self.position = torch.zeros(slots, dtype=torch.long, device=device)  # next cache write
        self.length = torch.zeros(slots, dtype=torch.long, device=device)  # tokens generated
        self.prompt_length = torch.zeros(slots, dtype=torch.long, device=device)
        self.owner: list[tuple[int, int]] = []  # per running slot: prompt index, sample index
        self.pending = deque(range(len(prompts)))
        self.waiting: deque[tuple[int, int]] = deque()
        self.prefixes: dict[int, _Prefix] = {}
        self.done: list[Sample] = []

    def run(self) -> list[Sample]:
        while self.pending or self.waiting or self.owner:
            self._admit()
            if self.owner:
                self._step()
        return sorted(self.done, key=lambda s: (s.prompt_index, s.sample_index))

    # admission: prefill prompts once, copy their keys/values into each sample's slot

    def _admit(self) -> None:
        cache, first = self.engine.cache, len(self.owner)
        logits = []
        while len(self.owner) < cache.slots and (self.waiting or self.pending):
            if not self.waiting:
                self._prefill(math.ceil((cache.slots - len(self.owner)) / self.params.n))
            prompt, sample_index = self.waiting.popleft()
            prefix = self.prefixes[prompt]
            slot = len(self.owner)
            cache.write_prefix(slot, prefix.keys, prefix.values)
            self.prompt_length[slot] = prefix.length
            self.length[slot] = 0  # the slot may still hold a retired sequence's count
            self.owner.append((prompt, sample_index))
            logits.append(prefix.logits)
            prefix.remaining -= 1
            if prefix.remaining == 0:
                del self.prefixes[prompt]
        if logits:  # every admitted sample draws its first token from its prompt's logits
            rows = torch.arange(first, len(self.owner), device=self.engine.device)
            self._record(rows, torch.stack(logits))

    def _prefill(self, count: int) -> None:
        """Prefill up to ``count`` pending prompts (within the prefill token budget)."""
        chosen, tokens = [], 0
        while self.pending and len(chosen) < max(count, 1):
            length = len(self.prompts[self.pending[0]])
            if chosen and tokens + length > self.engine.max_prefill_tokens:
                break
            chosen.append(self.pending.popleft())
            tokens += length
        device = self.engine.device
        lengths = torch.tensor([len(self.prompts[p]) for p in chosen], device=device)
        ids = torch.zeros(len(chosen), int(lengths.max()), dtype=torch.long, device=device)
        for row, prompt in enumerate(chosen):
            ids[row, : lengths[row]] = torch.tensor(self.prompts[prompt], device=device)
        logits, keys, values = self.engine.runner.prefill(ids, lengths)
        for row, prompt in enumerate(chosen):
            length = int(lengths[row])
            keys_row, values_row = keys[:, row, :, :length], values[:, row, :, :length]
            self.prefixes[prompt] = _Prefix(
                keys_row, values_row, logits[row], length, self.params.n
            )
            self.waiting.extend((prompt, s) for s in range(self.params.n))

    # decoding

    def _step(self) -> None:
        running = len(self.owner)
        logits = self.engine.decode(self.last[:running], self.position[:running])
        self._record(torch.arange(running, device=self.engine.device), logits)

    def _record(self, rows: Tensor, logits: Tensor) -> None:
        """Sample a token for ``rows`` from ``logits``, store it, retire finished rows."""
        tokens, log_probs = sample(logits, self.params, self.generator)
        self.tokens[rows, self.length[rows]] = tokens
        self.log_probs[rows, self.length[rows]] = log_probs
        first = self.length[rows] == 0
        prompt_lengths = self.prompt_length[rows]
        self.position[rows] = torch.where(first, prompt_lengths, self.position[rows] + 1)
        self.length[rows] += 1
        self.last[rows] = tokens
        stopped = torch.isin(tokens, self.stop_ids)
        full = (self.length[rows] >= self.params.max_new_tokens) | (
            prompt_lengths + self.length[rows] >= self.engine.max_model_len
        )
        finished = stopped | full
        reasons = {int(r): "stop" for r in rows[stopped].tolist()}
        if self.params.stop:
            for r in rows[~finished].tolist():
                if self._hits_stop_string(r):
                    reasons[r] = "stop"
            finished = finished | torch.tensor(
                [int(r) in reasons for r in rows.tolist()], device=rows.device
            )
        for slot in sorted(rows[finished].tolist(), reverse=True):
            self._retire(slot, reasons.get(slot, "length"))

    def _hits_stop_string(self, slot: int) -> bool:
        count = int(self.length[slot])
        tail = max(len(s) for s in self.params.stop) + 8  # tokens are at least one character
        ids = self.tokens[slot, max(0, count - tail) : count].tolist()
        text = self.engine.tokenizer.decode(ids)
        return any(stop in text for stop in self.params.stop)

    def _retire(self, slot: int, reason: str) -> None:
        prompt, sample_index = self.owner[slot]
        count = int(self.length[slot])
        self.done.append(
            Sample(
                prompt_index=prompt,
                sample_index=sample_index,
                token_ids=self.tokens[slot, :count].tolist(),
                log_probs=self.log_probs[slot, :count].tolist() if self.params.logprobs else None,
                finish_reason=reason,
                weight_version=self.engine.weight_version,
            )
        )
        last = len(self.owner) - 1
        if slot != last:  # keep running sequences in slots [0, B): move the last one here
            self.engine.cache.move(last, slot, int(self.position[last]))
            buffers = (self.tokens, self.log_probs, self.last, self.position, self.length)
            for buffer in (*buffers, self.prompt_length):
                buffer[slot] = buffer[last]
            self.owner[slot] = self.owner[last]
        self.owner.pop()
