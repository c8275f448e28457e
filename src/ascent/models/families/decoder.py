"""A family's decoder as the native engine reads it: embedding, rotary positions, layers,
final norm, output head. A family's ``read(model)`` returns a ``Decoder`` whose pieces hold
the model's own parameters (``ascent.models.families.blocks``).

A layer is ``DecoderBlock``: the four places a family may put a norm around its two halves,

    hidden = hidden + post_attention(attention(pre_attention(hidden)))
    hidden = hidden + post_feed_forward(feed_forward(pre_feed_forward(hidden)))

Llama and Qwen norm before each half (``pre_*``); OLMo 2 after each (``post_*``); Gemma 2/3
both. A place without a norm holds ``NO_NORM``.
"""

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor

from ascent.models.families.attention import Attend, Attention, CacheShape
from ascent.models.families.blocks import NO_NORM, AnyNorm, Norm, Rotations
from ascent.models.families.feed_forward import FeedForward

RouteSink = Callable[[Tensor], None]  # a sparse layer's experts (tokens, k) -> None


@dataclass(frozen=True)
class DecoderBlock:
    attention: Attention
    feed_forward: FeedForward
    pre_attention: AnyNorm = NO_NORM
    post_attention: AnyNorm = NO_NORM
    pre_feed_forward: AnyNorm = NO_NORM
    post_feed_forward: AnyNorm = NO_NORM

    def __call__(
        self, hidden: Tensor, rotations: Rotations, attend: Attend, remember: RouteSink | None
    ) -> Tensor:
        """hidden (B, T, H) through the layer; ``remember(experts)`` gets a mixture of
        experts' choices (tokens of B x T, k) when given."""
        attended = self.attention(self.pre_attention(hidden), rotations, attend)
        hidden = hidden + self.post_attention(attended)
        out, experts = self.feed_forward.with_routes(self.pre_feed_forward(hidden))
        if experts is not None and remember is not None:
            remember(experts)
        return hidden + self.post_feed_forward(out)


@dataclass(frozen=True)
class Decoder:
    """``embed(ids (B, T)) -> (B, T, H)``: the model's own embedding module (a family's
    embedding scale included, as Gemma's module applies it); ``rotary(hidden, positions)``:
    the rotations every layer picks its own from (positions (B, T), or (3, B, T) for
    M-RoPE); ``head`` (V, H), the output projection (the embedding itself when tied);
    ``final_softcap``: logits become cap * tanh(logits / cap) (Gemma; None: as they are)."""

    embed: Callable[[Tensor], Tensor]
    rotary: Callable[[Tensor, Tensor], Rotations]
    layers: list[DecoderBlock]
    final_norm: Norm
    head: Tensor
    final_softcap: float | None = None

    @property
    def cache(self) -> CacheShape:
        """What every layer caches per position; ValueError where layers differ (the paged
        cache holds one shape for all)."""
        shapes = {layer.attention.cache for layer in self.layers}
        if len(shapes) != 1:
            raise ValueError(f"layers cache different shapes ({sorted(map(str, shapes))})")
        return shapes.pop()
