"""Batched next-token sampling on the device, with the sampled tokens' log-probs (and, for
the requests that ask, the most likely alternatives)."""

import math

import torch
from torch import Tensor

from ascent.rollout.types import SamplingParams


def restrict(logits: Tensor, params: SamplingParams) -> Tensor:
    """float32 (B, V) logits / T with tokens outside the top-k and top-p sets at -inf.

    top-p keeps the smallest prefix of the sorted distribution whose mass reaches top_p
    (the most likely token always stays).
    """
    scores = logits.float()
    if params.temperature != 1.0:  # x / 1 is x: no copy of a (B, V) tensor for nothing
        scores = scores / params.temperature
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


def distribution(logits: Tensor, params: SamplingParams) -> Tensor:
    """float32 (B, V) log-probs of the distribution ``params`` samples from: greedy (T = 0)
    reports the model's own, log_softmax(logits); otherwise log_softmax of ``restrict``."""
    if params.temperature == 0:
        return torch.log_softmax(logits.float(), dim=-1)
    return torch.log_softmax(restrict(logits, params), dim=-1)


# Tokens per block of the two-level inverse CDF (``sample``).
BLOCK = 1024


class Scratch:
    """A buffer that ``sample`` writes its (B, V) weights into, kept from step to step: on a
    CPU a fresh tensor that large (67 MB at 64 rows of Gemma 3's 262k vocabulary) is new
    memory from the kernel each time, and its page faults cost more than the arithmetic
    (26 ms against 10 for the exp at that size)."""

    def __init__(self) -> None:
        self.buffer = torch.empty(0)

    def take(self, like: Tensor) -> Tensor:
        """An uninitialised float32 tensor of ``like``'s shape and device."""
        count = like.numel()
        if self.buffer.numel() < count or self.buffer.device != like.device:
            self.buffer = torch.empty(count, dtype=torch.float32, device=like.device)
        return self.buffer[:count].view(like.shape)

    def release(self) -> None:
        """Give the memory back (the engine sleeps); the next ``take`` allocates again."""
        self.buffer = torch.empty(0)


def sample(
    logits: Tensor, params: SamplingParams, uniform: Tensor | None, scratch: Scratch | None = None
) -> tuple[Tensor, Tensor]:
    """Next tokens (B,) and their log-probs (B,) under the sampling distribution; ``uniform``
    (B,) float64 in [0, 1): one draw per row (unused, and may be None, when greedy);
    ``scratch``: where the weights go (else a new tensor).

    A sampled row takes the first token whose cumulative probability exceeds U (inverse
    CDF), found in two levels: the weights w = exp(s - max s) of the restricted scores s
    are summed per block of ``BLOCK`` tokens (float64), the draw U * sum(w) picks the block
    whose running total first exceeds it, and the draw's place inside that block, as a
    fraction of its mass, picks the token from the block's own running total. The same
    token as one running total over the whole vocabulary (up to float64 rounding at a
    boundary), without its sequential pass over every token: on a 262k vocabulary (Gemma)
    that pass alone was 28 ms of a 16-row step. Masked tokens (w = 0) never raise a running
    total, so "exceeds" never lands on one. One uniform per row lets rows with random
    streams of their own share one batched draw.

    A block's mass is summed in float32 (relative error ~4e-7 at 1,024 tokens, the order of
    the exp's own), then the blocks' running total in float64: torch's float32-to-float64
    reduction was 30x slower (58 against 2 ms at 64 x 262k).
    """
    if params.temperature == 0:
        scores = logits.float()
        tokens = scores.argmax(dim=-1)
        chosen = scores.gather(-1, tokens[:, None]).squeeze(-1)
        return tokens, chosen - torch.logsumexp(scores, dim=-1)
    scores = restrict(logits, params)
    top = scores.max(dim=-1, keepdim=True).values
    weights = scratch.take(scores) if scratch is not None else torch.empty_like(scores)
    torch.sub(scores, top, out=weights).exp_()  # (B, V), the largest 1
    rows, vocab = weights.shape
    full = vocab // BLOCK * BLOCK
    block_mass = weights[:, :full].view(rows, -1, BLOCK).sum(-1)
    if full < vocab:
        block_mass = torch.cat((block_mass, weights[:, full:].sum(-1, keepdim=True)), dim=-1)
    block_mass = block_mass.double()
    running = block_mass.cumsum(dim=-1)  # (B, blocks)
    total = running[:, -1:]
    threshold = uniform[:, None] * total
    block = torch.searchsorted(running, threshold, right=True).clamp_(max=running.shape[1] - 1)
    before = torch.where(block > 0, running.gather(-1, (block - 1).clamp(min=0)), 0.0)
    upto = running.gather(-1, block)
    fraction = ((threshold - before) / (upto - before)).clamp_(0.0, 1.0 - 2.0**-53)
    index = block * BLOCK + torch.arange(BLOCK, device=weights.device)  # (B, BLOCK)
    inside = weights.gather(-1, index.clamp(max=vocab - 1)) * (index < vocab)
    inside = inside.cumsum(dim=-1, dtype=torch.float64)
    inside = inside / inside[:, -1:]  # ends at exactly 1 > fraction
    offset = torch.searchsorted(inside, fraction, right=True)
    tokens = (block * BLOCK + offset).squeeze(-1).clamp_(max=vocab - 1)
    chosen = scores.gather(-1, tokens[:, None]) - top
    return tokens, (chosen - total.log().float()).squeeze(-1)


Alternatives = list[tuple[int, float]]  # (token id, log-prob) pairs, most likely first


def top_alternatives(log_probs: Tensor, k: int) -> list[Alternatives]:
    """The ``k`` most likely tokens of each row of ``log_probs`` (R, V) with their log-probs;
    tokens top-k or top-p left out (-inf) are no alternatives, so a row may hold fewer."""
    values, indices = log_probs.topk(k, dim=-1)
    return [
        [(token, value) for token, value in zip(ids, row, strict=True) if value > -math.inf]
        for ids, row in zip(indices.tolist(), values.tolist(), strict=True)
    ]
