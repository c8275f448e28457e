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
(the chunked head runs on its share), and ``gather`` lays every rank's pieces end to end,
so every rank holds the micro-batch's (M,) values and computes the same loss. The gradient of
a rank's piece is P times its slice of the loss's (``ascent.distributed.gather_pieces``);
the losses are scaled by the replica count D = W / P, so FSDP's average of the ranks'
gradients over all W ranks is the step's gradient.
"""

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import AttentionInterface

from ascent.distributed import all_to_all, gather_pieces
from ascent.engine.packing import PackedSequences

ATTENTION = "ascent_ulysses"


@dataclass(frozen=True)
class UlyssesContext:
    """What attention needs beyond its own inputs: the sp group, and where each row of the
    whole packed sequence is."""

    group: Any
    size: int
    spans: list[tuple[int, int]]  # [start, end) of each row in the padded sequence, in order


@dataclass(frozen=True)
class SequenceShard:
    """This rank's part of a packed micro-batch: its tokens, and the queries among them."""

    input_ids: Tensor  # (1, n)
    position_ids: Tensor  # (1, n)
    query_index: Tensor  # (m_r,) into this rank's n tokens
    targets: Tensor  # (m_r,)
    query_counts: list[int]  # m_i of every rank, in rank order
    real_tokens: Tensor  # (N',) bool: the packed tokens of every rank, filler excluded
    tokens: tuple[int, int]  # [start, end) of this rank's tokens in the padded sequence
    context: UlyssesContext

    def padded(self, values: Tensor, fill: float) -> Tensor:
        """(N, ...) per packed token -> (N', ...), ``fill`` on the filler."""
        extra = self.real_tokens.shape[0] - values.shape[0]
        return torch.cat([values, values.new_full((extra, *values.shape[1:]), fill)])

    def local(self, values: Tensor, fill: float) -> Tensor:
        """(N, ...) per packed token -> (n, ...) of this rank's tokens."""
        start, end = self.tokens
        return self.padded(values, fill)[start:end]

    def gather(self, values: Tensor) -> Tensor:
        """(m_r, ...) values of this rank's queries -> (M, ...) of all queries, on every rank."""
        return gather_pieces(values, self.query_counts, self.context.group)

    def gather_tokens(self, values: Tensor) -> Tensor:
        """(n, ...) values of this rank's tokens -> (N', ...) of every rank's, on every rank
        (e.g. a router's logits, for the whole micro-batch's expert load)."""
        return gather_pieces(values, [values.shape[0]] * self.context.size, self.context.group)


def shard_sequence(layout: PackedSequences, group: Any, size: int, rank: int) -> SequenceShard:
    """Rank ``rank``'s share of ``layout`` (a packed layout, (1, N)) over ``size`` ranks."""
    if layout.attention_mask is not None:
        raise ValueError(
            "sequence parallelism splits packed rows; set model.packing=packed (the padded "
            "layout keeps rows apart with an attention mask instead)"
        )
    ids, positions = layout.input_ids[0], layout.position_ids[0]
    total = ids.shape[0]
    share = -(-total // size)
    filler = share * size - total
    fill = torch.arange(filler, device=ids.device)
    ids = torch.cat([ids, torch.zeros_like(fill)])
    positions = torch.cat([positions, fill])  # its own row, starting at 0
    starts = (positions == 0).nonzero(as_tuple=True)[0].tolist()  # every row starts at 0
    spans = list(zip(starts, [*starts[1:], share * size], strict=True))
    bounds = torch.arange(size + 1, device=ids.device) * share
    query_counts = torch.bucketize(layout.query_index, bounds[1:], right=True).bincount(
        minlength=size
    )
    start, end = rank * share, (rank + 1) * share
    in_mine = (layout.query_index >= start) & (layout.query_index < end)
    return SequenceShard(
        input_ids=ids[start:end][None],
        position_ids=positions[start:end][None],
        query_index=layout.query_index[in_mine] - start,
        targets=layout.targets[in_mine],
        query_counts=query_counts.tolist(),
        real_tokens=torch.cat([layout.real_tokens(), fill.new_zeros(filler, dtype=torch.bool)]),
        tokens=(start, end),
        context=UlyssesContext(group=group, size=size, spans=spans),
    )


def _to_heads(x: Tensor, size: int, group: Any) -> Tensor:
    """(1, H, n, D) this rank's tokens -> (1, H/P, P n, D) this rank's heads."""
    _, heads, tokens, dim = x.shape
    parts = x.reshape(size, heads // size, tokens, dim)  # part j: the heads rank j keeps
    received = all_to_all(parts, [1] * size, [1] * size, group)  # from rank i: its tokens
    return received.transpose(0, 1).reshape(1, heads // size, size * tokens, dim)


def _to_tokens(x: Tensor, size: int, group: Any) -> Tensor:
    """(1, H/P, P n, D) this rank's heads -> (1, H, n, D) this rank's tokens."""
    _, heads, total, dim = x.shape
    parts = x.reshape(heads, size, total // size, dim).transpose(0, 1)  # part j: rank j's
    received = all_to_all(parts, [1] * size, [1] * size, group)  # from rank i: heads i
    return received.reshape(1, size * heads, total // size, dim)


def ulysses_attention(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    *,
    ulysses: UlyssesContext,
    scaling: float | None = None,
    dropout: float = 0.0,
    **_: object,
) -> tuple[Tensor, None]:
    """transformers' attention interface (module docstring): (1, H, n, D) queries and
    (1, G, n, D) keys and values -> (1, n, H, D)."""
    size, group = ulysses.size, ulysses.group
    if key.shape[1] < size:  # each rank needs a whole key/value head of its own
        key = key.repeat_interleave(size // key.shape[1], dim=1)
        value = value.repeat_interleave(size // value.shape[1], dim=1)
    q, k, v = (_to_heads(t, size, group) for t in (query, key, value))
    # Row by row, causal: no (N', N') mask is built or kept for the backward.
    out = torch.cat(
        [
            F.scaled_dot_product_attention(
                q[:, :, start:end],
                k[:, :, start:end],
                v[:, :, start:end],
                dropout_p=dropout,
                scale=scaling,
                is_causal=True,
                enable_gqa=q.shape[1] != k.shape[1],
            )
            for start, end in ulysses.spans
        ],
        dim=2,
    )
    return _to_tokens(out, size, group).transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTENTION, ulysses_attention)
