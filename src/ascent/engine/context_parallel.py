"""Ring context parallelism: one packed micro-batch's tokens split over the C ranks of the
mesh's ``cp`` axis, attention computed round the ring (``ascent.engine.ring_attention``),
optionally with Ulysses inside each ring rank's share (the ``sp`` axis, S ranks).

Assignment (load-balanced for causal attention): the padded sequence of N' tokens is cut
into 2C equal chunks and ring rank c takes chunks c and 2C-1-c, an early one and a late one,
so every rank attends to about as many keys. With Ulysses too, ring rank c's 2N'/2C tokens
are cut into S contiguous parts, one per sequence rank, and attention runs

    q, k, v of the rank's N'/(CS) tokens, all heads
      -> Ulysses all-to-all ->  ring rank c's tokens, H / S heads
      -> ring attention over the C ring ranks (same heads)
      -> all-to-all back    ->  the rank's tokens, all heads

Unlike Ulysses alone, the ring is not bounded by the key/value heads: with G key/value heads
there may be any number of ring ranks. Packed rows attend only within themselves (the ring
masks by row and by position). Results are gathered and the gradients scaled as
``ascent.engine.sequence_shard`` says, over all C x S ranks.
"""

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from transformers import AttentionInterface

from ascent.engine.packing import PackedSequences
from ascent.engine.ring_attention import Ring, ring_attention
from ascent.engine.sequence_shard import SequenceShard, padded_sequence, split_sequence
from ascent.engine.ulysses import heads_of, to_tokens

ATTENTION = "ascent_ring"


@dataclass(frozen=True)
class RingContext:
    """What attention needs: the ring (its ranks, and ring rank c's tokens' places and rows
    in the sequence) and, with Ulysses inside, the sequence ranks' group and size."""

    ring: Ring
    ulysses_group: Any = None
    ulysses_size: int = 1


@dataclass(frozen=True)
class SplitAxes:
    """The groups a micro-batch is split over: the ring (cp), Ulysses inside it (sp; size 1:
    none), and the whole sequence group (cp x sp, sp innermost) that gathers the results."""

    ring_group: Any
    ring_size: int
    ring_rank: int
    ulysses_group: Any
    ulysses_size: int
    ulysses_rank: int
    sequence_group: Any


def balanced_assignment(total: int, ring: int, ulysses: int) -> list[Tensor]:
    """The token indices of each of the ring x ulysses ranks (rank c S + s), ``total`` a
    multiple of 2 ring ulysses (module docstring)."""
    chunks = torch.arange(total).chunk(2 * ring)
    assignment = []
    for c in range(ring):
        tokens = torch.cat([chunks[c], chunks[2 * ring - 1 - c]])
        assignment.extend(tokens.chunk(ulysses))
    return assignment


def shard_context(layout: PackedSequences, axes: SplitAxes) -> SequenceShard:
    """This rank's share of ``layout`` (packed, (1, N)) over the ring and Ulysses ranks."""
    ring, ulysses = axes.ring_size, axes.ulysses_size
    layout = padded_sequence(layout, 2 * ring * ulysses)
    positions = layout.position_ids[0]
    assignment = [
        tokens.to(positions.device)
        for tokens in balanced_assignment(layout.num_tokens, ring, ulysses)
    ]
    rows = (positions == 0).long().cumsum(0) - 1  # every row starts at position 0
    ring_tokens = torch.cat(assignment[axes.ring_rank * ulysses : (axes.ring_rank + 1) * ulysses])
    context = RingContext(
        ring=Ring(axes.ring_group, ring, axes.ring_rank, index=ring_tokens, row=rows[ring_tokens]),
        ulysses_group=axes.ulysses_group,
        ulysses_size=ulysses,
    )
    rank = axes.ring_rank * ulysses + axes.ulysses_rank
    return split_sequence(layout, assignment, rank, axes.sequence_group, context)


def ring_attention_forward(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    *,
    sequence_split: RingContext,
    scaling: float | None = None,
    dropout: float = 0.0,
    sliding_window: int | None = None,
    softcap: float | None = None,
    **_: object,
) -> tuple[Tensor, None]:
    """transformers' attention interface (module docstring): (1, H, n, D) queries and
    (1, G, n, D) keys and values of the rank's tokens -> (1, n, H, D); a sliding-window
    layer's window is kept."""
    if dropout > 0 or softcap is not None:
        raise ValueError(
            "ring attention has no attention dropout or logit soft-cap; this model uses one: "
            "set parallel.context to 1"
        )
    context, size = sequence_split, sequence_split.ulysses_size
    if size > 1:
        query, key, value = heads_of(query, key, value, size, context.ulysses_group)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    out = ring_attention(query[0], key[0], value[0], context.ring, scale, sliding_window)[None]
    if size > 1:
        out = to_tokens(out, size, context.ulysses_group)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTENTION, ring_attention_forward)
