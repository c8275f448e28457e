"""Per-token log-probs and entropy straight from the final hidden states (fused lm_head).

The same quantities as ``ascent.algos.logprobs`` (z = (hidden @ Wᵀ + b) / τ, log p(y) =
z_y - logsumexp(z), H = logsumexp(z) - Σ p·z), but the logits of the whole batch never exist:
each chunk of ``chunk_tokens`` rows computes its own logits in the compute dtype, reduces them
to per-row statistics, and drops them. The backward recomputes each chunk's logits and
softmax and turns the chunk's logit gradient G_c (C, V) into

    dL/dhidden_c = G_c W        (written into a preallocated (N, H) tensor)
    dL/dW       += G_cᵀ hidden_c
    dL/db       += Σ_rows G_c

Saved for backward: hidden, W, b, targets (by reference) and two float32 numbers per row.
Peak extra memory, besides the gradients themselves: about two float32 [chunk_tokens x V]
buffers plus one [chunk_tokens x V] buffer in the compute dtype; for a bf16/fp16 weight also a
float32 accumulator the size of W and each chunk's G_cᵀ hidden_c in the weight's dtype (the
weight gradient is summed over chunks in float32 so that it is rounded to the weight's dtype
once, as a single matmul over all tokens would be).

A model that soft-caps its logits (Gemma's ``final_logit_softcapping`` c) gives
z = c tanh(l / c) / τ with l = hidden @ Wᵀ + b; the backward then multiplies each chunk's
gradient by dz/dl · τ = 1 - tanh²(l / c), recomputed with the chunk's logits.

This is what the training engine uses on the final hidden states.
"""

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable

from ascent.algos.logprobs import (
    at,
    check_inputs,
    chunk_grad_,
    chunked_stats,
    rows_of,
    scaled_float,
    stats_dtype,
)

__all__ = ["token_log_probs_and_entropy_from_hidden"]


def scaled_chunk_logits(
    hidden: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    dtype: torch.dtype,
    temperature: float,
    softcap: float | None = None,
) -> tuple[Tensor, Tensor | None]:
    """z = (hidden @ Wᵀ + b) / τ for one chunk, upcast to ``dtype``; (C, V), owned by the
    caller. With a ``softcap`` c the logits l become c tanh(l / c) first, and the slope
    1 - tanh²(l / c) (C, V) comes back too (else None).

    The compute-dtype logits are dropped on return, before the softmax buffer is allocated.
    """
    logits = F.linear(hidden, weight, bias)
    if softcap is None:
        return scaled_float(logits, dtype, temperature, copy=False), None
    turned = torch.tanh(logits.to(dtype).div_(softcap))
    slope = 1 - turned.square()
    return scaled_float(turned.mul_(softcap), dtype, temperature, copy=False), slope


