"""The plan of an RL run: everything derived from its config (the preset resolved, the roles,
batch splits), checked before any worker starts, and printed at start."""

from dataclasses import dataclass
from typing import Any

from ascent.algos.advantages import ADVANTAGE_ESTIMATORS
from ascent.algos.losses import POLICY_LOSSES
from ascent.algos.needs import Needs, needs_of
from ascent.config import ConfigError
from ascent.trainer.rl.config import AlgorithmSettings, PFPPOSettings, RLConfig
from ascent.trainer.rl.engine_checks import check_engine
from ascent.trainer.rl.parallel_checks import check_parallel, describe_parallel
from ascent.trainer.rl.plan_checks import (
    check_agent,
    check_mode,
    check_names,
    check_needs,
    check_params,
    check_rollout_ranks,
    check_router_replay,
    check_teacher,
)
from ascent.trainer.rl.presets import PRESETS, Preset
from ascent.trainer.rl.validation import ValSampling, val_sampling


@dataclass(frozen=True)
class Plan:
    """Everything derived from the config; checked before any worker starts. ``critic``,
    ``implicit_prm`` and ``greedy_baseline`` (and ``reference`` beside a KL term) follow from
    what the estimator declared it needs (``ascent.algos.needs``)."""

    estimator: str
    estimator_params: dict[str, Any]
    loss: str
    loss_params: dict[str, Any]
    aggregation: str
    kl_mode: str
    kl_coef: float
    kl_estimator: str
    critic: bool
    implicit_prm: bool
    reference: bool
    recompute_log_probs: bool
    dynamic_sampling: bool
    overlong_buffer: int | None
    overlong_penalty: float
    pf_ppo: PFPPOSettings | None
    greedy_baseline: bool
    samples_per_step: int
    actor_mini_batches: int
    critic_mini_batches: int
    prm_mini_batches: int
    validation: ValSampling

    def describe(self, config: RLConfig) -> str:
        """The step plan, printed at start."""
        d, r, a = config.data, config.rollout, config.actor
        kl = f"KL {self.kl_mode}"
        if self.kl_mode != "none":
            kl += f" ({self.kl_estimator}, coef {self.kl_coef})"
        roles = ["actor", "rollout"] + ["reference"] * self.reference + ["critic"] * self.critic
        roles += ["implicit_prm"] * self.implicit_prm
        roles += ["reward_model"] * (config.reward_model is not None)
        roles += ["teacher"] * (config.teacher is not None and config.teacher.model is not None)
        extras = []
        if self.dynamic_sampling:
            extras.append(f"dynamic sampling ({config.algorithm.max_generation_rounds} rounds)")
        if self.overlong_buffer:
            extras.append(
                f"overlong shaping over the last {self.overlong_buffer} tokens (down to "
                f"-{self.overlong_penalty:g})"
            )
        if self.pf_ppo is not None:
            extras.append(f"PF-PPO resampling ({self.pf_ppo.method})")

        def with_params(name: str, params: dict[str, Any]) -> str:
            return f"{name} {params}" if params else name

        lines = [
            f"algorithm {config.algorithm.name}: estimator "
            f"{with_params(self.estimator, self.estimator_params)}",
            f"  loss {with_params(self.loss, self.loss_params)}, aggregation {self.aggregation}, "
            f"{kl}",
            f"  roles: {', '.join(roles)}" + (f"; {'; '.join(extras)}" if extras else ""),
            f"step: {d.prompts_per_step} prompts x {r.samples_per_prompt} samples = "
            f"{self.samples_per_step} responses of up to {r.max_response_length} tokens "
            f"on {config.resources.world_size} rank(s)",
            f"  actor: {a.epochs_per_step} epoch(s) x {self.actor_mini_batches} optimiser "
            f"step(s), micro-batches of <= {a.tokens_per_micro_batch} tokens; old log-probs "
            + ("recomputed" if self.recompute_log_probs else "from the update (on-policy)"),
        ]
        world = config.resources.world_size
        lines.append(describe_parallel("actor ranks", a.parallel, world))
        if self.critic:
            lines.append(describe_parallel("critic ranks", config.critic.parallel, world))
        t = config.trainer
        if t.mode == "one_step_off":
            lines.append("  generation: one step ahead of training (staleness 1)")
        elif t.mode == "async":
            restart = "" if t.partial_rollouts else "; responses in flight restart at an update"
            lines.append(
                f"  generation: asynchronous, weights updated in flight, staleness <= "
                f"{t.max_staleness}{restart}"
            )
        if self.critic:
            lines.append(
                f"  critic: {config.critic.epochs_per_step} epoch(s) x "
                f"{self.critic_mini_batches} optimiser step(s)"
            )
        if self.implicit_prm:
            p = config.implicit_prm
            lines.append(
                f"  implicit PRM: beta {p.beta}, trained {p.update} scoring, "
                f"{p.epochs_per_step} epoch(s) x {self.prm_mini_batches} optimiser step(s)"
            )
        if config.teacher is not None:
            lines.append(config.teacher.describe())
        if self.validation.n > 1 or self.validation.temperature > 0:
            lines.append(self.validation.describe())
        return "\n".join(lines)


