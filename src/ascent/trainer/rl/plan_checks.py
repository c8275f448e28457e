"""The plan's checks: what a config asks that cannot work, refused before any worker starts,
with an error that names the fields. Each check reads the config and what the estimator
declared it needs (``ascent.algos.needs``), never the estimator's name."""

import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ascent.algos.advantages import ADVANTAGE_ESTIMATORS
from ascent.algos.kl import kl_estimator_name
from ascent.algos.losses import POLICY_LOSSES
from ascent.algos.needs import Needs
from ascent.config import ConfigError
from ascent.engine.config import FSDPConfig
from ascent.moe.checkpoint import expert_count
from ascent.trainer.rl.config import RLConfig


def check_names(estimator: str, loss: str, kl_estimator: str) -> None:
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


def check_params(field: str, function: Callable, params: dict[str, Any]) -> None:
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


def check_rollout_ranks(config: RLConfig) -> None:
    """Each rollout rank generates an equal share of the step's prompts."""
    prompts = config.data.prompts_per_step
    rollout_world = (config.rollout.resources or config.resources).world_size
    if prompts % rollout_world:
        raise ConfigError(
            f"data.prompts_per_step={prompts} must be a multiple of the rollout's {rollout_world} "
            "rank(s) (each generates an equal share of the prompts)"
        )


def check_mode(config: RLConfig, dynamic_sampling: bool, estimator: str, needs: Needs) -> None:
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
        f"the {estimator} estimator (greedy baselines of the step's prompts)": (
            needs.baseline_scores
        ),
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


def check_needs(config: RLConfig, estimator: str, needs: Needs) -> None:
    """What the estimator needs that this config cannot give it."""
    if config.rollout.samples_per_prompt < needs.min_group_size:
        raise ConfigError(
            f"algorithm.estimator={estimator} needs rollout.samples_per_prompt >= "
            f"{needs.min_group_size} (its baselines compare the samples of a prompt)"
        )
    if needs.process_rewards and config.rollout.agent is not None:
        raise ConfigError(
            f"the {estimator} estimator cannot train on rollout.agent episodes yet (the "
            "implicit PRM scores one response per prompt); use grpo or rloo"
        )


def check_agent(config: RLConfig) -> None:
    """What multi-turn episodes (``rollout.agent``) cannot be combined with yet."""
    if config.rollout.agent is None:
        return
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


def check_expert_parallel(config: RLConfig, needs: Needs) -> None:
    """Each training role's ``fsdp.expert_parallel`` divides the ranks and its checkpoint's
    experts (the reference shards as the actor does)."""
    world = config.resources.world_size
    roles: dict[str, tuple[FSDPConfig, str]] = {"actor": (config.actor.fsdp, config.model.path)}
    if needs.values:
        roles["critic"] = (config.critic.fsdp, (config.critic.model or config.model).path)
    if needs.process_rewards:
        model = config.implicit_prm.model or config.model
        roles["implicit_prm"] = (config.implicit_prm.fsdp, model.path)
    for role, (fsdp, path) in roles.items():
        ep = fsdp.expert_parallel
        if ep == 1:
            continue
        field = f"{role}.fsdp.expert_parallel={ep}"
        if world % ep:
            raise ConfigError(f"{field} must divide the {world} training rank(s) (resources)")
        config_file = Path(path) / "config.json"
        if not config_file.is_file():
            continue  # the model's own loading names the missing checkpoint
        experts = expert_count(json.loads(config_file.read_text()))
        if experts == 0:
            raise ConfigError(
                f"{field}: {path} is a dense model (no experts to split); set it to 1"
            )
        if experts % ep:
            raise ConfigError(f"{field} must divide the model's {experts} experts ({path})")
