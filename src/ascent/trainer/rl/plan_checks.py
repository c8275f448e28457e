"""The plan's checks: what a config asks that cannot work, refused before any worker starts,
with an error that names the fields. Each check reads the config and what the estimator
declared it needs (``ascent.algos.needs``), never the estimator's name."""

import inspect
from collections.abc import Callable
from typing import Any

from ascent.algos.advantages import ADVANTAGE_ESTIMATORS
from ascent.algos.kl import kl_estimator_name
from ascent.algos.losses import POLICY_LOSSES
from ascent.algos.needs import Needs
from ascent.config import ConfigError
from ascent.models.loading import load_tokenizer
from ascent.moe.checkpoint import expert_count
from ascent.teacher.vocab import check_shared_vocabulary
from ascent.trainer.rl.config import RLConfig
from ascent.trainer.rl.parallel_checks import checkpoint_config


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
        # an episode's turns cannot be replayed onto new weights
        "rollout.agent with trainer.partial_rollouts=false": config.rollout.agent is not None
        and not config.trainer.partial_rollouts,
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
    agent = config.rollout.agent
    if needs.baseline_scores and agent is not None and agent.run is not None:
        raise ConfigError(
            f"the {estimator} estimator cannot train an outside agent (rollout.agent.run): "
            "its baseline is a greedy answer scored by reward.function; use grpo or rloo"
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


def check_router_replay(config: RLConfig) -> None:
    """Replay needs routes: a mixture of experts, one response per prompt (no agent); an
    engine that records them (``ascent.trainer.rl.engine_checks``)."""
    if config.actor.router_replay == "off":
        return
    field = "actor.router_replay=rollout"
    if config.rollout.agent is not None:
        raise ConfigError(f"{field} cannot take rollout.agent episodes yet (no routes recorded)")
    checkpoint = checkpoint_config(config.model.path)
    if checkpoint is not None and expert_count(checkpoint) == 0:
        raise ConfigError(f"{field}: {config.model.path} is a dense model (nothing to replay)")


def check_teacher(config: RLConfig) -> None:
    """What a teacher needs of the run, refused before any worker starts: a local teacher's
    tokenizer shares the student's vocabulary (an endpoint's is probed when it starts), an
    endpoint scores at temperature 1, and the top-k forward KL runs without sequence
    parallelism."""
    teacher = config.teacher
    if teacher is None:
        return
    if teacher.endpoint is not None and config.rollout.temperature != 1.0:
        raise ConfigError(
            f"teacher.endpoint scores tokens at temperature 1, but rollout.temperature="
            f"{config.rollout.temperature}: the student's and teacher's log-probs would be "
            "of different distributions; sample at 1, or use a local teacher.model"
        )
    if teacher.forward_kl_top_k and config.actor.parallel.replica > 1:
        raise ConfigError(
            "teacher.forward_kl_top_k scores the teacher's top-k tokens at every position, "
            "which is not split over actor.parallel.sequence or .tensor ranks (nor a .context "
            "ring) yet: set it to 0, or those three to 1"
        )
    if teacher.model is not None:
        student = load_tokenizer(
            config.model.path, trust_remote_code=config.model.trust_remote_code
        )
        theirs = load_tokenizer(
            teacher.model.path, trust_remote_code=teacher.model.trust_remote_code
        )
        try:
            check_shared_vocabulary(student, theirs, f"teacher.model.path={teacher.model.path}")
        except ValueError as error:
            raise ConfigError(str(error)) from error
