"""The reference engine: transformers ``generate``, behind the same interface.

For correctness comparisons and as the baseline of ``bench/rollout.py``. Sequences (every
sample of every prompt) are generated in static batches of up to ``max_num_seqs``, prompts
left-padded; each sample is prefilled on its own, as ``generate`` does. Log-probs are those
of the scores ``generate`` samples from (after temperature, top-k and top-p), so they follow
the same definition as the native engine's.
"""

import torch
from torch import nn

from ascent.rollout.types import Sample, SamplingParams


class TransformersEngine:
    def __init__(
        self, model: nn.Module, *, max_num_seqs: int = 64, tokenizer: object | None = None
    ) -> None:
        self.model = model.eval().requires_grad_(False)
        self.device = next(model.parameters()).device
        self.max_num_seqs = max_num_seqs
        self.tokenizer = tokenizer
        self.weight_version = 0

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
            "output_scores": True,
            "return_dict_in_generate": True,
        }
        if not greedy:
            options |= {
                "temperature": sampling.temperature,
                "top_p": sampling.top_p,
                "top_k": sampling.top_k,
            }
        if sampling.stop:
            options |= {"stop_strings": sampling.stop, "tokenizer": self.tokenizer}
        out = self.model.generate(
            ids.to(self.device), attention_mask=mask.to(self.device), **options
        )
        generated = out.sequences[:, width:].cpu()
        scores = torch.stack(out.scores, dim=1).float().cpu()  # (batch, steps, V)
        log_probs = torch.log_softmax(scores, dim=-1).gather(-1, generated[..., None]).squeeze(-1)
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
