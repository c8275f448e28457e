"""Per-token reverse KL to a teacher as an advantage (on-policy distillation, as Thinking
Machines' "On-Policy Distillation" and slime's ``--use-opd`` do it).

With lp_s[i,t] the student's log-prob of its own sampled token y_t (the policy that collected
the batch: old log-probs, or the rollout's when they are not recomputed) and lp_T[i,t] the
teacher's log-prob of the same token given the same prefix,

    d[i,t] = lp_s[i,t] - lp_T[i,t]          one-sample estimate of KL(pi_s || pi_T) at t
    a[i,t] = -coef * d[i,t] * m[i,t]        the distillation advantage, no discount

so tokens the teacher finds likelier than the student did are pushed up and the others down:
the policy gradient of E_pi_s[sum_t a_t] with a_t held fixed (the usual surrogate) is the
per-token reverse-KL gradient, each token's KL charged to that token alone (discount 0).
The result is added to the task's advantages, A = w * A_task + a (w = 0: pure distillation).
It is not whitened or normalised: its scale is the KL's, in nats, times ``coef``. Detached;
zero outside the mask, whatever the inputs hold there.
"""

import torch
from torch import Tensor

from ascent.algos.masking import keep_valid


def reverse_kl_advantages(
    log_probs: Tensor, teacher_log_probs: Tensor, mask: Tensor, coef: float
) -> Tensor:
    """a = -coef * (lp_s - lp_T) on valid tokens; all (B, T), float of the inputs."""
    with torch.no_grad():
        gap = keep_valid(log_probs, mask) - keep_valid(teacher_log_probs, mask)
        return keep_valid(-coef * gap, mask)
