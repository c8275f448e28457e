"""The actor's total loss for one micro-batch, from the pieces in this package.

    loss = agg(L_policy * w) - entropy_coef * agg(H) + kl_coef * agg(kl(lp_new, lp_ref))
           + sum_n coef_n * agg(L_n)

agg is ``aggregate`` with the mini-batch's global denominators (so micro-batch losses sum to
the mini-batch loss); the policy term uses the loss's own aggregation when it fixes one
(gspo, geo_mean). w are optional rollout-correction weights, combined as the loss says
(``TokenLoss.weighting``): token by token for most losses, one geometric-mean weight per
sequence for geo_mean. The KL term is used when KL is a loss (``kl_coef > 0``); when KL
enters the reward instead, leave ``kl_coef`` at 0. ``terms`` are further per-token losses
L_n (B, T) with their coefficients (the distillation terms of ``ascent.algos.distill``), each
aggregated like the entropy and KL, its value in the metrics under its name.
"""

from collections.abc import Mapping

import torch
from torch import Tensor

from ascent.algos.aggregation import LossNormalizer, aggregate
from ascent.algos.kl import kl_estimate
from ascent.algos.types import AggregationMode, LossOutput, TokenLoss


def actor_objective(
    policy: TokenLoss,
    response_mask: Tensor,
    *,
    mode: AggregationMode,
    normalizer: LossNormalizer,
    weights: Tensor | None = None,
    entropy: Tensor | None = None,
    entropy_coef: float = 0.0,
    log_probs: Tensor | None = None,
    ref_log_probs: Tensor | None = None,
    kl_coef: float = 0.0,
    kl_estimator: str = "k3",
    terms: Mapping[str, tuple[float, Tensor]] | None = None,
) -> LossOutput:
    """Combine policy loss, entropy bonus and KL loss; metrics carry every term."""
    pg_loss = aggregate(
        policy.per_token,
        response_mask,
        policy.aggregation or mode,
        normalizer,
        weights,
        policy.weighting,
    )
    loss = pg_loss
    metrics = {**policy.metrics, "pg_loss": pg_loss.detach()}
    if entropy is not None:
        entropy_term = aggregate(entropy, response_mask, mode, normalizer)
        loss = loss - entropy_coef * entropy_term
        metrics["entropy"] = entropy_term.detach()
    if kl_coef != 0.0:
        if log_probs is None or ref_log_probs is None:
            raise ValueError("kl_coef > 0 needs log_probs and ref_log_probs (the reference's)")
        kl = kl_estimate(log_probs, ref_log_probs, response_mask, kl_estimator)
        kl_term = aggregate(kl, response_mask, mode, normalizer)
        loss = loss + kl_coef * kl_term
        metrics["kl_loss"] = kl_term.detach()
        metrics["kl_coef"] = torch.tensor(float(kl_coef))
    for name, (coef, per_token) in (terms or {}).items():
        term = aggregate(per_token, response_mask, mode, normalizer)
        loss = loss + coef * term
        metrics[name] = term.detach()
    return LossOutput(loss=loss, metrics=metrics)
