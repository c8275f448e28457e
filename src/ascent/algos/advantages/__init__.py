"""Advantage estimators, one per file, and the registry that names them.

Every estimator has the signature ``fn(inputs: AdvantageInputs, **params) -> Advantages``,
runs under ``torch.no_grad`` and returns (B, T) advantages and returns that are zero outside
the response mask. Add your own with ``ADVANTAGE_ESTIMATORS.register("name", fn)`` or name it
in the config as ``package.module:function`` / ``path/to/file.py:function``.

What an estimator reads beyond rewards, mask and groups is declared on it with
``@needs(...)`` (``ascent.algos.needs``): gae the critic's values, remax greedy baseline
scores, prime an implicit PRM's process rewards. The trainer derives its roles from that.
"""

from ascent.algos.advantages.gae import gae
from ascent.algos.advantages.gpg import gpg
from ascent.algos.advantages.grpo import drgrpo, grpo
from ascent.algos.advantages.grpo_passk import grpo_passk
from ascent.algos.advantages.opo import opo
from ascent.algos.advantages.prime import prime
from ascent.algos.advantages.reinforce_pp import reinforce_pp
from ascent.algos.advantages.reinforce_pp_baseline import reinforce_pp_baseline
from ascent.algos.advantages.remax import remax
from ascent.algos.advantages.rloo import rloo
from ascent.algos.advantages.sppo import sppo
from ascent.algos.registry import Registry
from ascent.algos.types import AdvantageInputs, Advantages

ADVANTAGE_ESTIMATORS: Registry = Registry(
    "advantage estimator",
    {
        "gae": gae,
        "grpo": grpo,
        "drgrpo": drgrpo,
        "grpo_passk": grpo_passk,
        "rloo": rloo,
        "reinforce_pp": reinforce_pp,
        "reinforce_pp_baseline": reinforce_pp_baseline,
        "remax": remax,
        "opo": opo,
        "gpg": gpg,
        "prime": prime,
        "sppo": sppo,
    },
)


def compute_advantages(name: str, inputs: AdvantageInputs, **params: object) -> Advantages:
    """Run the estimator registered as ``name`` (or at that import path) with ``params``."""
    return ADVANTAGE_ESTIMATORS.get(name)(inputs, **params)


__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "compute_advantages",
    "drgrpo",
    "gae",
    "gpg",
    "grpo",
    "grpo_passk",
    "opo",
    "prime",
    "reinforce_pp",
    "reinforce_pp_baseline",
    "remax",
    "rloo",
    "sppo",
]
