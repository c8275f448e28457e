"""DAPO's overlong reward shaping and overlong filtering (arXiv:2503.14476).

With maximum response length L and buffer Lb, a response of |y| tokens is penalised

    0                               for |y| <= L - Lb
    ((L - Lb) - |y|) / Lb * factor  for L - Lb < |y| <= L   (linear, down to -factor at L)

added to its score. Responses cut off at the limit can instead (or also) be removed from the
loss with ``mask_truncated``.
"""

import torch
from torch import Tensor


def overlong_penalty(
    lengths: Tensor, *, max_length: int, buffer_length: int, factor: float = 1.0
) -> Tensor:
    """Soft overlong penalty (<= 0) per response; lengths (B,) -> (B,) float."""
    if not 0 < buffer_length <= max_length:
        raise ValueError(
            f"overlong buffer_length must be in (0, max_length={max_length}], got {buffer_length}"
        )
    start = max_length - buffer_length
    excess = lengths.float() - start
    return torch.where(excess > 0, -excess / buffer_length * factor, 0.0)


def mask_truncated(response_mask: Tensor, truncated: Tensor) -> Tensor:
    """The response mask with every token of truncated responses (B,) bool zeroed."""
    return response_mask * (~truncated.bool()).unsqueeze(-1).to(response_mask.dtype)
