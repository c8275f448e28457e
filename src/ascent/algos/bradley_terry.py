"""The Bradley-Terry pairwise loss of reward-model training (InstructGPT, arXiv:2203.02155;
margins as in Llama 2, arXiv:2307.09288).

A pair i has a chosen and a rejected response to one prompt, scored r_c[i] and r_r[i] by the
model. Under Bradley-Terry, P(chosen preferred) = sigmoid(r_c - r_r), so the loss of a pair
is its negative log-likelihood, with an optional required margin m[i] >= 0:

    L_i = -log sigmoid(r_c[i] - r_r[i] - m[i]) = softplus(-(r_c[i] - r_r[i] - m[i]))

(softplus form: finite for any score gap). The mini-batch loss is sum_i w[i] L_i / N_pairs
with N_pairs = sum of w over the whole mini-batch on every rank (w[i] in {0, 1}: 0 marks a
padding pair), so micro-batching and the number of ranks do not change the gradient; like
the other losses, the share is multiplied by dp_size because FSDP averages gradients.

Metrics (over the weighted pairs given): ``accuracy`` = share with r_c > r_r (a tie counts
as wrong), ``margin`` = mean r_c - r_r, ``chosen`` and ``rejected`` = mean scores.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor


@dataclass(frozen=True)
class PairwiseLoss:
    loss: Tensor  # scalar: this micro-batch's share of the mini-batch loss
    metrics: dict[str, Tensor]  # detached, over this micro-batch's real pairs


def bradley_terry_loss(
    chosen: Tensor,
    rejected: Tensor,
    *,
    num_pairs: float,
    weights: Tensor | None = None,
    margins: Tensor | None = None,
    dp_size: int = 1,
) -> PairwiseLoss:
    """Pairwise loss of scores ``chosen`` and ``rejected`` (P,), float; ``num_pairs`` is
    N_pairs of the whole mini-batch (all ranks); ``weights`` (P,) 1 for a real pair, 0 for
    padding; ``margins`` (P,) the required gap (default 0)."""
    chosen, rejected = chosen.float(), rejected.float()
    weights = torch.ones_like(chosen) if weights is None else weights.to(chosen)
    gap = chosen - rejected
    required = gap if margins is None else gap - margins.to(chosen)
    per_pair = F.softplus(-required)
    loss = (per_pair * weights).sum() * dp_size / max(num_pairs, 1.0)
    real = weights.sum().clamp(min=1.0)
    with torch.no_grad():
        metrics = {
            "accuracy": ((gap > 0).float() * weights).sum() / real,
            "margin": (gap * weights).sum() / real,
            "chosen": (chosen * weights).sum() / real,
            "rejected": (rejected * weights).sum() / real,
        }
    return PairwiseLoss(loss=loss, metrics=metrics)
