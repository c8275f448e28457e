"""Log-probs and entropy from a head split by vocabulary rows over the tensor ranks (loss
parallelism): the logits of the whole vocabulary never exist on any rank.

Rank t holds rows [o_t, o_t + V_t) of the head W (V, H) (torch.chunk's split: ceil(V / T)
rows per rank, fewer on the last) and every rank holds the same hidden states (M, H). For
each chunk of C rows, with z = (h Wᵀ + b) / τ restricted to the rank's columns (soft-capped
first where the model caps):

    m      = max_t max_j z_tj                         (all-reduce max; no gradient flows)
    S      = Σ_t Σ_j exp(z_tj - m)                    (all-reduce sum, one message with the
    z_y    = Σ_t z_ty 1[y in rank t's rows]            next two)
    Σ e z  = Σ_t Σ_j exp(z_tj - m) z_tj               (entropy only)
    lse    = m + log S,  log p(y) = z_y - lse,  H = lse - Σ e z / S

which are the unsplit head's numbers (``ascent.algos.logprobs_hidden``) up to the order of
the sums. Every rank then holds the same (M,) results and computes the same loss. The
backward recomputes each chunk's logits: dL/dz on the rank's columns needs only lse and
Σ p z (``chunk_grad_`` with the rows whose target the rank holds), giving the rank's rows
of dL/dW and its part of dL/dh = Σ_t G_t W_t, summed over the ranks by one all-reduce.
"""

import math

import torch
import torch.distributed as dist
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable
from torch.distributed.tensor import DTensor, Shard

from ascent.algos.logprobs import at, chunk_grad_, rows_of, stats_dtype
from ascent.algos.logprobs_hidden import scaled_chunk_logits


def vocabulary_split(weight: Tensor) -> DTensor | None:
    """``weight`` when it is split by rows over exactly one mesh axis (the tp axis), else
    None (a whole head)."""
    if isinstance(weight, DTensor) and tuple(weight.placements) == (Shard(0),):
        return weight
    return None


class _VocabParallelLogProbs(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: FunctionCtx,
        hidden: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        targets: Tensor,
        offset: int,
        group: object,
        temperature: float,
        chunk_tokens: int,
        compute_entropy: bool,
        softcap: float | None,
    ) -> tuple[Tensor, Tensor | None]:
        dtype = stats_dtype(hidden.dtype)
        local = targets - offset
        hits = (local >= 0) & (local < weight.shape[0])
        local = local.clamp(0, max(weight.shape[0] - 1, 0))
        n = targets.shape[0]
        lse = torch.empty(n, dtype=dtype, device=hidden.device)
        log_probs = torch.empty_like(lse)
        p_dot_z = torch.empty_like(lse) if compute_entropy else None
        for start in range(0, n, chunk_tokens):
            rows = slice(start, start + chunk_tokens)
            z = scaled_chunk_logits(hidden[rows], weight, bias, dtype, temperature, softcap)[0]
            top = z.amax(dim=1) if z.shape[1] else z.new_full((z.shape[0],), -math.inf)
            dist.all_reduce(top, op=dist.ReduceOp.MAX, group=group)
            target_z = z.gather(1, local[rows, None]).squeeze(1).where(hits[rows], 0.0)
            e = (z - top[:, None]).exp_()
            sums = [e.sum(dim=1), target_z]
            if compute_entropy:
                sums.append(e.mul_(z).sum(dim=1))  # Σ exp(z - m) z, in e's buffer
            totals = torch.stack(sums)
            dist.all_reduce(totals, group=group)
            lse[rows] = top + totals[0].log()
            log_probs[rows] = totals[1] - lse[rows]
            if compute_entropy:
                p_dot_z[rows] = totals[2] / totals[0]
            del z, e
        ctx.save_for_backward(hidden, weight, bias, local, hits, lse, p_dot_z)
        ctx.settings = (group, temperature, chunk_tokens, softcap)
        ctx.set_materialize_grads(False)
        return log_probs, (lse - p_dot_z if compute_entropy else None)

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad_lp: Tensor | None, grad_ent: Tensor | None) -> tuple:
        hidden, weight, bias, local, hits, lse, p_dot_z = ctx.saved_tensors
        group, temperature, chunk, softcap = ctx.settings
        nothing = (None,) * 7
        if grad_lp is None and grad_ent is None:
            return (None, None, None, *nothing)
        grad_lp = rows_of(grad_lp, lse.dtype, temperature)
        grad_ent = rows_of(grad_ent, lse.dtype, temperature)
        grad_hidden = torch.zeros_like(hidden)
        grad_weight = torch.zeros_like(weight, dtype=lse.dtype)
        grad_bias = None if bias is None else torch.zeros_like(bias, dtype=lse.dtype)
        for start in range(0, hidden.shape[0], chunk):
            rows = slice(start, start + chunk)
            z, slope = scaled_chunk_logits(
                hidden[rows], weight, bias, lse.dtype, temperature, softcap
            )
            grad_z = chunk_grad_(
                z,
                local[rows],
                lse[rows],
                at(rows, p_dot_z),
                at(rows, grad_lp),
                at(rows, grad_ent),
                hits=hits[rows],
            )
            if slope is not None:  # through the cap, as the unsplit head
                grad_z.mul_(slope)
            if grad_bias is not None:
                grad_bias += grad_z.sum(dim=0)
            grad_logits = grad_z.to(hidden.dtype)
            grad_hidden[rows] = grad_logits @ weight
            grad_weight += (grad_logits.T @ hidden[rows]).to(lse.dtype)
            del z, grad_z, grad_logits, slope
        dist.all_reduce(grad_hidden, group=group)  # h is every rank's: Σ_t G_t W_t
        return (
            grad_hidden,
            grad_weight.to(weight.dtype),
            None if grad_bias is None else grad_bias.to(bias.dtype),
            *nothing,
        )


def vocab_parallel_log_probs_and_entropy(
    hidden: Tensor,
    weight: DTensor,
    targets: Tensor,
    *,
    bias: Tensor | None = None,
    temperature: float = 1.0,
    chunk_tokens: int = 1024,
    compute_entropy: bool = True,
    softcap: float | None = None,
) -> tuple[Tensor, Tensor | None]:
    """hidden (M, H) (the same on every tensor rank), ``weight`` (V, H) a DTensor split by
    rows (``vocabulary_split``), ``bias`` (V,) split likewise or None, targets (M,) ->
    log p(target) (M,) and entropy (M,) or None, in float32 (module docstring). The
    gradients reach the rank's rows of W and b (its shard's gradient) and all of h."""
    if targets.dim() != 1:
        raise ValueError(
            "several targets per token (a teacher's top-k) are not scored on a head split "
            "over parallel.tensor ranks yet; set parallel.tensor=1"
        )
    mesh = weight.device_mesh
    rows_per_rank = -(-weight.shape[0] // mesh.size())
    offset = min(mesh.get_local_rank() * rows_per_rank, weight.shape[0])
    local_bias = bias.to_local() if isinstance(bias, DTensor) else bias
    return _VocabParallelLogProbs.apply(
        hidden,
        weight.to_local(),
        local_bias,
        targets,
        offset,
        mesh.get_group(),
        temperature,
        chunk_tokens,
        compute_entropy,
        softcap,
    )
