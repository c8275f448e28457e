"""Policy losses, one per file, and the registry that names them.

Every loss has the signature ``fn(inputs: PolicyLossInputs, **params) -> TokenLoss``: a
(B, T) per-token loss matrix, exactly zero outside the mask, plus its metrics. The matrix is
turned into a scalar by ``ascent.algos.aggregation.aggregate`` (see ``ascent.algos.objective``
for the full actor loss). Add your own with ``POLICY_LOSSES.register("name", fn)`` or name it
in the config as ``package.module:function`` / ``path/to/file.py:function``.
"""

from ascent.algos.losses.cispo import cispo
from ascent.algos.losses.clip_cov import clip_cov
from ascent.algos.losses.geo_mean import geo_mean
from ascent.algos.losses.gspo import gspo
from ascent.algos.losses.kl_cov import kl_cov
from ascent.algos.losses.ppo import ppo
from ascent.algos.losses.reinforce import reinforce
from ascent.algos.losses.sppo import sppo
from ascent.algos.registry import Registry
from ascent.algos.types import PolicyLossInputs, TokenLoss

POLICY_LOSSES: Registry = Registry(
    "policy loss",
    {
        "ppo": ppo,
        "gspo": gspo,
        "reinforce": reinforce,
        "clip_cov": clip_cov,
        "kl_cov": kl_cov,
        "geo_mean": geo_mean,
        "cispo": cispo,
        "sppo": sppo,
    },
)


def compute_policy_loss(name: str, inputs: PolicyLossInputs, **params: object) -> TokenLoss:
    """Run the policy loss registered as ``name`` (or at that import path) with ``params``."""
    return POLICY_LOSSES.get(name)(inputs, **params)


__all__ = [
    "POLICY_LOSSES",
    "cispo",
    "clip_cov",
    "compute_policy_loss",
    "geo_mean",
    "gspo",
    "kl_cov",
    "ppo",
    "reinforce",
    "sppo",
]
