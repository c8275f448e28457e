"""Moving the actor's weights into rollout workers on other devices, bucket by bucket.

Rank 0 of the actor group gathers one bucket of full weights (every actor rank takes part in
the gathers), and each rollout rank pulls that bucket from rank 0 directly, not through the
driver; the next bucket is gathered only once the rollout has loaded the previous one, so a
transfer never holds more than one bucket at a time.
"""

from ascent.controller import WorkerGroup

DEFAULT_BUCKET_BYTES = 512 * 2**20


def sync_weights(
    actor: WorkerGroup,
    rollout: WorkerGroup,
    version: int,
    bucket_bytes: int = DEFAULT_BUCKET_BYTES,
) -> int:
    """Refresh every rollout rank from the actor, the new weights numbered ``version``;
    returns the rollout's new weight version."""
    count = actor.weight_bucket_count(bucket_bytes)
    rollout.begin_weight_update(version)
    for index in range(count):
        bucket = actor.weight_bucket.submit(index, bucket_bytes).of_rank(0)
        rollout.load_weight_bucket(bucket)
    versions = rollout.finish_weight_update()
    if len(set(versions)) != 1:
        raise RuntimeError(f"rollout ranks disagree on the weight version: {versions}")
    return versions[0]