class _LogProbsFromHidden(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: FunctionCtx,
        hidden: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        targets: Tensor,
        temperature: float,
        chunk_tokens: int,
        compute_entropy: bool,
        softcap: float | None,
    ) -> tuple[Tensor, Tensor | None]:
        dtype = stats_dtype(hidden.dtype)
        log_probs, lse, p_dot_z = chunked_stats(
            lambda rows: scaled_chunk_logits(
                hidden[rows], weight, bias, dtype, temperature, softcap
            )[0],
            targets,
            dtype,
            chunk_tokens,
            compute_entropy,
        )
        ctx.save_for_backward(hidden, weight, bias, targets, lse, p_dot_z)
        ctx.temperature, ctx.chunk_tokens, ctx.softcap = temperature, chunk_tokens, softcap
        ctx.set_materialize_grads(False)
        return log_probs, (lse - p_dot_z if compute_entropy else None)

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad_lp: Tensor | None, grad_ent: Tensor | None) -> tuple:
        hidden, weight, bias, targets, lse, p_dot_z = ctx.saved_tensors
        need_hidden, need_weight, need_bias = ctx.needs_input_grad[:3]
        if grad_lp is None and grad_ent is None:
            return (None,) * 8
        chunk, temperature = ctx.chunk_tokens, ctx.temperature
        grad_lp = rows_of(grad_lp, lse.dtype, temperature)
        grad_ent = rows_of(grad_ent, lse.dtype, temperature)
        grad_hidden = torch.empty_like(hidden) if need_hidden else None
        # Summed over chunks in float32 (see the module docstring); cast once at the end.
        grad_weight = torch.zeros_like(weight, dtype=lse.dtype) if need_weight else None
        grad_bias = torch.zeros_like(bias, dtype=lse.dtype) if need_bias else None
        for start in range(0, hidden.shape[0], chunk):
            rows = slice(start, start + chunk)
            z, slope = scaled_chunk_logits(
                hidden[rows], weight, bias, lse.dtype, temperature, ctx.softcap
            )
            grad_z = chunk_grad_(
                z,
                targets[rows],
                lse[rows],
                at(rows, p_dot_z),
                at(rows, grad_lp),
                at(rows, grad_ent),
            )
            if slope is not None:  # through the cap: dl = dz * τ(dz/dl) = dz (1 - tanh²)
                grad_z.mul_(slope)
                del slope
            if need_bias:
                grad_bias += grad_z.sum(dim=0)
            # The two matmuls run in the compute dtype, like the forward's.
            grad_logits = grad_z.to(hidden.dtype)
            del z, grad_z
            if need_hidden:
                grad_hidden[rows] = grad_logits @ weight
            if need_weight and grad_weight.dtype == hidden.dtype:
                grad_weight.addmm_(grad_logits.T, hidden[rows])
            elif need_weight:
                grad_weight += grad_logits.T @ hidden[rows]
            del grad_logits  # before the next chunk's buffers exist
        return (
            grad_hidden,
            None if grad_weight is None else grad_weight.to(weight.dtype),
            None if grad_bias is None else grad_bias.to(bias.dtype),
            None,
            None,
            None,
            None,
            None,
        )


def token_log_probs_and_entropy_from_hidden(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    *,
    bias: Tensor | None = None,
    temperature: float = 1.0,
    chunk_tokens: int = 1024,
    compute_entropy: bool = True,
    softcap: float | None = None,
) -> tuple[Tensor, Tensor | None]:
    """log p(targets) and entropy of softmax((hidden @ Wᵀ + b) / τ), never building all logits.

    Args:
        hidden: (..., H) final hidden states, in the compute dtype (bf16, fp16, fp32, fp64).
        weight: (V, H) lm_head weight, same dtype as ``hidden``.
        targets: (...) int64 token ids in [0, V), or (..., J): J tokens scored per row (the
            sampled token and a teacher's top-k, for distillation); log_probs is then
            (..., J), each differentiable, and the entropy stays (...).
        bias: optional (V,) lm_head bias.
        temperature: τ, the sampling temperature the logits are divided by.
        chunk_tokens: rows whose logits exist at a time.
        compute_entropy: when False the entropy is None and is not computed.
        softcap: c, where the model soft-caps its logits to c tanh(l / c) before the
            temperature (Gemma's ``final_logit_softcapping``); None: no cap.

    Returns:
        log_probs (...) and entropy (...) (or None), float32 (float64 for float64 inputs),
        differentiable with respect to hidden, weight and bias.
    """
    check_inputs(hidden, targets, temperature, chunk_tokens, many=True)
    rows = hidden.shape[:-1]
    if weight.dim() != 2 or weight.shape[1] != hidden.shape[-1]:
        raise ValueError(
            f"weight {tuple(weight.shape)} must be (vocab, {hidden.shape[-1]}) for hidden "
            f"{tuple(hidden.shape)}"
        )
    log_probs, entropy = _LogProbsFromHidden.apply(
        hidden.reshape(-1, hidden.shape[-1]),
        weight,
        bias,
        targets.reshape(-1) if targets.shape == rows else targets.reshape(-1, targets.shape[-1]),
        float(temperature),
        chunk_tokens,
        compute_entropy,
        softcap,
    )
    entropy = None if entropy is None else entropy.view(rows)
    return log_probs.view(targets.shape), entropy
