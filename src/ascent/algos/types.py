"""Typed inputs and outputs shared by the estimators and losses.

Shapes: B responses, T padded response length. Every (B, T) input comes with the response
mask m (bool or 0/1); values outside the mask are never read (see ``ascent.algos.masking``).
"""

from dataclasses import dataclass, field
from typing import Literal

from torch import Tensor

AggregationMode = Literal[
    "token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"
]
WeightingMode = Literal["token", "sequence_geometric_mean"]


@dataclass(frozen=True)
class AdvantageInputs:
    """What an advantage estimator may read. Estimators name the optional fields they need.

    token_rewards: (B, T) per-token rewards; an outcome score sits on the last valid token,
        so the sequence score is s_i = sum_t r[i, t] * m[i, t].
    response_mask: (B, T) 1 on tokens the policy generated, 0 on padding and tool output.
    group_ids: (B,) int64; samples of the same prompt share an id (any integers).
    values: (B, T) critic values V(s_t) (gae).
    baseline_scores: (B,) score of the greedy response to the same prompt (remax).
    sample_weights: (B,) each sample's weight in its group's statistics (group estimators);
        1/k for each of the k samples of a multi-turn episode, so groups count episodes.
        None: every sample counts once.
    process_rewards: (B, T) dense per-token rewards of a process reward model (prime).
    """

    token_rewards: Tensor
    response_mask: Tensor
    group_ids: Tensor | None = None
    values: Tensor | None = None
    baseline_scores: Tensor | None = None
    sample_weights: Tensor | None = None
    process_rewards: Tensor | None = None

    def require(self, name: str, estimator: str) -> Tensor:
        """The optional field ``name``, or an error saying which estimator needs it."""
        value = getattr(self, name)
        if value is None:
            raise ValueError(
                f"advantage estimator {estimator!r} needs AdvantageInputs.{name}; "
                f"see the docstring of ascent.algos.types.AdvantageInputs for its shape"
            )
        return value


@dataclass(frozen=True)
class Advantages:
    """advantages and returns, both (B, T) float and exactly zero outside the response mask."""

    advantages: Tensor
    returns: Tensor


@dataclass(frozen=True)
class PolicyLossInputs:
    """What a policy loss reads; all (B, T).

    log_probs: log pi_theta of the sampled tokens, carrying the gradient (lp_new).
    old_log_probs: log-probs under the policy that collected the batch (lp_old), no gradient.
    advantages: per-token advantages, no gradient.
    response_mask: tokens that carry loss.
    """

    log_probs: Tensor
    old_log_probs: Tensor
    advantages: Tensor
    response_mask: Tensor


@dataclass(frozen=True)
class TokenLoss:
    """A per-token loss matrix, ready for aggregation, and the metrics that describe it.

    per_token: (B, T), zero outside the mask; differentiable.
    metrics: name -> 0-dim detached tensor (kept as tensors so no device sync is forced).
    aggregation: set by losses whose definition fixes the aggregation (gspo, geo_mean);
        None means the configured mode applies.
    weighting: how importance (rollout-correction) weights w (B, T) combine with this loss.
        ``token``: each token's loss is multiplied by its own w_t. ``sequence_geometric_mean``
        (geo_mean, whose loss is one value per sequence): every token of row i is multiplied
        by W_i = exp(sum_t m log(w_t + 1e-10) / (|y_i| + 1e-8)), the geometric mean of the
        row's weights. See ``ascent.algos.aggregation.aggregate``.
    """

    per_token: Tensor
    metrics: dict[str, Tensor] = field(default_factory=dict)
    aggregation: AggregationMode | None = None
    weighting: WeightingMode = "token"


@dataclass(frozen=True)
class LossOutput:
    """A scalar loss to call ``backward`` on, and its metrics (0-dim detached tensors)."""

    loss: Tensor
    metrics: dict[str, Tensor] = field(default_factory=dict)
