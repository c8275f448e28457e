"""Forward KL from a teacher's top-k log-probs, per token (the GKD / MiniLLM family's forward
KL, restricted to the k tokens the teacher returns).

At response position t the teacher gives its k most likely next tokens j_1..j_k with
log-probs lT_1..lT_k; the student's log-probs of the same tokens are lS_1..lS_k (from the
student's forward, with gradient). The teacher's mass is renormalised over its top-k,

    q_j = exp(lT_j) / sum_l exp(lT_l)
    L[i,t] = sum_j q_j (log q_j - lS_j) * m[i,t]

The student is not renormalised: since sum_j exp(lS_j) <= 1, L >= 0 with equality only when
the student gives each of the k tokens exactly q_j (all its mass on the teacher's top-k).
Its gradient is -sum_j q_j grad lS_j: cross-entropy to the teacher's distribution at every
position, a signal for tokens the student did not sample (where the reverse-KL terms only see
the sampled one). Teacher log-probs are detached; positions outside the mask are never read.
"""

import torch
from torch import Tensor

from ascent.algos.masking import as_bool


def forward_kl_top_k(
    student_top_log_probs: Tensor, teacher_top_log_probs: Tensor, mask: Tensor
) -> Tensor:
    """Per-token loss (B, T) from (B, T, k) student and teacher log-probs of the teacher's
    top-k tokens; differentiable in the student's."""
    valid = as_bool(mask)[..., None]
    zero = torch.zeros((), dtype=student_top_log_probs.dtype, device=student_top_log_probs.device)
    teacher = torch.where(valid, teacher_top_log_probs.detach(), zero)
    student = torch.where(valid, student_top_log_probs, zero)
    log_q = teacher.log_softmax(-1)
    per_token = (log_q.exp() * (log_q - student)).sum(-1)
    return torch.where(as_bool(mask), per_token, zero)
