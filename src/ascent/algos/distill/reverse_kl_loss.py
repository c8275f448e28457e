"""Per-token reverse KL to a teacher as a loss term: coef * agg(k(lp_new - lp_T)).

With x[i,t] = lp_new[i,t] - lp_T[i,t] at the student's sampled token y_t, ``estimator`` is one
of ``ascent.algos.kl``'s (k1, abs, k2, k3, k1+, k3+), applied as to the reference KL. The
default is k2 = x^2 / 2 because of its gradient: on samples from the student itself,

    grad k2 = (lp_new - lp_T) grad lp_new

whose expectation over y_t ~ pi_s is the gradient of KL(pi_s(.|prefix) || pi_T(.|prefix)) at
each position (the score-function form; grad E[lp_new] = 0). k1's gradient, grad lp_new, has
expectation zero (no signal), and k3's is that of KL(pi_T || pi_s) estimated on student samples.
As a loss the teacher's signal flows through lp_new; as an advantage (``reverse_kl_advantage``)
it rides the policy loss's ratio and clip instead. Zero outside the mask; lp_T is detached.
"""

from torch import Tensor

from ascent.algos.kl import kl_estimate


def reverse_kl_loss(
    log_probs: Tensor, teacher_log_probs: Tensor, mask: Tensor, estimator: str = "k2"
) -> Tensor:
    """Per-token loss (B, T), differentiable in ``log_probs``; aggregate it like the policy
    loss (``ascent.algos.aggregation``) and weight it by the run's coefficient."""
    return kl_estimate(log_probs, teacher_log_probs, mask, estimator)
