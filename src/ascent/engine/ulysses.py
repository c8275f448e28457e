"""Ulysses sequence parallelism: one packed micro-batch's tokens split over the P ranks of
the mesh's ``sp`` axis, attention heads exchanged around attention by all-to-all.

The packed sequence (1, N) (rows end to end, positions restarting at 0 per row; see
``ascent.engine.packing``) is padded to N' = P ceil(N / P) with a separate row of filler
tokens, and rank r runs every layer on tokens [r n, (r+1) n), n = N' / P. Everything but
attention acts token by token, so it needs nothing from other ranks. Attention does:

    q (1, H, n, D), k, v (1, G, n, D)    this rank's tokens, every head
      -> all-to-all ->  (1, H/P, N', D)  every token, this rank's H/P heads
      -> attention within each row (causal, row by row: no N' x N' mask)
      -> all-to-all ->  (1, H, n, D)     back to this rank's tokens

With G key/value heads (GQA) and G < P, each is repeated P/G times first, so each rank gets
the one key/value head its query heads read; otherwise G/P key/value heads per rank.

A rank then computes the log-probs (or values) of the queries among its own tokens only
(the chunked head runs on its share), gathered as ``ascent.engine.sequence_shard`` says.
"""

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import AttentionInterface

from ascent.distributed import all_to_all
from ascent.engine.packing import PackedSequences
from ascent.engine.sequence_shard import SequenceShard, padded_sequence, split_sequence

ATTENTION = "ascent_ulysses"


@dataclass(frozen=True)
class UlyssesContext:
    """What attention needs beyond its own inputs: the sp group, and where each row of the
    whole packed sequence is."""

    group: Any
    size: int
    spans: list[tuple[int, int]]  # [start, end) of each row in the padded sequence, in order


def shard_sequence(layout: PackedSequences, group: Any, size: int, rank: int) -> SequenceShard:
    """Rank ``rank``'s share of ``layout`` (a packed layout, (1, N)) over ``size`` ranks:
    contiguous parts of the padded sequence (``ascent.engine.sequence_shard``)."""
    layout = padded_sequence(layout, size)
    total = layout.num_tokens
    share = total // size
    positions = layout.position_ids[0]
    starts = (positions == 0).nonzero(as_tuple=True)[0].tolist()  # every row starts at 0
    spans = list(zip(starts, [*starts[1:], total], strict=True))
    assignment = list(torch.arange(total, device=positions.device).split(share))
    context = UlyssesContext(group=group, size=size, spans=spans)
    return split_sequence(layout, assignment, rank, group, context)


def to_heads(x: Tensor, size: int, group: Any) -> Tensor:
    """(1, H, n, D) this rank's tokens -> (1, H/P, P n, D) this rank's heads."""
    _, heads, tokens, dim = x.shape
    parts = x.reshape(size, heads // size, tokens, dim)  # part j: the heads rank j keeps
    received = all_to_all(parts, [1] * size, [1] * size, group)  # from rank i: its tokens
    return received.transpose(0, 1).reshape(1, heads // size, size * tokens, dim)


def to_tokens(x: Tensor, size: int, group: Any) -> Tensor:
    """(1, H/P, P n, D) this rank's heads -> (1, H, n, D) this rank's tokens."""
    _, heads, total, dim = x.shape
    parts = x.reshape(heads, size, total // size, dim).transpose(0, 1)  # part j: rank j's
    received = all_to_all(parts, [1] * size, [1] * size, group)  # from rank i: heads i
    return received.reshape(1, size * heads, total // size, dim)


def heads_of(
    query: Tensor, key: Tensor, value: Tensor, size: int, group: Any
) -> tuple[Tensor, Tensor, Tensor]:
    """q (1, H, n, D), k, v (1, G, n, D) of this rank's tokens -> every token of the group's
    P ranks, this rank's H/P query heads and the key/value heads they read (each repeated
    first when G < P, so that every rank has a whole one)."""
    if key.shape[1] < size:
        key = key.repeat_interleave(size // key.shape[1], dim=1)
        value = value.repeat_interleave(size // value.shape[1], dim=1)
    return tuple(to_heads(t, size, group) for t in (query, key, value))


def _window(length: int, window: int | None, device: torch.device) -> Tensor | None:
    """A row's causal sliding-window mask (L, L), True where attended; None without one."""
    if window is None:
        return None
    index = torch.arange(length, device=device)
    offset = index[:, None] - index[None, :]  # query minus key
    return (offset >= 0) & (offset < window)


def ulysses_attention(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    *,
    sequence_split: UlyssesContext,
    scaling: float | None = None,
    dropout: float = 0.0,
    sliding_window: int | None = None,
    softcap: float | None = None,
    **_: object,
) -> tuple[Tensor, None]:
    """transformers' attention interface (module docstring): (1, H, n, D) queries and
    (1, G, n, D) keys and values -> (1, n, H, D); a sliding-window layer's window is kept
    (key j seen by query i when i - w < j <= i, as transformers' mask)."""
    if softcap is not None:
        raise ValueError(
            "Ulysses attention has no logit soft-cap; this model uses one: set "
            "parallel.sequence to 1"
        )
    ulysses = sequence_split
    size, group = ulysses.size, ulysses.group
    q, k, v = heads_of(query, key, value, size, group)
    # Row by row, causal: no (N', N') mask is built or kept for the backward.
    out = torch.cat(
        [
            F.scaled_dot_product_attention(
                q[:, :, start:end],
                k[:, :, start:end],
                v[:, :, start:end],
                attn_mask=_window(end - start, sliding_window, q.device),
                dropout_p=dropout,
                scale=scaling,
                is_causal=sliding_window is None,
                enable_gqa=q.shape[1] != k.shape[1],
            )
            for start, end in ulysses.spans
        ],
        dim=2,
    )
    return to_tokens(out, size, group).transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTENTION, ulysses_attention)
