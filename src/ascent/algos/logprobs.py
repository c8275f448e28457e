"""Per-token log-probs and entropy from logits, in row chunks, with bounded memory.

With z = logits / τ (τ the sampling temperature) and p = softmax(z):

    log p(y) = z_y - logsumexp(z)
    H(z)     = logsumexp(z) - Σ_j p_j z_j

computed in float32 (float64 when the logits are float64). For a policy with a large vocabulary
the naive ``log_softmax(logits.float() / τ)`` holds several float32 copies of [tokens x vocab]
at once, in the forward and again in the backward: at 8k tokens and Qwen2's 151,936-token
vocabulary each copy is 5 GB. Here the flattened rows are processed ``chunk_tokens`` at a time:

- forward: each chunk is cast to float32 on its own; only the inputs (in their own dtype) and
  two float32 numbers per row, logsumexp(z) and Σ p·z, are kept for the backward;
- backward: each chunk's softmax is recomputed from the saved logits and its gradient is
  written into one preallocated tensor in the logits' dtype.

Peak extra memory is therefore the gradient itself (which autograd needs anyway) plus about
two float32 [chunk_tokens x vocab] buffers, whatever the number of tokens.
``token_log_probs_and_entropy_from_hidden`` (in ``logprobs_hidden``) goes one step further and
never builds the logits of the whole batch at all.

Gradients, per row, with respect to z (the logits' gradient is these times 1/τ):

    ∂ log p(y) / ∂z_j = 1[j = y] - p_j
    ∂ H / ∂z_j        = -p_j (z_j - Σ_k p_k z_k)

The logits must be finite (a -inf logit makes p·z = 0·(-inf), as in the naive formula) and the
targets must lie in [0, vocab).
"""

from collections.abc import Callable

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable

__all__ = ["token_log_probs_and_entropy"]


def stats_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the softmax is computed in: float32, or float64 for float64 inputs."""
    return torch.promote_types(dtype, torch.float32)


def scaled_float(
    logits: Tensor, dtype: torch.dtype, temperature: float, copy: bool = True
) -> Tensor:
    """z = logits / τ as a (C, V) tensor in ``dtype`` that the caller may overwrite.

    ``copy=False`` when ``logits`` is a temporary the caller owns: it is then reused if it
    already has ``dtype``.
    """
    z = logits.to(dtype, copy=copy)
    if temperature != 1.0:
        z.div_(temperature)
    return z


def target_columns(targets: Tensor) -> Tensor:
    """Targets as (C, J) gather indices: (C,) one per row becomes (C, 1)."""
    return targets if targets.dim() == 2 else targets[:, None]


def chunk_stats(
    z: Tensor, targets: Tensor, compute_entropy: bool
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Per-row log p(y) (C,) or, for (C, J) targets, (C, J), logsumexp(z) and Σ p·z (None
    without entropy) of one (C, V) chunk.

    ``z`` is consumed: it is overwritten to save a [C x V] buffer.
    """
    target_z = z.gather(1, target_columns(targets)).view(targets.shape)
    max_z = z.amax(dim=1, keepdim=True)
    if not compute_entropy:
        sum_exp = z.sub_(max_z).exp_().sum(dim=1, keepdim=True)
        lse = (max_z + sum_exp.log()).squeeze(1)
        return target_z - lse.view(-1, *[1] * (targets.dim() - 1)), lse, None
    p = (z - max_z).exp_()
    sum_exp = p.sum(dim=1, keepdim=True)
    lse = (max_z + sum_exp.log()).squeeze(1)
    # p·z summed in place: no third [C x V] buffer.
    p_dot_z = p.div_(sum_exp).mul_(z).sum(dim=1)
    return target_z - lse.view(-1, *[1] * (targets.dim() - 1)), lse, p_dot_z


def chunk_grad_(
    z: Tensor,
    targets: Tensor,
    lse: Tensor,
    p_dot_z: Tensor | None,
    grad_lp: Tensor | None,
    grad_ent: Tensor | None,
    hits: Tensor | None = None,
) -> Tensor:
    """Turn one chunk of z (C, V) into dL/dz in place and return it.

    dL/dz_j = g_lp (1[j = y] - p_j) - g_ent p_j (z_j - Σ p·z)
            = -p_j (g_lp + g_ent (z_j - Σ p·z)) + g_lp 1[j = y]
    with p recomputed from the saved logsumexp. At least one of the row gradients is given.
    With J targets per row (``targets`` and ``grad_lp`` (C, J)) the log-prob part is the sum
    over them: -p_j Σ_k g_k + Σ_k g_k 1[j = y_k] (a token named twice is counted twice).
    ``hits`` (C,) bool: the rows whose target is among z's columns when z holds a slice of
    the vocabulary (the others get no 1[j = y] term); None: every row's is.
    """
    row_lp = None if grad_lp is None else grad_lp.view(grad_lp.shape[0], -1).sum(1)
    if grad_ent is None:
        grad = z.sub_(lse[:, None]).exp_().mul_(-row_lp[:, None])
    else:
        p = (z - lse[:, None]).exp_()
        grad = z.sub_(p_dot_z[:, None]).mul_(grad_ent[:, None])
        if row_lp is not None:
            grad.add_(row_lp[:, None])
        grad.mul_(p).neg_()
    if grad_lp is not None:
        named = grad_lp.view(grad_lp.shape[0], -1)
        named = named if hits is None else named * hits[:, None]
        grad.scatter_add_(1, target_columns(targets), named)
    return grad


def rows_of(grad: Tensor | None, dtype: torch.dtype, temperature: float) -> Tensor | None:
    """An output gradient (N,) or (N, J) in the stats dtype, times 1/τ; or None.

    dL/dlogits = dL/dz / τ, and ``chunk_grad_`` is linear in the row gradients: scaling them
    here saves a pass over every [C x V] chunk.
    """
    return None if grad is None else grad.to(dtype) / temperature


