"""The small pieces a family's decoder is built from: norms, activations, rotations.

Every piece holds the model's own ``Parameter`` objects, never copies or views of them, and
reads them when called: a weight refresh that replaces a parameter's data (a copy, or an
alias of the trainer's tensor) is seen by the next call. Anything derived from a weight (a
fused projection's split, Gemma's 1 + w) is therefore computed at call time.

Their matrix products go through ``linear``: ``F.linear``, unless the engine running a pass
gives a faster form of it for the pass (``linears``: a CPU engine's prepacked weights, which
it rebuilds when the weights change).
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

Linear = tuple[Tensor, Tensor | None]  # (weight (out, in), bias (out,) or None)
LinearImplementation = Callable[[Tensor, Tensor, Tensor | None], Tensor]
_LINEAR: ContextVar[LinearImplementation] = ContextVar("ascent_linear", default=F.linear)


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x @ weight^T + bias, as the pass running now computes it (``linears``)."""
    return _LINEAR.get()(x, weight, bias)


@contextmanager
def linears(implementation: LinearImplementation) -> Iterator[None]:
    """Within the block, the pieces' ``linear`` is ``implementation`` (same results up to
    rounding: F.linear's contract)."""
    token = _LINEAR.set(implementation)
    try:
        yield
    finally:
        _LINEAR.reset(token)


def linear_of(module: nn.Module) -> Linear:
    return module.weight, module.bias


def project(x: Tensor, weights: Linear) -> Tensor:
    return linear(x, *weights)


@dataclass(frozen=True)
class Norm:
    """An RMSNorm as transformers computes it, in float32:

        y = x / sqrt(mean(x^2) + eps) * (offset + w)

    ``offset`` is 1 for Gemma (weights stored centred on 0); ``scale_in_float``: the weight
    multiplies in float32 before the cast back to x's dtype (OLMo 2, Gemma), rather than
    after it (Llama). The two agree in float32."""

    weight: Tensor
    eps: float
    offset: float = 0.0
    scale_in_float: bool = False

    @classmethod
    def of(cls, module: nn.Module, **variant: object) -> "Norm":
        eps = getattr(module, "variance_epsilon", getattr(module, "eps", 1e-6))
        return cls(module.weight, eps, **variant)

    def __call__(self, x: Tensor) -> Tensor:
        if x.dtype == torch.float32 and self.weight.dtype == torch.float32:
            # torch's fused kernel: one op instead of seven
            weight = self.weight + self.offset if self.offset else self.weight
            return F.rms_norm(x, (x.shape[-1],), weight, self.eps)
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        weight = self.weight.float() + self.offset if self.offset else self.weight
        if self.scale_in_float:
            return (normed * weight).to(x.dtype)
        return weight * normed.to(x.dtype)


class Identity:
    """Where a family has no norm (OLMo 2 before attention, Llama after it)."""

    def __call__(self, x: Tensor) -> Tensor:
        return x


NO_NORM = Identity()
AnyNorm = Norm | Identity

ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "silu": F.silu,
    "swish": F.silu,
    "gelu": F.gelu,
    "gelu_pytorch_tanh": partial(F.gelu, approximate="tanh"),
    "gelu_new": partial(F.gelu, approximate="tanh"),
}


def activation(name: str) -> Callable[[Tensor], Tensor]:
    """The activation a config names (``hidden_act``); ValueError for one the engine lacks."""
    if name not in ACTIVATIONS:
        raise ValueError(
            f"activation {name!r} is not one the native engine computes ({', '.join(ACTIVATIONS)})"
        )
    return ACTIVATIONS[name]


# -- rotary positions -------------------------------------------------------------------------


@dataclass(frozen=True)
class HalfRotation:
    """RoPE in the rotate-half layout: x * cos + rotate_half(x) * sin, rotate_half(x) =
    (-x2, x1), over the first R dimensions of each head (R = the tables' width; the rest
    pass unrotated: partial rotary, Phi-3). Tables (B, 1, T, R); sin is stored with its
    first half negated, so that rotate_half is one roll: (x2, x1) * (-sin1, sin2)."""

    cos: Tensor
    signed_sin: Tensor

    @classmethod
    def of(cls, cos: Tensor, sin: Tensor) -> "HalfRotation":
        """From the model's own cos/sin (B, T, R)."""
        half = sin.shape[-1] // 2
        signed = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)
        return cls(cos.unsqueeze(1), signed.unsqueeze(1))

    def __call__(self, x: Tensor) -> Tensor:
        """x (B, heads, T, D) rotated."""
        rotary = self.cos.shape[-1]
        if rotary == x.shape[-1]:
            return x * self.cos + x.roll(rotary // 2, dims=-1) * self.signed_sin
        turned, kept = x[..., :rotary], x[..., rotary:]
        rotated = turned * self.cos + turned.roll(rotary // 2, dims=-1) * self.signed_sin
        return torch.cat((rotated, kept), dim=-1)


@dataclass(frozen=True)
class PairRotation:
    """RoPE over interleaved pairs (x0, x1), (x2, x3), ... (DeepSeek's ``rope_interleave``):
    pair i turns by the angle of frequency i, and the result is laid out de-interleaved,
    (x_even * cos - x_odd * sin, x_odd * cos + x_even * sin), as transformers lays it out
    (queries and keys alike, so their dot products are those of the interleaved rotation).
    Tables (B, 1, T, R / 2): the first half of the model's cos/sin."""

    cos: Tensor
    sin: Tensor

    @classmethod
    def of(cls, cos: Tensor, sin: Tensor) -> "PairRotation":
        half = cos.shape[-1] // 2
        return cls(cos[..., :half].unsqueeze(1), sin[..., :half].unsqueeze(1))

    def __call__(self, x: Tensor) -> Tensor:
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.cat((even * self.cos - odd * self.sin, odd * self.cos + even * self.sin), -1)


Rotation = HalfRotation | PairRotation
Rotations = dict[str, Rotation]  # a family's rotations by kind (one kind but for Gemma 3)
DEFAULT_ROTATION = "default"


def model_rotary(rotary_emb: nn.Module, style: type = HalfRotation) -> Callable:
    """A family's rotations from the model's own rotary module: every RoPE scaling variant
    the module implements (linear, dynamic, YaRN, Llama 3, M-RoPE sections) is reproduced
    exactly, since it computes the tables."""

    def rotations(hidden: Tensor, positions: Tensor) -> Rotations:
        cos, sin = rotary_emb(hidden, positions)
        return {DEFAULT_ROTATION: style.of(cos, sin)}

    return rotations
