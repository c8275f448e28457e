"""Learning-rate multiplier: linear warmup, then constant or cosine decay."""

import math

from ascent.engine.config import OptimConfig


def lr_multiplier(step: int, config: OptimConfig) -> float:
    """Factor on the peak lr at optimiser step ``step`` (0-based).

    warmup: (step + 1) / warmup_steps for step < warmup_steps, so the first step already
    moves; cosine: from 1 down to min_lr_ratio over the steps after warmup.
    """
    if step < config.warmup_steps:
        return (step + 1) / config.warmup_steps
    if config.schedule == "constant":
        return 1.0
    if config.total_steps is None:
        raise ValueError("optim.schedule='cosine' needs optim.total_steps")
    decay_steps = max(1, config.total_steps - config.warmup_steps)
    progress = min(1.0, (step - config.warmup_steps) / decay_steps)
    cosine = 0.5 * (1 + math.cos(math.pi * progress))
    return config.min_lr_ratio + (1 - config.min_lr_ratio) * cosine