def make_plan(config: RLConfig) -> Plan:
    """Resolve the preset and the overrides, derive the roles and stages from what the
    estimator needs (``ascent.algos.needs``), and check the config before any worker starts:
    names, parameters, batch-size divisibility, modes, with errors that name the fields."""
    a, preset = config.algorithm, PRESETS[config.algorithm.name]
    estimator, loss = a.estimator or preset.estimator, a.loss or preset.loss
    kl_mode = a.kl.mode or preset.kl_mode
    kl_estimator = a.kl.estimator or preset.kl_estimator
    estimator_params = {
        **(preset.estimator_params if a.estimator is None else {}),
        **a.estimator_params,
    }
    loss_params = {**(preset.loss_params if a.loss is None else {}), **a.loss_params}
    check_names(estimator, loss, kl_estimator)
    needs = _estimator_needs(estimator, estimator_params)
    check_params("algorithm.loss_params", POLICY_LOSSES.get(loss), loss_params)
    dynamic = preset.dynamic_sampling if a.dynamic_sampling is None else a.dynamic_sampling
    check_rollout_ranks(config)
    check_mode(config, dynamic, estimator, needs)
    check_needs(config, estimator, needs)
    check_agent(config)
    check_parallel(config, needs)
    check_router_replay(config)
    check_engine(config)
    check_teacher(config)
    return Plan(
        estimator=estimator,
        estimator_params=estimator_params,
        loss=loss,
        loss_params=loss_params,
        aggregation=a.aggregation or preset.aggregation,
        kl_mode=kl_mode,
        kl_coef=_kl_coef(a, preset, kl_mode),
        kl_estimator=kl_estimator,
        critic=needs.values,
        implicit_prm=needs.process_rewards,
        reference=kl_mode != "none" or needs.process_rewards,  # the PRM's log-ratio reads it
        recompute_log_probs=_recompute_log_probs(config, kl_mode),
        dynamic_sampling=dynamic,
        overlong_buffer=_overlong_buffer(config, preset),
        overlong_penalty=a.overlong_penalty,
        pf_ppo=a.pf_ppo,
        greedy_baseline=needs.baseline_scores,
        samples_per_step=config.data.prompts_per_step * config.rollout.samples_per_prompt,
        actor_mini_batches=_mini_batches(config, "actor", config.actor.prompts_per_update),
        critic_mini_batches=_mini_batches(config, "critic", config.critic.prompts_per_update),
        prm_mini_batches=_mini_batches(
            config, "implicit_prm", config.implicit_prm.prompts_per_update
        ),
        validation=val_sampling(config),
    )


def _estimator_needs(estimator: str, params: dict[str, Any]) -> Needs:
    """What the estimator declared it needs, its parameters checked against its signature."""
    function = ADVANTAGE_ESTIMATORS.get(estimator)
    check_params("algorithm.estimator_params", function, params)
    try:
        return needs_of(function)
    except TypeError as error:
        raise ConfigError(f"algorithm.estimator: {error}") from error


def _kl_coef(a: AlgorithmSettings, preset: Preset, kl_mode: str) -> float:
    """The configured coefficient, else the preset's while a KL term is on, else 0."""
    if a.kl.coef is not None:
        return a.kl.coef
    return preset.kl_coef if kl_mode != "none" else 0.0


def _recompute_log_probs(config: RLConfig, kl_mode: str) -> bool:
    """Old log-probs need their own forward when the update is off-policy (several epochs or
    mini-batches) or the KL enters the reward before it; else the update's first forward."""
    prompts = config.data.prompts_per_step
    return (
        config.actor.recompute_log_probs == "always"
        or kl_mode == "reward"
        or config.actor.epochs_per_step > 1
        or (config.actor.prompts_per_update or prompts) < prompts
    )


def _overlong_buffer(config: RLConfig, preset: Preset) -> int | None:
    """The configured buffer, else a quarter of the length when the preset shapes overlong."""
    buffer = config.algorithm.overlong_buffer
    if buffer is None and preset.overlong_shaping:
        buffer = max(1, config.rollout.max_response_length // 4)
    return buffer


def _mini_batches(config: RLConfig, role: str, per_update: int | None) -> int:
    """Optimiser steps per epoch of ``role``: the step's prompts over its prompts per update,
    each mini-batch split evenly over the ranks."""
    prompts, world = config.data.prompts_per_step, config.resources.world_size
    samples = prompts * config.rollout.samples_per_prompt
    per_update = per_update or prompts
    if prompts % per_update:
        raise ConfigError(
            f"data.prompts_per_step={prompts} must be a multiple of "
            f"{role}.prompts_per_update={per_update}"
        )
    count = prompts // per_update
    if samples % (world * count):
        raise ConfigError(
            f"{samples} responses per step ({prompts} prompts x "
            f"{config.rollout.samples_per_prompt} samples) must split into {count} "
            f"mini-batches on {world} rank(s): make prompts_per_step x samples_per_prompt "
            f"a multiple of {world * count}"
        )
    return count
