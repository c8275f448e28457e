"""The RL math: advantage estimators, policy and value losses, KL, aggregation.

Pure functions over tensors and masks; no models and no torch.distributed in here. The exact
formulas are in each module's docstring (and in docs/ALGORITHMS.md, which they implement).
"""

from ascent.algos.advantages import ADVANTAGE_ESTIMATORS, compute_advantages
from ascent.algos.aggregation import AGGREGATION_MODES, LossNormalizer, aggregate
from ascent.algos.kl import KL_ESTIMATORS, kl_estimate, kl_penalty_in_reward
from ascent.algos.kl_control import AdaptiveKLController, FixedKLController
from ascent.algos.logprobs import token_log_probs_and_entropy
from ascent.algos.logprobs_hidden import token_log_probs_and_entropy_from_hidden
from ascent.algos.losses import POLICY_LOSSES, compute_policy_loss
from ascent.algos.needs import Needs, needs, needs_of
from ascent.algos.objective import actor_objective
from ascent.algos.rollout_correction import RolloutCorrection, rollout_correction
from ascent.algos.types import (
    AdvantageInputs,
    Advantages,
    AggregationMode,
    LossOutput,
    PolicyLossInputs,
    TokenLoss,
    WeightingMode,
)
from ascent.algos.value_loss import value_loss

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AGGREGATION_MODES",
    "KL_ESTIMATORS",
    "POLICY_LOSSES",
    "AdaptiveKLController",
    "AdvantageInputs",
    "Advantages",
    "AggregationMode",
    "FixedKLController",
    "LossNormalizer",
    "LossOutput",
    "Needs",
    "PolicyLossInputs",
    "RolloutCorrection",
    "TokenLoss",
    "WeightingMode",
    "actor_objective",
    "aggregate",
    "compute_advantages",
    "compute_policy_loss",
    "kl_estimate",
    "kl_penalty_in_reward",
    "needs",
    "needs_of",
    "rollout_correction",
    "token_log_probs_and_entropy",
    "token_log_probs_and_entropy_from_hidden",
    "value_loss",
]
