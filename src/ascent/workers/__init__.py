"""The training-side roles, as controller workers: actor, reference, critic."""

from ascent.workers.actor import ActorWorker
from ascent.workers.config import (
    ActorConfig,
    CriticConfig,
    MicroBatching,
    PolicyLossSettings,
    ReferenceConfig,
    RolloutCorrectionSettings,
)
from ascent.workers.critic import CriticWorker
from ascent.workers.reference import ReferenceWorker

__all__ = [
    "ActorConfig",
    "ActorWorker",
    "CriticConfig",
    "CriticWorker",
    "MicroBatching",
    "PolicyLossSettings",
    "ReferenceConfig",
    "ReferenceWorker",
    "RolloutCorrectionSettings",
]
