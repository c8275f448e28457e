"""The row order a step's batch is dispatched to the data-parallel ranks in, so that an update
does not depend on the number of ranks (both trainers)."""

from ascent.batch import Batch
from ascent.engine import data_parallel_order


def for_ranks(batch: Batch, dp_size: int, mini_batches: int = 1) -> Batch:
    """``batch`` (B rows, an ``attention_mask`` (B, T)) reordered for ``dp_size`` ranks that
    each split their share into ``mini_batches`` optimiser steps.

    Without it, rank r gets rows [r * B / dp_size, ...) and its j-th slice, so global
    mini-batch j would hold different rows for 1 and 2 ranks. With it, mini-batch j is rows
    [j * B / mini_batches, ...) of ``batch`` whatever ``dp_size`` is, spread over the ranks
    with similar token counts (``ascent.engine.data_parallel_order``).
    """
    tokens = batch["attention_mask"].sum(-1).tolist()
    return batch.index(data_parallel_order(tokens, dp_size, mini_batches))
