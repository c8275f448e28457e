"""Masked reductions shared by every estimator and loss.

Convention for every function in ``ascent.algos``: a mask is (B, T) bool or {0, 1}; values
outside the mask are never read, so NaN or garbage there cannot reach a result or a gradient.
This is done by *selecting* (``torch.where``) rather than multiplying: ``NaN * 0`` is NaN, and
``where`` applied after a computation would still send NaN into the backward pass.
"""

import torch
from torch import Tensor

EPS = 1e-8


def as_bool(mask: Tensor) -> Tensor:
    """Mask as a bool tensor (accepts bool or any numeric 0/1 dtype)."""
    return mask if mask.dtype == torch.bool else mask != 0


def keep_valid(x: Tensor, mask: Tensor, fill: float = 0.0) -> Tensor:
    """``x`` where the mask is set, ``fill`` elsewhere (the masked values are never read).

    Call this on every input before computing with it: the gradient that flows back to the
    masked positions of ``x`` is then exactly zero.
    """
    return torch.where(as_bool(mask), x, torch.as_tensor(fill, dtype=x.dtype, device=x.device))


def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """sum(x * m) over ``dim`` (all elements when None)."""
    valid = keep_valid(x, mask)
    return valid.sum() if dim is None else valid.sum(dim=dim)


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """sum(x * m) / (sum(m) + 1e-8) over ``dim`` (all elements when None); 0 for an empty mask."""
    count = as_bool(mask).sum() if dim is None else as_bool(mask).sum(dim=dim)
    return masked_sum(x, mask, dim) / (count + EPS)


def masked_var(x: Tensor, mask: Tensor, unbiased: bool = True) -> Tensor:
    """Variance over all masked-in elements (two-pass). Unbiased uses n / (n - 1) with n >= 2."""
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    if unbiased:
        count = as_bool(mask).sum()
        var = var * count / (count - 1).clamp(min=1)
    return var


def masked_whiten(x: Tensor, mask: Tensor) -> Tensor:
    """(x - mean) * rsqrt(var + 1e-8), mean and unbiased var over all masked-in elements.

    With fewer than 2 valid elements the variance is undefined and the result is x - mean.
    The output is zero outside the mask.
    """
    x = keep_valid(x, mask)
    mean = masked_mean(x, mask)
    centered = x - mean
    whitened = centered * torch.rsqrt(masked_var(x, mask) + EPS)
    result = torch.where(as_bool(mask).sum() >= 2, whitened, centered)
    return keep_valid(result, mask)


def at_least_float32(x: Tensor) -> Tensor:
    """``x`` in float32, or in its own dtype if that is wider (float64 stays float64)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))
