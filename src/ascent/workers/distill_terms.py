"""The actor's distillation loss terms for one micro-batch, from the teacher's batch fields
(``teacher_log_probs`` (B, R); ``teacher_top_ids``, ``teacher_top_log_probs`` (B, R, k)):
the per-token reverse KL and the top-k forward KL of ``ascent.algos.distill``."""

import torch
from torch import Tensor

from ascent.algos.distill import forward_kl_top_k, reverse_kl_loss
from ascent.batch import Batch
from ascent.engine.packing import PackedSequences
from ascent.workers.config import DistillLossSettings


def teacher_targets(micro: Batch, layout: PackedSequences, device: torch.device) -> Tensor:
    """(M, 1 + k) token ids each query scores: its sampled token, then the teacher's top-k
    at the same response position."""
    top = micro["teacher_top_ids"].to(device)[layout.rows, layout.columns]
    return torch.cat([layout.targets[:, None], top], dim=1)


def distillation_terms(
    settings: DistillLossSettings | None,
    micro: Batch,
    log_probs: Tensor,
    student_top: Tensor | None,
    mask: Tensor,
) -> dict[str, tuple[float, Tensor]]:
    """The named (coefficient, per-token loss (B, R)) terms ``actor_objective`` adds."""
    if settings is None:
        return {}
    terms = {}
    device = log_probs.device
    if settings.reverse_kl_coef > 0:
        teacher = micro["teacher_log_probs"].to(device)
        per_token = reverse_kl_loss(log_probs, teacher, mask, settings.reverse_kl_estimator)
        terms["distill_reverse_kl_loss"] = (settings.reverse_kl_coef, per_token)
    if settings.forward_kl_top_k_coef > 0 and student_top is not None:
        teacher_top = micro["teacher_top_log_probs"].to(device)
        per_token = forward_kl_top_k(student_top, teacher_top, mask)
        terms["distill_forward_kl_top_k"] = (settings.forward_kl_top_k_coef, per_token)
    return terms
