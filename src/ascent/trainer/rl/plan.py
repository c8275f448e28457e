"""The plan of an RL run: everything derived from its config (the preset resolved, the roles,
batch splits), checked before any worker starts, and printed at start."""

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ascent.algos.advantages import ADVANTAGE_ESTIMATORS
from ascent.algos.kl import kl_estimator_name
from ascent.algos.losses import POLICY_LOSSES
from ascent.config import ConfigError
from ascent.trainer.rl.config import PFPPOSettings, RLConfig
from ascent.trainer.rl.presets import PRESETS


@dataclass(frozen=True)
class Plan:
    """Everything derived from the config; checked before any worker starts."""

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

    def describe(self, config: RLConfig) -> str:
        """The step plan, printed at start."""
        d, r, a = config.data, config.rollout, config.actor
        kl = f"KL {self.kl_mode}"
        if self.kl_mode != "none":
            kl += f" ({self.kl_estimator}, coef {self.kl_coef})"
        roles = ["actor", "rollout"] + ["reference"] * self.reference + ["critic"] * self.critic
        roles += ["implicit_prm"] * self.implicit_prm
        roles += ["reward_model"] * (config.reward_model is not None)
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
        return "\n".join(lines)


def make_plan(config: RLConfig) -> Plan:
    """Resolve the preset and the overrides; check batch-size divisibility with a clear error."""
    a, preset = config.algorithm, PRESETS[config.algorithm.name]
    estimator = a.estimator or preset.estimator
    kl_mode = a.kl.mode or preset.kl_mode
    dynamic = preset.dynamic_sampling if a.dynamic_sampling is None else a.dynamic_sampling
    overlong = a.overlong_buffer
    if overlong is None and preset.overlong_shaping:
        overlong = max(1, config.rollout.max_response_length // 4)
    prompts = config.data.prompts_per_step
    samples = prompts * config.rollout.samples_per_prompt
    world = config.resources.world_size

    def mini_batches(role: str, per_update: int | None) -> int:
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

    loss = a.loss or preset.loss
    estimator_params = {
        **(preset.estimator_params if a.estimator is None else {}),
        **a.estimator_params,
    }
    loss_params = {**(preset.loss_params if a.loss is None else {}), **a.loss_params}
    _check_names(estimator, loss, a.kl.estimator or preset.kl_estimator)
    _check_params(
        "algorithm.estimator_params", ADVANTAGE_ESTIMATORS.get(estimator), estimator_params
    )
    _check_params("algorithm.loss_params", POLICY_LOSSES.get(loss), loss_params)
    rollout_world = (config.rollout.resources or config.resources).world_size
    if prompts % rollout_world:
        raise ConfigError(
            f"data.prompts_per_step={prompts} must be a multiple of the rollout's {rollout_world} "
            "rank(s) (each generates an equal share of the prompts)"
        )
    _check_mode(config, dynamic, estimator)
    if estimator == "prime" and config.rollout.samples_per_prompt < 2:
        raise ConfigError(
            "algorithm prime needs rollout.samples_per_prompt >= 2 (leave-one-out baselines)"
        )
    if config.rollout.agent is not None:
        if estimator == "prime":
            raise ConfigError(
                "the prime estimator cannot train on rollout.agent episodes yet (the implicit "
                "PRM scores one response per prompt); use grpo or rloo"
            )
        if config.reward_model is not None:
            raise ConfigError(
                "reward_model cannot score rollout.agent episodes yet (a turn's prompt is the "
                "episode so far, in the policy's tokens); score episodes with reward.function"
            )
        if config.judge is not None:
            raise ConfigError(
                "judge cannot grade rollout.agent episodes yet (it would grade each turn "
                "alone, not the episode); score episodes with reward.function"
            )
        if not config.data.chat_template:
            raise ConfigError(
                "rollout.agent needs data.chat_template=true: episodes are conversations, "
                "rendered with the model's chat template"
            )
        if config.rollout.engine not in ("native", "serve", "vllm"):
            raise ConfigError(
                "rollout.agent needs rollout.engine native, serve or vllm (request-level "
                f"engines that follow the policy), not {config.rollout.engine}"
            )
    return Plan(
        estimator=estimator,
        estimator_params=estimator_params,
        loss=loss,
        loss_params=loss_params,
        aggregation=a.aggregation or preset.aggregation,
        kl_mode=kl_mode,
        kl_coef=a.kl.coef
        if a.kl.coef is not None
        else (preset.kl_coef if kl_mode != "none" else 0.0),
        kl_estimator=a.kl.estimator or preset.kl_estimator,
        critic=estimator == "gae",
        implicit_prm=estimator == "prime",
        reference=kl_mode != "none" or estimator == "prime",  # the PRM's log-ratio needs it
        recompute_log_probs=config.actor.recompute_log_probs == "always"
        or kl_mode == "reward"
        or config.actor.epochs_per_step > 1
        or (config.actor.prompts_per_update or prompts) < prompts,
        dynamic_sampling=dynamic,
        overlong_buffer=overlong,
        overlong_penalty=a.overlong_penalty,
        pf_ppo=a.pf_ppo,
        greedy_baseline=estimator == "remax",
        samples_per_step=samples,
        actor_mini_batches=mini_batches("actor", config.actor.prompts_per_update),
        critic_mini_batches=mini_batches("critic", config.critic.prompts_per_update),
        prm_mini_batches=mini_batches("implicit_prm", config.implicit_prm.prompts_per_update),
    )


def _check_mode(config: RLConfig, dynamic_sampling: bool, estimator: str) -> None:
    """What generating ahead of training cannot do, refused before any worker starts."""
    mode, schedule = config.trainer.mode, config.trainer.async_schedule
    if mode == "sync":
        if schedule == "fixed":
            raise ConfigError(
                "trainer.async_schedule=fixed applies to trainer.mode one_step_off or async; "
                "trainer.mode=sync is reproducible as it is"
            )
        return
    conflicts = {
        "algorithm.dynamic_sampling": dynamic_sampling,  # refills depend on the step's scores
        "the remax estimator (greedy baselines of the step's prompts)": estimator == "remax",
        "trainer.replay_rollouts": config.trainer.replay_rollouts is not None,
        f"rollout.engine={config.rollout.engine}": config.rollout.engine
        in ("transformers", "openai"),
        # an episode's turns cannot be replayed onto new weights
        "rollout.agent with trainer.partial_rollouts=false": config.rollout.agent is not None
        and not config.trainer.partial_rollouts,
        # an episode's turns join the engine's batch as they come: not reproducible
        "rollout.agent with trainer.async_schedule=fixed": config.rollout.agent is not None
        and schedule == "fixed",
    }
    for what, present in conflicts.items():
        if present:
            raise ConfigError(
                f"trainer.mode={mode} cannot be combined with {what}; use trainer.mode=sync"
            )


def _check_names(estimator: str, loss: str, kl_estimator: str) -> None:
    """Unknown names (or unloadable import paths) fail before any worker starts."""
    for field, registry, name in (
        ("algorithm.estimator", ADVANTAGE_ESTIMATORS, estimator),
        ("algorithm.loss", POLICY_LOSSES, loss),
    ):
        try:
            registry.get(name)
        except Exception as error:
            raise ConfigError(f"{field}: {error}") from error
    try:
        kl_estimator_name(kl_estimator)
    except ValueError as error:
        raise ConfigError(f"algorithm.kl.estimator: {error}") from error


def _check_params(field: str, function: Callable, params: dict[str, Any]) -> None:
    """Parameters the estimator or loss does not take fail now, naming the ones it does,
    rather than at the first update on a worker."""
    signature = inspect.signature(function)
    try:
        signature.bind(None, **params)  # the first argument is the inputs
    except TypeError as error:
        taken = list(signature.parameters)[1:]
        raise ConfigError(
            f"{field}={params}: {error}; {getattr(function, '__name__', function)} takes "
            f"{', '.join(taken) or 'no parameters'}"
        ) from None
