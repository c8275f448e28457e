"""The reference engine: transformers ``generate``, behind the same interface.

For correctness comparisons and as the baseline of ``bench/rollout.py``. Sequences (every
sample of every prompt) are generated in static batches of up to ``max_num_seqs``, prompts
left-padded; each sample is prefilled on its own, as ``generate`` does. Log-probs are those
of the scores ``generate`` samples from (after temperature, top-k and top-p), so they follow
the same definition as the native engine's. They are gathered step by step while ``generate``
runs, so memory for them is one step's scores, O(batch x V), not every step's.
"""

from collections.abc import Iterable

import torch
from torch import Tensor, nn

from ascent.rollout.engine import WeightUpdate
from ascent.rollout.types import Sample, SamplingParams

# ``generate`` runs the logits processors it is given before the warpers it builds itself, and
# the log-probs must see the warped scores: so it is told to build none (overriding whatever
# the model's generation config sets) and gets ours, followed by the recorder.
NO_WARPERS = {
    "temperature": 1.0,
    "top_k": 0,
    "top_p": 1.0,
    "min_p": None,
    "top_h": None,
    "typical_p": 1.0,
    "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
}


class TransformersEngine:
    def __init__(
        self, model: nn.Module, *, max_num_seqs: int = 64, tokenizer: object | None = None
    ) -> None:
        self.model = model.eval().requires_grad_(False)
        self.device = next(model.parameters()).device
        self.max_num_seqs = max_num_seqs
        self.tokenizer = tokenizer
        self.weight_version = 0

    def load_weights(
        self,
        named_tensors: Iterable[tuple[str, Tensor]],
        *,
        version: int,
        alias: bool = False,
    ) -> int:
        """As ``NativeEngine.load_weights``, always copied (``alias`` is ignored: a reference
        engine keeps its own tensors); returns the new version."""
        update = WeightUpdate(self)
        update.load(named_tensors)
        return update.finish(version)

    def set_weight_version(self, version: int) -> None:
        self.weight_version = version

    def weights_changed(self, moved: bool) -> None:
        """Nothing is built from the weights here: ``generate`` reads them each call."""

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], sampling: SamplingParams) -> list[Sample]:
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        sequences = [(p, s) for p in range(len(prompts)) for s in range(sampling.n)]
        samples = []
        for start in range(0, len(sequences), self.max_num_seqs):
            chunk = sequences[start : start + self.max_num_seqs]
            samples.extend(self._generate_batch(prompts, chunk, sampling))
        return samples

    def _generate_batch(
        self, prompts: list[list[int]], chunk: list[tuple[int, int]], sampling: SamplingParams
    ) -> list[Sample]:
        from transformers import LogitsProcessorList

        width = max(len(prompts[p]) for p, _ in chunk)
        ids = torch.zeros(len(chunk), width, dtype=torch.long)
        mask = torch.zeros(len(chunk), width, dtype=torch.long)
        for row, (p, _) in enumerate(chunk):
            ids[row, width - len(prompts[p]) :] = torch.tensor(prompts[p])
            mask[row, width - len(prompts[p]) :] = 1
        stop_ids = list(sampling.stop_token_ids)
        pad = stop_ids[0] if stop_ids else 0
        greedy = sampling.temperature == 0
        options = {
            "max_new_tokens": sampling.max_new_tokens,
            "do_sample": not greedy,
            "eos_token_id": stop_ids or None,
            "pad_token_id": pad,
        }
        if not greedy:
            options |= NO_WARPERS
        if sampling.stop:
            options |= {"stop_strings": sampling.stop, "tokenizer": self.tokenizer}
        recorder = LogProbRecorder()
        processors = [] if greedy else warpers(sampling)
        sequences = self.model.generate(
            ids.to(self.device),
            attention_mask=mask.to(self.device),
            logits_processor=LogitsProcessorList([*processors, recorder]),
            **options,
        )
        generated = sequences[:, width:]
        log_probs = recorder.log_probs_of(generated).cpu()
        generated = generated.cpu()
        samples = []
        for row, (p, s) in enumerate(chunk):
            tokens = generated[row].tolist()
            count, reason = self._length(tokens, stop_ids, sampling)
            samples.append(
                Sample(
                    prompt_index=p,
                    sample_index=s,
                    token_ids=tokens[:count],
                    log_probs=log_probs[row, :count].tolist() if sampling.logprobs else None,
                    finish_reason=reason,
                    weight_version=self.weight_version,
                )
            )
        return samples

    def _length(
        self, tokens: list[int], stop_ids: list[int], sampling: SamplingParams
    ) -> tuple[int, str]:
        """Where a response ends inside generate's padded output, and why."""
        for index, token in enumerate(tokens):
            if token in stop_ids:
                return index + 1, "stop"
            if sampling.stop:
                text = self.tokenizer.decode(tokens[: index + 1])
                if any(stop in text for stop in sampling.stop):
                    return index + 1, "stop"
        return len(tokens), "length"


def warpers(sampling: SamplingParams) -> list:
    """Temperature, top-k, top-p: the warpers ``generate`` would build, in its order."""
    from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    chosen = []
    if sampling.temperature != 1.0:
        chosen.append(TemperatureLogitsWarper(sampling.temperature))
    if sampling.top_k != 0:
        chosen.append(TopKLogitsWarper(sampling.top_k))
    if sampling.top_p < 1.0:
        chosen.append(TopPLogitsWarper(sampling.top_p))
    return chosen


class LogProbRecorder:
    """The last logits processor of a ``generate`` call (a ``transformers.LogitsProcessor``).

    At each step it receives the tokens so far and the scores the next token will be sampled
    from; the token sampled from the previous step's scores is the last column of
    ``input_ids``, and its log-prob, log_softmax(scores)[token], is kept as a (batch,) tensor.
    Only the latest scores are referenced (``generate`` holds them anyway), never copied.
    """

    def __init__(self) -> None:
        self.scores: Tensor | None = None
        self.log_probs: list[Tensor] = []

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        if self.scores is not None:
            self.log_probs.append(token_log_prob(self.scores, input_ids[:, -1]))
        self.scores = scores
        return scores

    def log_probs_of(self, generated: Tensor) -> Tensor:
        """(batch, steps) log-probs of the generated tokens (batch, steps) ``generate`` returned.

        The last token's scores are still pending here. A step ``generate`` ran and then undid
        (its deferred stop check on some devices) was recorded too: only ``steps`` are kept.
        """
        steps = generated.shape[1]
        if len(self.log_probs) < steps:
            self.log_probs.append(token_log_prob(self.scores, generated[:, -1]))
        return torch.stack(self.log_probs[:steps], dim=1)


def token_log_prob(scores: Tensor, tokens: Tensor) -> Tensor:
    """log_softmax(scores) (batch, V) in float32, at one token per row (batch,)."""
    return torch.log_softmax(scores.float(), dim=-1).gather(-1, tokens[:, None]).squeeze(-1)
