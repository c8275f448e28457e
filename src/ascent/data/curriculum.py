"""A pass-rate curriculum (``data.sampler=pass_rate``): draw the prompts whose groups are
likely to teach something.

A group-relative estimator (GRPO, RLOO, DAPO, ...) learns from a prompt only when its n
samples disagree: a group all right or all wrong has zero advantage everywhere. Once a model
masters the easy prompts, and while it cannot touch the hard ones, much of a uniformly drawn
step is such dead weight. DAPO's dynamic sampling (``algorithm.dynamic_sampling``) generates
those groups and then drops them; this sampler learns each prompt's pass rate from the groups
it has seen and draws fewer of the ones it expects to be dead. The two compose.

Estimate. Per prompt i, decayed counts of right and wrong samples over its groups, oldest
first: a group of m samples of which k are right (k = sum of ``acc`` clamped to [0, 1]; an
agent episode counts once, however many rows it has) updates

    s_i <- λ s_i + k,    f_i <- λ f_i + (m - k)              (λ = decay)

and the belief about the prompt's pass rate p_i is Beta(α_i, β_i), α_i = a + s_i,
β_i = a + f_i (a = prior). With λ < 1 old groups count less (the policy has moved since), and
the evidence never exceeds m / (1 - λ) samples.

Weight. The chance that the next group of n = ``rollout.samples_per_prompt`` samples has both
outcomes, 1 - p^n - (1-p)^n, averaged over that belief (the Beta-binomial predictive):

    q_i = 1 - E[p^n] - E[(1-p)^n],   E[p^n] = Π_{j<n} (α+j) / (α+β+j) = B(α+n, β) / B(α, β)
    w_i = max(floor, q_i)

An unseen prompt gets the prior's q (n = 8, a = 0.5: 0.61); one whose groups disagreed, about
1 (0.95 after one group of 4 right, 4 wrong); one seen only right (or only wrong) falls with
the evidence (n = 8, a = 0.5, λ = 0.5: 0.29 after one such group, 0.18 once it saturates).
With n = 1 every q is 0: the draws are uniform.

Draw. A take's prompts are distinct, drawn one after another with probability w_i / Σ w over
those not yet drawn (Efraimidis-Spirakis: the largest keys log(u_i) / w_i, u_i ~ U(0, 1),
give that order in one pass). As w_i ≥ floor and w_j ≤ 1, each draw picks any prompt not yet
drawn with probability at least floor / N (N prompts): none is starved, and one whose groups
disagree again is back at full weight at once. The u come from a generator seeded by
(``data.seed``, takes so far).

Order. Outcomes reach the sampler in step order (``observe``, called by the run's scoring after
each generation round, before dynamic sampling drops the dead groups: they are the evidence).
Generating ahead (``trainer.mode`` one_step_off, async at ``max_staleness`` k) takes step t's
prompts once steps before t - k are observed, whatever the timing. So the prompts are a
function of the seed and the outcomes, and where the outcomes are reproducible (sync,
``async_schedule=fixed``) so is the run. The counts of each seen prompt and the number of
takes are the state a checkpoint keeps: a resumed run draws what an uninterrupted one would.
Prompts sharing a ``prompt_id`` (``<file name>#<row>``: one file listed twice, or two files
with one name) share one estimate.
"""

from collections.abc import Sequence
from typing import Any, Protocol

import torch
from pydantic import Field

from ascent.batch import Batch
from ascent.engine.config import Strict


class PassRateConfig(Strict):
    """``data.sampler=pass_rate``: how a prompt's pass rate is estimated and weighed
    (``ascent.data.curriculum``)."""

    floor: float = Field(
        0.05,
        gt=0,
        le=1,
        description="Least weight of a prompt (one sure to have both outcomes weighs 1): each "
        "draw picks any prompt not yet drawn with probability at least floor / prompts.",
    )
    decay: float = Field(
        0.5,
        ge=0,
        le=1,
        description="How much a prompt's earlier groups count when a new one comes: 1 never "
        "forgets, 0 keeps only the newest group.",
    )
    prior: float = Field(
        0.5,
        gt=0,
        description="Pseudo-counts of right and of wrong samples before any group (Beta(a, a); "
        "0.5 is Jeffreys' prior, 1 the uniform one).",
    )


class Identified(Protocol):
    prompt_id: str


def group_outcomes(batch: Batch, weights: torch.Tensor | None) -> list[tuple[str, float, float]]:
    """(prompt_id, right, samples) per group (``uid``), in batch order: ``acc`` clamped to
    [0, 1], each row counted with its weight (None: 1; an episode's k rows 1/k each)."""
    if len(batch) == 0:
        return []
    groups = batch.group_ids("uid")
    rows = torch.ones(len(batch), dtype=torch.float64) if weights is None else weights.double()
    acc = batch["acc"].double().clamp(0.0, 1.0)
    count = int(groups.max()) + 1
    right = torch.zeros(count, dtype=torch.float64).index_add_(0, groups, rows * acc)
    samples = torch.zeros(count, dtype=torch.float64).index_add_(0, groups, rows)
    first: dict[int, int] = {}
    for row, group in enumerate(groups.tolist()):
        first.setdefault(group, row)
    ids = batch["prompt_id"]
    return [(ids[first[g]], float(right[g]), float(samples[g])) for g in range(count)]


