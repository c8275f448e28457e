"""On-policy distillation: a teacher's log-probs of the student's own sampled tokens turned
into an advantage term, a loss term, or a top-k forward KL, and the metrics that say how far
the student is from the teacher. One file per term, the math in each docstring."""

from ascent.algos.distill.forward_kl_top_k import forward_kl_top_k
from ascent.algos.distill.metrics import distillation_metrics
from ascent.algos.distill.reverse_kl_advantage import reverse_kl_advantages
from ascent.algos.distill.reverse_kl_loss import reverse_kl_loss

__all__ = [
    "distillation_metrics",
    "forward_kl_top_k",
    "reverse_kl_advantages",
    "reverse_kl_loss",
]
