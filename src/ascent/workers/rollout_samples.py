"""Plain samples as the rollout role's rows: ``params.n`` responses per prompt, in the
training layout. (With ``rollout.agent`` the role plugs in ``ascent.agents.rollouts``
instead.)"""

from collections.abc import Callable

import torch

from ascent.batch import Batch
from ascent.rollout.protocol import RolloutBackend
from ascent.rollout.types import Sample, SamplingParams


class SampleRollouts:
    def __init__(
        self, backend: RolloutBackend, *, pad_id: int, weight_version: Callable[[], int]
    ) -> None:
        self.backend, self.pad_id, self.weight_version = backend, pad_id, weight_version

    def generate(self, batch: Batch, params: SamplingParams) -> Batch:
        samples = self.backend.generate_batch(prompt_ids(batch), params, prompt_images(batch))
        return self.collect(batch, samples, params)

    def submit(self, tag: str, batch: Batch, params: SamplingParams, together: bool) -> None:
        """Start the batch beside training (the backend is a ``BackgroundBackend``)."""
        self.backend.submit(tag, prompt_ids(batch), params, together, prompt_images(batch))

    def collect(self, batch: Batch, samples: list[Sample], params: SamplingParams) -> Batch:
        """Every row of ``batch`` repeated ``params.n`` times with its samples: ``responses``,
        ``response_mask``, ``rollout_log_probs``, ``rollout_weight_versions`` (B * n, max new
        tokens), ``input_ids`` / ``attention_mask`` (prompt then response), ``finish_reason``,
        and for a mixture of experts ``routed_experts`` (B * n, L, S, k) (``routed_experts``);
        the engine's ``weight_version`` in the meta."""
        width, rows = params.max_new_tokens, len(samples)
        responses = torch.full((rows, width), self.pad_id, dtype=torch.long)
        response_mask = torch.zeros(rows, width, dtype=torch.long)
        log_probs = torch.zeros(rows, width, dtype=torch.float32)
        versions = torch.zeros(rows, width, dtype=torch.int32)
        for row, sample in enumerate(samples):
            count = len(sample.token_ids)
            responses[row, :count] = torch.tensor(sample.token_ids, dtype=torch.long)
            response_mask[row, :count] = 1
            if sample.log_probs is not None:
                log_probs[row, :count] = torch.tensor(sample.log_probs)
            versions[row, :count] = torch.tensor(
                sample.weight_versions or [sample.weight_version] * count, dtype=torch.int32
            )
        repeated = batch.repeat_interleave(params.n)
        rows_out = repeated.assign(
            responses=responses,
            response_mask=response_mask,
            rollout_log_probs=log_probs,
            rollout_weight_versions=versions,
            input_ids=torch.cat([repeated["prompts"], responses], dim=1),
            attention_mask=torch.cat([repeated["prompt_mask"].long(), response_mask], dim=1),
            finish_reason=[s.finish_reason for s in samples],
        )
        if any(sample.routed_experts is not None for sample in samples):
            rows_out = rows_out.assign(routed_experts=routed_experts(rows_out, samples))
        return rows_out.with_meta(weight_version=self.weight_version())


def routed_experts(rows: Batch, samples: list[Sample]) -> torch.Tensor:
    """(B, L, S, k) int16 in the columns of ``input_ids`` (left-padded prompt, then the
    response): each position's experts as the engine routed it (``Sample.routed_experts``),
    -1 on padding and where the engine kept none (the last token, never fed back)."""
    shape = next(s.routed_experts.shape for s in samples if s.routed_experts is not None)
    prompt_width = rows["prompts"].shape[1]
    out = torch.full((len(samples), rows["input_ids"].shape[1], *shape[1:]), -1, dtype=torch.int16)
    for row, (sample, prompt_mask) in enumerate(zip(samples, rows["prompt_mask"], strict=True)):
        if sample.routed_experts is None:
            continue
        prompt = int(prompt_mask.sum())
        routes = sample.routed_experts
        out[row, prompt_width - prompt : prompt_width] = routes[:prompt]
        out[row, prompt_width : prompt_width + routes.shape[0] - prompt] = routes[prompt:]
    return out


def prompt_ids(batch: Batch) -> list[list[int]]:
    """Each row's prompt tokens (``prompts`` without the left padding)."""
    return [
        row[mask.bool()].tolist()
        for row, mask in zip(batch["prompts"], batch["prompt_mask"], strict=True)
    ]


def prompt_images(batch: Batch) -> list[list[str]] | None:
    """Each row's images (data URLs; field ``images``), or None when no row has one."""
    images = batch.get("images")
    return images if images and any(images) else None