def all_alike(alpha: torch.Tensor, beta: torch.Tensor, n: int) -> torch.Tensor:
    """E[p^n] for p ~ Beta(alpha, beta): the chance that n samples are all right."""
    log = torch.lgamma(alpha + n) - torch.lgamma(alpha)
    log += torch.lgamma(alpha + beta) - torch.lgamma(alpha + beta + n)
    return log.exp()


class PassRateSampler:
    """Prompts drawn by their chance of a group with both outcomes (the module docstring);
    ``take``, ``state`` and ``load_state`` as ``PromptStream``'s, and ``observe`` to learn
    from a round's scored groups."""

    def __init__(
        self,
        prompts: Sequence[Identified],
        config: PassRateConfig,
        *,
        samples_per_prompt: int,
        seed: int,
    ) -> None:
        if not prompts:
            raise ValueError("no prompts left to train on (check the data and the length filter)")
        self.prompts, self.config, self.seed = list(prompts), config, seed
        self.n = samples_per_prompt
        self.positions: dict[str, list[int]] = {}
        for index, prompt in enumerate(self.prompts):
            self.positions.setdefault(prompt.prompt_id, []).append(index)
        self.right = torch.zeros(len(self.prompts), dtype=torch.float64)
        self.wrong = torch.zeros(len(self.prompts), dtype=torch.float64)
        self.takes = 0

    def signal(self) -> torch.Tensor:
        """(N,) q: each prompt's chance that its next group has both outcomes."""
        alpha, beta = self.config.prior + self.right, self.config.prior + self.wrong
        return 1.0 - all_alike(alpha, beta, self.n) - all_alike(beta, alpha, self.n)

    def weights(self) -> torch.Tensor:
        return self.signal().clamp_min(self.config.floor)

    def probabilities(self) -> torch.Tensor:
        """(N,) each prompt's chance to be a take's first draw."""
        weights = self.weights()
        return weights / weights.sum()

    def take(self, count: int) -> list[Any]:
        """``count`` prompts, distinct up to the number of prompts (then again, as epochs)."""
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.takes)
        self.takes += 1
        weights, taken = self.weights(), []
        while len(taken) < count:
            u = torch.rand(len(self.prompts), generator=generator, dtype=torch.float64)
            keys = u.log() / weights  # Efraimidis-Spirakis: the top k are a weighted draw
            chunk = min(count - len(taken), len(self.prompts))
            taken.extend(self.prompts[i] for i in keys.topk(chunk).indices.tolist())
        return taken

    def observe(self, batch: Batch, weights: torch.Tensor | None) -> dict[str, float]:
        """Learn from a round's scored groups (every group, before any filter), in step
        order; returns ``sampler/*`` metrics: prompts seen so far and their mean pass rate."""
        decay = self.config.decay
        for prompt_id, right, samples in group_outcomes(batch, weights):
            for index in self.positions[prompt_id]:
                self.right[index] = decay * self.right[index] + right
                self.wrong[index] = decay * self.wrong[index] + (samples - right)
        seen = (self.right + self.wrong) > 0
        alpha, beta = self.config.prior + self.right[seen], self.config.prior + self.wrong[seen]
        mean = float((alpha / (alpha + beta)).mean()) if seen.any() else 0.0
        return {"sampler/prompts_seen": float(seen.sum()), "sampler/pass_rate_mean": mean}

    def state(self) -> dict[str, Any]:
        """Takes so far and the counts (right, wrong) of every prompt seen, by prompt_id."""
        right, wrong = self.right.tolist(), self.wrong.tolist()
        counts = {
            prompt_id: [right[index], wrong[index]]
            for prompt_id, (index, *_) in self.positions.items()
            if right[index] + wrong[index] > 0
        }
        return {"takes": self.takes, "pass_rate": counts}

    def load_state(self, state: dict[str, Any]) -> None:
        if "pass_rate" not in state:
            raise ValueError(
                f"the checkpoint's prompt position {list(state)} is not "
                "data.sampler=pass_rate's: "
                "resume with the sampler it was saved with, or start a new run"
            )
        self.takes = state["takes"]
        self.right.zero_()
        self.wrong.zero_()
        for prompt_id, (right, wrong) in state["pass_rate"].items():
            for index in self.positions[prompt_id]:
                self.right[index], self.wrong[index] = right, wrong
