"""The update's outer loops, shared by the per-micro-batch passes (``ascent.workers.common``)
and the pipeline's (``ascent.workers.pipeline_passes``): epochs x mini-batches, each with
its loss denominators counted over every data-parallel replica."""

from collections.abc import Iterator

from ascent.algos import LossNormalizer
from ascent.batch import Batch
from ascent.engine.fsdp import TrainEngine
from ascent.workers.config import MicroBatching


def normalized_mini_batches(
    engine: TrainEngine,
    batch: Batch,
    settings: MicroBatching,
    *,
    role: str,
    norm_length: int,
    dp_size: int,
    mask_key: str = "response_mask",
) -> Iterator[tuple[Batch, LossNormalizer]]:
    """Each mini-batch of each epoch (one optimiser step each), with its normaliser: the
    tokens of ``mask_key`` and the sequences with at least one, summed over all ``dp_size``
    replicas first, so that the micro-batch losses add up to the mini-batch loss whatever
    the micro-batching and the number of replicas."""
    if len(batch) % settings.mini_batches:
        raise ValueError(
            f"{role}.update: {len(batch)} rows on this rank do not split into "
            f"mini_batches={settings.mini_batches}; make the batch a multiple"
        )
    for _ in range(settings.epochs):
        for mini in batch.split(settings.mini_batches):
            mask = mini[mask_key].bool()
            tokens, sequences = engine.all_reduce_sum(
                [float(mask.sum()), float(mask.any(dim=-1).sum())]
            )
            yield mini, LossNormalizer(tokens, sequences, norm_length, dp_size=dp_size)
