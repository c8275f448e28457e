"""One packed micro-batch's tokens split over the P ranks of a sequence group (Ulysses,
ring context parallelism, or both), and every rank's results gathered back.

The packed sequence (1, N) (rows end to end, positions restarting at 0 per row; see
``ascent.engine.packing``) is padded to N' with a separate row of filler tokens, and each rank
is given n = N' / P of its tokens by an ``assignment`` (token indices per rank, each in
increasing order): contiguous parts for Ulysses, load-balanced chunks for the ring. A rank
runs the layers on its tokens and computes the log-probs (or values) of the queries among
them; ``gather`` lays every rank's pieces end to end and puts them back in query order, so
every rank holds the micro-batch's (M,) values and computes the same loss. The gradient of
a rank's piece is P times its slice of the loss's (``ascent.distributed.gather_pieces``);
the losses are scaled by the replica count D = W / P, so FSDP's average of the ranks'
gradients over all W ranks is the step's gradient.
"""

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ascent.distributed import gather_pieces
from ascent.engine.packing import PackedSequences


@dataclass(frozen=True)
class SequenceShard:
    """This rank's part of a packed micro-batch: its tokens, and the queries among them."""

    input_ids: Tensor  # (1, n)
    position_ids: Tensor  # (1, n)
    query_index: Tensor  # (m_r,) into this rank's n tokens
    targets: Tensor  # (m_r,)
    query_counts: list[int]  # m_i of every rank, in rank order
    real_tokens: Tensor  # (N',) bool: the packed tokens, filler excluded
    token_index: Tensor  # (n,) this rank's tokens' places in the padded sequence
    query_order: Tensor | None  # where each query is among the gathered pieces (None: in order)
    token_order: Tensor | None  # where each token is among the gathered tokens (None: in order)
    group: Any
    size: int
    context: Any  # what attention needs (``UlyssesContext``, ``RingContext``)

    def padded(self, values: Tensor, fill: float) -> Tensor:
        """(N, ...) per packed token -> (N', ...), ``fill`` on the filler."""
        extra = self.real_tokens.shape[0] - values.shape[0]
        return torch.cat([values, values.new_full((extra, *values.shape[1:]), fill)])

    def local(self, values: Tensor, fill: float) -> Tensor:
        """(N, ...) per packed token -> (n, ...) of this rank's tokens."""
        return self.padded(values, fill)[self.token_index]

    def gather(self, values: Tensor) -> Tensor:
        """(m_r, ...) values of this rank's queries -> (M, ...) of all queries, on every rank."""
        gathered = gather_pieces(values, self.query_counts, self.group)
        return gathered if self.query_order is None else gathered[self.query_order]

    def gather_tokens(self, values: Tensor) -> Tensor:
        """(n, ...) values of this rank's tokens -> (N', ...) of every rank's, in sequence
        order, on every rank (e.g. a router's logits, for the whole micro-batch's load)."""
        gathered = gather_pieces(values, [values.shape[0]] * self.size, self.group)
        return gathered if self.token_order is None else gathered[self.token_order]


def padded_sequence(layout: PackedSequences, multiple: int) -> PackedSequences:
    """``layout`` (packed rows, (1, N)) as long as the next multiple of ``multiple``
    (``PackedSequences.with_filler``: the filler a row of its own); ValueError for padded
    rows."""
    if layout.attention_mask is not None:
        raise ValueError(
            "sequence and context parallelism split packed rows; set model.packing=packed "
            "(the padded layout keeps rows apart with an attention mask instead)"
        )
    return layout.with_filler(multiple)


def _placement(assignment: list[Tensor], total: int) -> tuple[Tensor, Tensor]:
    """(owner rank, place among the gathered tokens) of each token of the sequence."""
    owner = torch.empty(total, dtype=torch.long, device=assignment[0].device)
    place = torch.empty_like(owner)
    start = 0
    for rank, tokens in enumerate(assignment):
        owner[tokens] = rank
        place[tokens] = torch.arange(start, start + tokens.shape[0], device=tokens.device)
        start += tokens.shape[0]
    return owner, place


def split_sequence(
    layout: PackedSequences, assignment: list[Tensor], rank: int, group: Any, context: Any
) -> SequenceShard:
    """Rank ``rank``'s share of ``layout`` (``padded_sequence``'s) under ``assignment`` (its
    token indices of each rank)."""
    ids, positions = layout.input_ids[0], layout.position_ids[0]
    total = ids.shape[0]
    owner, place = _placement(assignment, total)
    query_owner = owner[layout.query_index]
    counts = query_owner.bincount(minlength=len(assignment))
    contiguous = bool((owner[1:] >= owner[:-1]).all()) and all(
        bool((tokens[1:] - tokens[:-1] == 1).all()) for tokens in assignment
    )
    query_order = token_order = None
    if not contiguous:
        # gathered: the queries of rank 0 in order, then rank 1's, ...: query j sits at
        # (queries of lower ranks) + (its rank among its rank's queries)
        order = torch.argsort(query_owner, stable=True)
        query_order = torch.argsort(order)
        token_order = place
    mine = assignment[rank]
    local_of = torch.full((total,), -1, dtype=torch.long, device=ids.device)
    local_of[mine] = torch.arange(mine.shape[0], device=ids.device)
    in_mine = query_owner == rank
    return SequenceShard(
        input_ids=ids[mine][None],
        position_ids=positions[mine][None],
        query_index=local_of[layout.query_index[in_mine]],
        targets=layout.targets[in_mine],
        query_counts=counts.tolist(),
        real_tokens=layout.real_tokens(),
        token_index=mine,
        query_order=query_order,
        token_order=token_order,
        group=group,
        size=len(assignment),
        context=context,
    )
