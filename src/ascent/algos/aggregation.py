"""Turn a per-token loss matrix into a scalar, with global-batch-invariant denominators.

The modes (docs/ALGORITHMS.md), over one mini-batch (one optimiser step):

- ``token-mean``:              sum_{i,t} L m / N_tok
- ``seq-mean-token-sum``:      sum_i (sum_t L m) / N_seq
- ``seq-mean-token-mean``:     sum_i (sum_t L m / |y_i|) / N_seq
- ``seq-mean-token-sum-norm``: sum_i (sum_t L m) / (N_seq * K)      (Dr.GRPO)

N_tok counts the valid tokens of the whole mini-batch on all data-parallel ranks; N_seq counts
its sequences with at least one valid token (an all-masked row carries no loss and does not
dilute the others; verl counts the same way); K is a constant, by default the maximum response
length. Because the denominators are those of the mini-batch, not of the micro-batch in hand,
every micro-batch contributes exactly its share: summing the micro-batch losses (gradient
accumulation) gives the mini-batch loss whatever the micro-batch sizes.

Data parallelism: FSDP *averages* gradients over the ``dp_size`` ranks, so each rank's partial
loss is multiplied by ``dp_size``; the average of the ranks' gradients is then the gradient of
the global loss. With ``dp_size=1`` nothing changes.

Importance weights w (B, T) (rollout correction, detached) enter before the sum, combined as
the loss says (``TokenLoss.weighting``):

- ``token``:                   L[i,t] * w[i,t]
- ``sequence_geometric_mean``: L[i,t] * W_i,  W_i = exp(sum_t m log(w_t + 1e-10) / (|y_i| + 1e-8))

W_i depends on row i alone, so it too is the same whatever the micro-batching. A weight of 0
on one token leaves W_i = 1e-10^(1/|y_i|) times the other tokens' geometric mean: a smaller
weight, not a dropped row; a whole row of zeros gives W_i ~ 1e-10.

Masked positions of ``per_token`` and ``weights`` are never read (NaN there cannot leak). An
empty mini-batch (N = 0) gives a loss of 0, not NaN.
"""

from dataclasses import dataclass
from typing import get_args

import torch
from torch import Tensor

from ascent.algos.masking import EPS, as_bool, at_least_float32, keep_valid, masked_sum
from ascent.algos.types import AggregationMode, WeightingMode

AGGREGATION_MODES: tuple[str, ...] = get_args(AggregationMode)
WEIGHTING_MODES: tuple[str, ...] = get_args(WeightingMode)
LOG_WEIGHT_EPS = 1e-10  # keeps log(0) finite for masked-IS zeros; verl uses the same


@dataclass(frozen=True)
class LossNormalizer:
    """The global denominators of one mini-batch, computed once before its micro-batches.

    num_tokens: N_tok, valid tokens in the whole mini-batch across all ranks.
    num_sequences: N_seq, sequences with at least one valid token, across all ranks.
    norm_length: K for ``seq-mean-token-sum-norm`` (use the configured max response length).
    dp_size: number of data-parallel ranks whose gradients are averaged.
    """

    num_tokens: float
    num_sequences: float
    norm_length: float
    dp_size: int = 1

    @classmethod
    def from_mask(
        cls, response_mask: Tensor, *, norm_length: float | None = None, dp_size: int = 1
    ) -> "LossNormalizer":
        """Denominators of a mini-batch held whole in one place, (B, T) mask.

        A distributed trainer instead sums the local counts over ranks (an all-reduce) and
        builds the normaliser from the totals. ``norm_length`` defaults to T, which is only
        invariant if T is the same for every micro-batch: pass the configured maximum.
        """
        mask = as_bool(response_mask)
        return cls(
            num_tokens=float(mask.sum()),
            num_sequences=float(mask.any(dim=-1).sum()),
            norm_length=float(norm_length if norm_length is not None else mask.shape[-1]),
            dp_size=dp_size,
        )


def aggregate(
    per_token: Tensor,
    response_mask: Tensor,
    mode: AggregationMode,
    normalizer: LossNormalizer,
    weights: Tensor | None = None,
    weighting: WeightingMode = "token",
) -> Tensor:
    """This micro-batch's share of the mini-batch loss (a 0-dim tensor).

    per_token: (B, T) loss matrix; response_mask: (B, T); weights: optional (B, T)
    multipliers (e.g. rollout-correction weights, never differentiated), combined as
    ``weighting`` says and applied before aggregation.
    """
    mask = as_bool(response_mask)
    loss = keep_valid(per_token, mask)
    if weights is not None:
        loss = loss * combine_weights(weights.detach(), mask, weighting)
    token_sums = loss.sum(dim=-1)  # (B,)
    if mode == "token-mean":
        total, denominator = token_sums.sum(), normalizer.num_tokens
    elif mode == "seq-mean-token-sum":
        total, denominator = token_sums.sum(), normalizer.num_sequences
    elif mode == "seq-mean-token-mean":
        lengths = mask.sum(dim=-1).clamp(min=1).to(loss.dtype)
        total, denominator = (token_sums / lengths).sum(), normalizer.num_sequences
    elif mode == "seq-mean-token-sum-norm":
        total = token_sums.sum()
        denominator = normalizer.num_sequences * normalizer.norm_length
    else:
        raise ValueError(f"unknown aggregation mode {mode!r}; choose one of {AGGREGATION_MODES}")
    return total * (normalizer.dp_size / max(denominator, 1.0))


def combine_weights(weights: Tensor, response_mask: Tensor, weighting: WeightingMode) -> Tensor:
    """The (B, T) multipliers of the loss matrix for ``weighting``, zero outside the mask."""
    mask = as_bool(response_mask)
    weights = keep_valid(weights, mask)
    if weighting == "token":
        return weights
    if weighting == "sequence_geometric_mean":
        log_weights = torch.log(at_least_float32(weights) + LOG_WEIGHT_EPS)
        lengths = mask.sum(dim=-1).to(log_weights.dtype)  # an int64 count + EPS would be float32
        per_row = torch.exp(masked_sum(log_weights, mask, dim=-1) / (lengths + EPS))  # (B,)
        return keep_valid(per_row.unsqueeze(-1).expand_as(weights), mask)
    raise ValueError(f"unknown weighting {weighting!r}; choose one of {WEIGHTING_MODES}")
