"""The driver-side algorithm stage: overlong shaping, KL in the reward, advantages, the
verl-named metrics of the step's batch, and PF-PPO resampling."""

import torch
from torch import Tensor

from ascent.algos import (
    AdaptiveKLController,
    AdvantageInputs,
    FixedKLController,
    compute_advantages,
    kl_penalty_in_reward,
)
from ascent.algos.overlong import overlong_penalty
from ascent.algos.pf_ppo import pf_ppo_resample
from ascent.batch import Batch
from ascent.rollout.types import response_lengths
from ascent.trainer.rl.config import KLSettings
from ascent.trainer.rl.plan import Plan
from ascent.trainer.rl.rows import SampleRows
from ascent.trainer.rl.teacher import TeacherSettings, distilled_advantages


class AdvantageStage:
    """``rows``: the run's row kind, which weighs rows in group statistics (an agent
    episode's rows share one count)."""

    def __init__(
        self,
        plan: Plan,
        kl: KLSettings,
        max_response_length: int,
        seed: int,
        rows: object = SampleRows(),
        teacher: TeacherSettings | None = None,
    ) -> None:
        self.plan, self.max_response_length, self.seed = plan, max_response_length, seed
        self.rows, self.teacher = rows, teacher
        self.controller: FixedKLController | AdaptiveKLController | None = None
        if plan.kl_mode == "reward":
            if kl.controller == "adaptive":
                self.controller = AdaptiveKLController(plan.kl_coef, kl.target, kl.horizon)
            else:
                self.controller = FixedKLController(plan.kl_coef)

    def __call__(self, batch: Batch, step: int) -> tuple[Batch, dict[str, float]]:
        """Shaped rewards, advantages and returns of ``batch`` (step ``step`` seeds PF-PPO's
        draw, so a resumed run draws the same rows); metrics describe the batch as collected."""
        plan, mask = self.plan, batch["response_mask"]
        rewards = batch["token_rewards"]
        metrics: dict[str, float] = {}
        if plan.overlong_buffer:
            lengths = response_lengths(batch)
            penalty = overlong_penalty(
                lengths,
                max_length=self.max_response_length,
                buffer_length=plan.overlong_buffer,
                factor=plan.overlong_penalty,
            )
            last = (lengths.clamp(min=1) - 1).unsqueeze(-1)
            rewards = rewards.scatter_add(1, last, penalty.unsqueeze(-1))
            metrics["critic/overlong_penalty/mean"] = float(penalty.mean())
        if self.controller is not None:
            rewards, kl_metrics = kl_penalty_in_reward(
                rewards,
                batch["old_log_probs"],
                batch["ref_log_probs"],
                mask,
                beta=self.controller.value,
                estimator=plan.kl_estimator,
            )
            metrics["actor/reward_kl_penalty"] = float(kl_metrics["kl"])
            metrics["actor/reward_kl_penalty_coeff"] = self.controller.value
            self.controller.update(float(kl_metrics["kl"]), len(batch))
        inputs = AdvantageInputs(
            token_rewards=rewards,
            response_mask=mask,
            group_ids=batch.group_ids("uid"),
            values=batch.get("values"),
            baseline_scores=batch.get("baseline_scores"),
            process_rewards=batch.get("process_rewards"),  # PRIME's implicit PRM
            sample_weights=self.rows.sample_weights(batch),
        )
        result = compute_advantages(plan.estimator, inputs, **plan.estimator_params)
        advantages = result.advantages
        if self.teacher is not None:  # on-policy distillation (teacher.py)
            advantages, distill = distilled_advantages(batch, advantages, self.teacher)
            metrics |= distill
        batch = batch.assign(rewards=rewards, advantages=advantages, returns=result.returns)
        metrics |= batch_metrics(batch)
        if plan.pf_ppo is not None:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
            rows = pf_ppo_resample(
                batch["scores"],
                method=plan.pf_ppo.method,
                power=plan.pf_ppo.power,
                generator=generator,
            )
            batch = batch.index(rows)
            metrics["pf_ppo/unique_share"] = len(set(rows.tolist())) / len(rows)
        return batch, metrics


def _stats(name: str, values: Tensor) -> dict[str, float]:
    if values.numel() == 0:
        return {}
    values = values.float()
    return {
        f"{name}/mean": float(values.mean()),
        f"{name}/max": float(values.max()),
        f"{name}/min": float(values.min()),
    }


def distribution(name: str, values: Tensor) -> dict[str, float]:
    """Mean, min, max, standard deviation and the 10th, 50th and 90th percentiles."""
    values = values.float()
    quantiles = torch.quantile(values, torch.tensor([0.1, 0.5, 0.9]))
    return {
        **_stats(name, values),
        f"{name}/std": float(values.std(unbiased=False)),
        **{f"{name}/p{q}": float(v) for q, v in zip((10, 50, 90), quantiles, strict=True)},
    }


def batch_metrics(batch: Batch) -> dict[str, float]:
    """verl's names: critic/score, critic/rewards, critic/advantages, critic/returns,
    critic/values, response_length (with clip_ratio), prompt_length, plus accuracy; with a
    reward model or a judge, reward/function and reward/model (its distribution and truncated
    share) or reward/judge (its distribution)."""
    mask = batch["response_mask"].bool()
    lengths = response_lengths(batch)
    width = batch["responses"].shape[1]
    metrics = {
        **_stats("critic/score", batch["scores"]),
        **_stats("critic/rewards", (batch["rewards"] * mask).sum(-1)),
        **_stats("critic/advantages", batch["advantages"][mask]),
        **_stats("critic/returns", batch["returns"][mask]),
        **_stats("response_length", lengths),
        "response_length/clip_ratio": float((lengths >= width).float().mean()),
        **_stats("prompt_length", batch["prompt_mask"].sum(-1)),
        "critic/acc/mean": float(batch["acc"].mean()),
    }
    if "values" in batch:
        metrics |= _stats("critic/values", batch["values"][mask])
    if "function_scores" in batch:  # weighted or combined with a reward model's
        metrics |= _stats("reward/function", batch["function_scores"])
    if "model_scores" in batch:
        metrics |= distribution("reward/model", batch["model_scores"])
        metrics["reward/model/truncated"] = float(batch["rm_truncated"].mean())
    if "judge_scores" in batch:
        metrics |= distribution("reward/judge", batch["judge_scores"])
    for key in batch.keys():  # noqa: SIM118 - iterating a Batch is an error, keys() is not
        if key.startswith("reward_extra/") and key != "reward_extra/acc":
            values = batch[key][~torch.isnan(batch[key])]
            if values.numel():
                metrics[f"reward/{key.removeprefix('reward_extra/')}/mean"] = float(values.mean())
    return metrics
