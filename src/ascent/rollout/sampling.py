"""Batched next-token sampling on the device, with the sampled tokens' log-probs."""

import torch
from torch import Tensor

from ascent.rollout.types import SamplingParams


def restrict(logits: Tensor, params: SamplingParams) -> Tensor:
    """float32 (B, V) logits / T with tokens outside the top-k and top-p sets at -inf.

    top-p keeps the smallest prefix of the sorted distribution whose mass reaches top_p
    (the most likely token always stays).
    """
    scores = logits.float() / params.temperature
    if 0 < params.top_k < scores.shape[-1]:
        kth = torch.topk(scores, params.top_k, dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < kth, -torch.inf)
    if params.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, dim=-1, descending=True)
        probs = torch.softmax(sorted_scores, dim=-1)
        mass_before = probs.cumsum(dim=-1) - probs
        drop_sorted = mass_before >= params.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        scores = scores.masked_fill(drop, -torch.inf)
    return scores


def sample(
    logits: Tensor, params: SamplingParams, generator: torch.Generator | None
) -> tuple[Tensor, Tensor]:
    """Next tokens (B,) and their log-probs (B,) under the sampling distribution."""
    if params.temperature == 0:
        tokens = logits.argmax(dim=-1)
        log_probs = torch.log_softmax(logits.float(), dim=-1)
    else:
        log_probs = torch.log_softmax(restrict(logits, params), dim=-1)
        # Gumbel-max: argmax(log p + G), G = -log(-log U), is an exact draw from p, and on
        # the CPU about 3x faster than torch.multinomial at (64 x 32k).
        uniform = torch.rand(log_probs.shape, generator=generator, device=log_probs.device)
        uniform.clamp_(min=torch.finfo(uniform.dtype).tiny)  # log(0) would veto a token
        tokens = (log_probs - torch.log(-torch.log(uniform))).argmax(dim=-1)
    return tokens, log_probs.gather(-1, tokens[:, None]).squeeze(-1)
