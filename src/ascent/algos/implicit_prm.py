"""The implicit process reward model of PRIME (arXiv:2502.01456; the implicit PRM of
arXiv:2412.01981).

The PRM is a causal LM pi_phi (a copy of the policy at the start) read against the frozen
reference pi_ref. Its reward for response token t of row i is the log-ratio

    r[i, t] = beta * (log pi_phi(y_t | y_<t) - log pi_ref(y_t | y_<t))          (B, T)

and its outcome-level reward is the sum over the response, R_i = sum_t m[i, t] r[i, t]. It
learns from outcome labels l_i in [0, 1] alone, with the cross-entropy of sigmoid(R_i):

    L_i = -(l_i log sigmoid(R_i) + (1 - l_i) log(1 - sigmoid(R_i)))
        = BCE-with-logits(R_i, l_i)

averaged over the sequences of the mini-batch on every rank (N_seq, as the other losses;
multiplied by dp_size because FSDP averages gradients). Training pi_phi this way makes
r[i, t] a token-level Q-value difference, a dense reward with no process labels. Only
pi_phi's log-probs carry the gradient.

Metrics (over the rows given): ``accuracy``, the share with (R_i > 0) == (l_i > 0.5);
``reward``, the mean R_i.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ascent.algos.masking import as_bool, at_least_float32


def implicit_process_rewards(
    prm_log_probs: Tensor, ref_log_probs: Tensor, response_mask: Tensor, beta: float
) -> Tensor:
    """r (B, T) = beta * (lp_phi - lp_ref) on valid tokens, exactly 0 elsewhere."""
    mask = as_bool(response_mask)
    rewards = beta * at_least_float32(prm_log_probs - ref_log_probs)
    return torch.where(mask, rewards, torch.zeros_like(rewards))


@dataclass(frozen=True)
class PRMLoss:
    loss: Tensor  # scalar: this micro-batch's share of the mini-batch loss
    metrics: dict[str, Tensor]  # detached, over this micro-batch's sequences


def implicit_prm_loss(
    prm_log_probs: Tensor,
    ref_log_probs: Tensor,
    response_mask: Tensor,
    labels: Tensor,
    *,
    beta: float,
    num_sequences: float,
    dp_size: int = 1,
) -> PRMLoss:
    """Cross-entropy of sigmoid(R_i) against ``labels`` (B,) in [0, 1]; ``prm_log_probs``
    (B, T) carry the gradient; ``num_sequences`` is N_seq of the whole mini-batch (all
    ranks). Rows without a valid token are left out."""
    mask = as_bool(response_mask)
    reward = implicit_process_rewards(prm_log_probs, ref_log_probs, mask, beta).sum(-1)
    labels = labels.to(reward).clamp(0.0, 1.0)
    real = mask.any(-1).to(reward)
    per_row = F.binary_cross_entropy_with_logits(reward, labels, reduction="none")
    loss = (per_row * real).sum() * dp_size / max(num_sequences, 1.0)
    count = real.sum().clamp(min=1.0)
    with torch.no_grad():
        agree = ((reward > 0) == (labels > 0.5)).to(reward)
        metrics = {
            "accuracy": (agree * real).sum() / count,
            "reward": (reward * real).sum() / count,
        }
    return PRMLoss(loss=loss, metrics=metrics)
