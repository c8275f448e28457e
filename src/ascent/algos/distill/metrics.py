"""How far the student is from its teacher, on the tokens it sampled.

    reverse_kl  = mean over valid tokens of (lp_s - lp_T), the one-sample estimate of
                  KL(pi_s || pi_T) per token (can be negative on a small batch)
    agreement   = share of valid tokens where the student's sampled token is the teacher's
                  most likely one (teacher top-1)
    teacher_log_prob = mean over valid tokens of lp_T (how likely the teacher finds them)

lp_s: the log-probs of the policy that sampled (old or rollout log-probs).
"""

from torch import Tensor

from ascent.algos.masking import as_bool, masked_mean


def distillation_metrics(
    log_probs: Tensor,
    teacher_log_probs: Tensor,
    responses: Tensor,
    teacher_top_ids: Tensor,
    mask: Tensor,
) -> dict[str, float]:
    """The three metrics above from (B, T) log-probs, (B, T) sampled ids, (B, T, k) teacher
    top ids (most likely first) and the (B, T) response mask."""
    mask = as_bool(mask)
    agrees = (responses == teacher_top_ids[..., 0]).to(log_probs.dtype)
    return {
        "distill/reverse_kl": float(masked_mean(log_probs - teacher_log_probs, mask)),
        "distill/agreement": float(masked_mean(agrees, mask)),
        "distill/teacher_log_prob": float(masked_mean(teacher_log_probs, mask)),
    }
