"""What each ``algorithm.name`` means: the estimator, loss, aggregation and KL it sets by
default. Every piece stays overridable in the config (``algorithm.estimator``, ...).

| name | estimator | policy loss | aggregation | KL | extras |
| --- | --- | --- | --- | --- | --- |
| ppo | gae | ppo | token-mean | none | critic |
| grpo | grpo | ppo | token-mean | loss, k3, 0.001 | reference |
| drgrpo | drgrpo | ppo | seq-mean-token-sum-norm | none | |
| dapo | grpo | ppo, clip 0.2 / 0.28 | token-mean | none | dynamic sampling, overlong shaping |
| gspo | grpo | gspo | seq-mean-token-mean (fixed by the loss) | none | |
| rloo | rloo | ppo | token-mean | none | |
| reinforce_pp | reinforce_pp | ppo | token-mean | loss, k3, 0.001 | reference |
| reinforce_pp_baseline | reinforce_pp_baseline | ppo | token-mean | loss, k3, 0.001 | reference |
| remax | remax | ppo | token-mean | none | greedy baseline rollout |
| opo | opo | ppo | token-mean | none | |
| gpg | gpg | reinforce | token-mean | none | |
| vapo | gae, VAPO lambdas (1) | ppo, clip 0.2 / 0.28 | token-mean | none | critic |
| prime | prime (2) | ppo | token-mean | none | implicit PRM, reference, dynamic sampling |
| sppo | sppo (3) | sppo | seq-mean-token-mean (fixed by the loss) | none | |

(1) critic lam 1, actor lam 1 - 1 / (0.05 |y|). VAPO here is its advantage estimation and
clipping; its value pretraining and positive-example LM loss are not part of the preset.
(2) leave-one-out outcome and implicit-PRM process rewards, whitened returns; the PRM
(``implicit_prm.*``) trains each step. Dynamic sampling stands for PRIME's online prompt
filter (it keeps the groups whose answers are neither all right nor all wrong): on mostly
wrong batches the PRM's cross-entropy lowers the likelihood of every sampled answer, right
ones included, and the policy learns to chase what it displaced (measured in bench/README.md).
(3) eta * (win rate in the group - 1/2), preferences Bradley-Terry over the reward's scores
(a reward model's, a judge's or a function's; ``estimator_params.temperature``, 0: a hard
rule); the loss regresses each sequence's log-ratio onto it.
"""

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Preset:
    estimator: str
    loss: str = "ppo"
    aggregation: str = "token-mean"
    estimator_params: dict[str, Any] = field(default_factory=dict)
    loss_params: dict[str, Any] = field(default_factory=dict)
    kl_mode: str = "none"
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    dynamic_sampling: bool = False
    overlong_shaping: bool = False


CLIP_HIGHER = {"clip_low": 0.2, "clip_high": 0.28}
KL_LOSS = {"kl_mode": "loss", "kl_coef": 0.001, "kl_estimator": "k3"}

PRESETS: dict[str, Preset] = {
    "ppo": Preset("gae", estimator_params={"gamma": 1.0, "lam": 1.0}),
    "grpo": Preset("grpo", **KL_LOSS),
    "drgrpo": Preset("drgrpo", aggregation="seq-mean-token-sum-norm"),
    "dapo": Preset("grpo", loss_params=CLIP_HIGHER, dynamic_sampling=True, overlong_shaping=True),
    "gspo": Preset("grpo", loss="gspo", aggregation="seq-mean-token-mean"),
    "rloo": Preset("rloo"),
    "reinforce_pp": Preset("reinforce_pp", **KL_LOSS),
    "reinforce_pp_baseline": Preset("reinforce_pp_baseline", **KL_LOSS),
    "remax": Preset("remax"),  # the greedy baseline rollout follows from the estimator
    "opo": Preset("opo"),
    "gpg": Preset("gpg", loss="reinforce"),
    # The implicit PRM and the reference follow from the estimator.
    "prime": Preset("prime", dynamic_sampling=True),
    "sppo": Preset("sppo", loss="sppo", aggregation="seq-mean-token-mean"),
    "vapo": Preset(
        "gae",
        estimator_params={
            "gamma": 1.0,
            "lam": 0.95,
            "critic_lam": 1.0,
            "length_adaptive_alpha": 0.05,
        },
        loss_params=CLIP_HIGHER,
    ),
}