def at(rows: slice, tensor: Tensor | None) -> Tensor | None:
    """``tensor[rows]``, or None for an absent tensor."""
    return None if tensor is None else tensor[rows]


def chunked_stats(
    chunk_z: Callable[[slice], Tensor],
    targets: Tensor,
    dtype: torch.dtype,
    chunk_tokens: int,
    compute_entropy: bool,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """The forward pass over all rows: log p(y) (shaped like ``targets``: (N,) or (N, J)),
    logsumexp(z) and Σ p·z (or None), each (N,).

    ``chunk_z(rows)`` returns a fresh z = logits / τ for those rows, in ``dtype``.
    """
    n = targets.shape[0]
    log_probs = torch.empty(targets.shape, dtype=dtype, device=targets.device)
    lse = torch.empty(n, dtype=dtype, device=targets.device)
    p_dot_z = torch.empty_like(lse) if compute_entropy else None
    for start in range(0, n, chunk_tokens):
        rows = slice(start, start + chunk_tokens)
        z = chunk_z(rows)
        log_probs[rows], lse[rows], pz = chunk_stats(z, targets[rows], compute_entropy)
        del z  # before the next chunk's buffers exist: at most two [C x V] at any time
        if compute_entropy:
            p_dot_z[rows] = pz
    return log_probs, lse, p_dot_z


class _LogProbsFromLogits(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: FunctionCtx,
        logits: Tensor,
        targets: Tensor,
        temperature: float,
        chunk_tokens: int,
        compute_entropy: bool,
    ) -> tuple[Tensor, Tensor | None]:
        dtype = stats_dtype(logits.dtype)
        log_probs, lse, p_dot_z = chunked_stats(
            lambda rows: scaled_float(logits[rows], dtype, temperature),
            targets,
            dtype,
            chunk_tokens,
            compute_entropy,
        )
        ctx.save_for_backward(logits, targets, lse, p_dot_z)
        ctx.temperature, ctx.chunk_tokens = temperature, chunk_tokens
        # An unused output then arrives as None in backward instead of a zero tensor.
        ctx.set_materialize_grads(False)
        return log_probs, (lse - p_dot_z if compute_entropy else None)

    @staticmethod
    @once_differentiable
    def backward(
        ctx: FunctionCtx, grad_lp: Tensor | None, grad_ent: Tensor | None
    ) -> tuple[Tensor | None, None, None, None, None]:
        logits, targets, lse, p_dot_z = ctx.saved_tensors
        if grad_lp is None and grad_ent is None:
            return None, None, None, None, None
        chunk, temperature = ctx.chunk_tokens, ctx.temperature
        grad_lp = rows_of(grad_lp, lse.dtype, temperature)
        grad_ent = rows_of(grad_ent, lse.dtype, temperature)
        grad_logits = torch.empty_like(logits)
        for start in range(0, logits.shape[0], chunk):
            rows = slice(start, start + chunk)
            z = scaled_float(logits[rows], lse.dtype, temperature)
            grad_logits[rows] = chunk_grad_(
                z,
                targets[rows],
                lse[rows],
                at(rows, p_dot_z),
                at(rows, grad_lp),
                at(rows, grad_ent),
            )
            # Freed before the next chunk's buffers exist (z is the gradient buffer).
            del z
        return grad_logits, None, None, None, None


def check_inputs(
    scores: Tensor, targets: Tensor, temperature: float, chunk_tokens: int, many: bool = False
) -> None:
    """Shared argument checks; ``scores`` is the logits (..., V) or hidden states (..., H).
    ``many``: targets may also be (..., J), J tokens per row."""
    if scores.shape[:-1] != targets.shape and not (
        many and targets.dim() >= 1 and scores.shape[:-1] == targets.shape[:-1]
    ):
        per_row = "one target token per row, or J of them as (..., J)" if many else "one per row"
        raise ValueError(
            f"targets {tuple(targets.shape)} must match the leading dims of "
            f"{tuple(scores.shape)} ({per_row})"
        )
    if not targets.dtype == torch.int64:
        raise TypeError(f"targets must be int64 token ids, got {targets.dtype}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")


def token_log_probs_and_entropy(
    logits: Tensor,
    targets: Tensor,
    *,
    temperature: float = 1.0,
    chunk_tokens: int = 1024,
    compute_entropy: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """log p(targets) and entropy of softmax(logits / τ), chunked over tokens.

    Args:
        logits: (..., V) in any float dtype (bf16, fp16, fp32, fp64); may require grad. Leading
            dims that cannot be flattened as a view (e.g. ``logits[:, :-1]`` of a (B, T, V)
            tensor) cost one copy in the logits' dtype: slice the hidden states instead.
        targets: (...) int64 token ids in [0, V).
        temperature: τ, the sampling temperature the logits are divided by.
        chunk_tokens: rows cast to float32 at a time; peak extra memory is about
            2 x chunk_tokens x V x 4 bytes on top of the logits' gradient.
        compute_entropy: when False the entropy is None and is not computed.

    Returns:
        log_probs (...) and entropy (...) (or None), float32 (float64 for float64 logits).
        Both are differentiable with respect to the logits (the entropy bonus is trained).
    """
    check_inputs(logits, targets, temperature, chunk_tokens)
    log_probs, entropy = _LogProbsFromLogits.apply(
        logits.reshape(-1, logits.shape[-1]),
        targets.reshape(-1),
        float(temperature),
        chunk_tokens,
        compute_entropy,
    )
    entropy = None if entropy is None else entropy.view(targets.shape)
    return log_probs.view(targets.shape), entropy
