"""A frozen model's log-probs of target tokens and its top-k next tokens, from final hidden
states, without building the logits of the whole batch (a teacher's scoring pass).

With z = (hidden @ Wᵀ + b) / τ per row (soft-capped first where the model caps its logits, as
``logprobs_hidden`` does): log p(y) = z_y - logsumexp(z) for the target y, and the k largest
z_j - logsumexp(z) with their ids, most likely first. Only ids below ``vocab_limit`` are
candidates for the top-k (a teacher whose head is padded past the student's vocabulary never
names a token the student cannot score); the softmax still spans the whole head. No gradient.
"""

import torch
from torch import Tensor

from ascent.algos.logprobs import stats_dtype
from ascent.algos.logprobs_hidden import scaled_chunk_logits


@torch.no_grad()
def top_log_probs_from_hidden(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    k: int,
    *,
    bias: Tensor | None = None,
    temperature: float = 1.0,
    chunk_tokens: int = 1024,
    softcap: float | None = None,
    vocab_limit: int | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """(N, H) hidden states and (N,) targets -> log p(targets) (N,), top ids (N, k) int64
    and their log-probs (N, k), float32 (float64 for float64 inputs)."""
    dtype = stats_dtype(hidden.dtype)
    n = targets.shape[0]
    log_probs = torch.empty(n, dtype=dtype, device=hidden.device)
    top_ids = torch.empty(n, k, dtype=torch.long, device=hidden.device)
    top_log_probs = torch.empty(n, k, dtype=dtype, device=hidden.device)
    for start in range(0, n, chunk_tokens):
        rows = slice(start, start + chunk_tokens)
        z = scaled_chunk_logits(hidden[rows], weight, bias, dtype, temperature, softcap)[0]
        lse = z.logsumexp(-1, keepdim=True)
        log_probs[rows] = (z.gather(1, targets[rows, None]) - lse).squeeze(1)
        values, ids = z[:, :vocab_limit].topk(k, dim=-1)
        top_ids[rows], top_log_probs[rows] = ids, values - lse
        del z
    return log_probs, top_ids, top_log_probs
