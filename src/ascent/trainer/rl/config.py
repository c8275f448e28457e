"""The RL config tree (``ascent train``), and the plan derived from it and checked at start."""

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from ascent.agents.config import AGENT_HELP, AgentConfig
from ascent.algos.advantages import ADVANTAGE_ESTIMATORS
from ascent.algos.kl import kl_estimator_name
from ascent.algos.losses import POLICY_LOSSES
from ascent.algos.types import AggregationMode
from ascent.data.rl import RLDataConfig
from ascent.engine.config import FSDPConfig, ModelConfig, OptimConfig, Strict
from ascent.rewards.judge import JudgeConfig
from ascent.rewards.manager import RewardConfig
from ascent.rollout.config import (
    ENGINE_HELP,
    KV_CACHE_HELP,
    SERVER_HELP,
    GenerationDtype,
    RolloutEngine,
    ServerConfig,
)
from ascent.trainer.rl.presets import PRESETS
from ascent.trainer.rl.rewards import RewardModelSettings
from ascent.trainer.settings import ResourcesConfig, RunSettings
from ascent.trainer.tracking import TrackingConfig
from ascent.workers.config import RolloutCorrectionSettings


class RolloutSettings(Strict):
    """Generation."""

    engine: RolloutEngine = Field("native", description=ENGINE_HELP)
    server: ServerConfig = Field(ServerConfig(), description=SERVER_HELP)
    agent: AgentConfig | None = Field(None, description=AGENT_HELP)
    samples_per_prompt: int = Field(8, ge=1, description="Responses sampled per prompt (group).")
    temperature: float = Field(
        1.0, gt=0, description="Sampling temperature (the trainer uses it too)."
    )
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling mass.")
    top_k: int = Field(0, ge=0, description="Top-k sampling (0: off).")
    max_response_length: int = Field(512, ge=1, description="New tokens per response.")
    stop: list[str] = Field(default_factory=list, description="Stop strings (EOS always stops).")
    max_num_seqs: int = Field(256, ge=1, description="Sequences decoded at once per rank.")
    kv_cache_bytes: int | None = Field(None, gt=0, description=KV_CACHE_HELP)
    dtype: GenerationDtype = Field("auto", description="Generation dtype.")
    cuda_graphs: bool = Field(True, description="CUDA graphs for decode steps (CUDA only).")
    resources: ResourcesConfig | None = Field(
        None, description="Own devices for the rollout; None: colocated with the actor."
    )
    weight_bucket_bytes: int = Field(
        512 * 2**20, ge=1, description="Weight transfer bucket (own devices)."
    )


class ActorSettings(Strict):
    """The policy update."""

    prompts_per_update: int | None = Field(
        None, ge=1, description="Prompts per optimiser step (mini-batch); None: all of a step."
    )
    epochs_per_step: int = Field(1, ge=1, description="Passes over each step's batch.")
    tokens_per_micro_batch: int = Field(
        8192, ge=1, description="Token budget per forward/backward."
    )
    optim: OptimConfig = Field(OptimConfig(lr=1e-6), description="Optimiser (OptimConfig).")
    fsdp: FSDPConfig = Field(FSDPConfig(), description="Sharding (FSDPConfig).")
    entropy_coef: float = Field(0.0, ge=0, description="Entropy bonus weight.")
    recompute_log_probs: Literal["auto", "always"] = Field(
        "auto",
        description="Recompute the batch's log-probs under the current policy before the "
        "update; auto skips it when the update is one on-policy optimiser step (they equal "
        "the update's own first forward) and KL is not in the reward.",
    )
    rollout_correction: RolloutCorrectionSettings = Field(
        RolloutCorrectionSettings(), description="Rollout/trainer mismatch weights."
    )


class CriticSettings(Strict):
    """The value model (algorithms with GAE: ppo, vapo)."""

    model: ModelConfig | None = Field(None, description="Backbone; None: the policy checkpoint.")
    optim: OptimConfig = Field(OptimConfig(lr=1e-5), description="Optimiser (OptimConfig).")
    fsdp: FSDPConfig = Field(FSDPConfig(), description="Sharding (FSDPConfig).")
    value_clip: float | None = Field(0.5, gt=0, description="Clip range around old values.")
    prompts_per_update: int | None = Field(None, ge=1, description="Prompts per optimiser step.")
    epochs_per_step: int = Field(1, ge=1, description="Passes over each step's batch.")
    tokens_per_micro_batch: int = Field(8192, ge=1, description="Token budget per forward.")
    warmup_steps: int = Field(0, ge=0, description="Steps that train only the critic.")


class ImplicitPRMSettings(Strict):
    """PRIME's implicit process reward model (algorithm prime): a causal LM, the policy's
    checkpoint at the start, trained each step on the outcome labels (the function's acc)
    with cross-entropy; its token rewards are beta * (lp_prm - lp_ref)."""

    model: ModelConfig | None = Field(None, description="Checkpoint; None: the policy's.")
    beta: float = Field(0.05, gt=0, description="beta of r = beta * (lp_prm - lp_ref).")
    optim: OptimConfig = Field(OptimConfig(lr=1e-6), description="Optimiser (OptimConfig).")
    fsdp: FSDPConfig = Field(FSDPConfig(), description="Sharding (FSDPConfig).")
    update: Literal["before", "after"] = Field(
        "before",
        description="before: train on the step's rollouts, then score them (the PRIME "
        "recipe's default); after: score with the PRM as it was, then train.",
    )
    prompts_per_update: int | None = Field(None, ge=1, description="Prompts per optimiser step.")
    epochs_per_step: int = Field(1, ge=1, description="Passes over each step's batch.")
    tokens_per_micro_batch: int = Field(8192, ge=1, description="Token budget per forward.")


class KLSettings(Strict):
    """The KL to the reference policy; None fields come from the algorithm preset."""

    mode: Literal["none", "loss", "reward"] | None = Field(
        None, description="As a loss, in the reward, or off."
    )
    coef: float | None = Field(None, ge=0, description="Coefficient (initial, if adaptive).")
    estimator: str | None = Field(None, description="k1, abs, k2, k3, k1+, k3+ (verl names too).")
    controller: Literal["fixed", "adaptive"] = Field(
        "fixed", description="KL-in-reward controller."
    )
    target: float = Field(0.1, gt=0, description="Adaptive controller's target KL.")
    horizon: float = Field(10000.0, gt=0, description="Adaptive controller's horizon (samples).")


class PFPPOSettings(Strict):
    """Policy filtration (PF-PPO, arXiv:2409.06957): after the advantages, the step's batch is
    resampled with replacement, sample i drawn in proportion to a weight of its score, so
    responses with a reliable reward are trained on more often (ascent.algos.pf_ppo)."""

    method: Literal["pow", "max_min", "max_random"] = Field(
        "pow",
        description="pow: |score|^power; max_min: only the batch's best and worst; "
        "max_random: the best 4x as likely as the rest.",
    )
    power: float = Field(2.0, gt=0, description="Exponent of method pow.")


class AlgorithmSettings(Strict):
    """Which algorithm, and overrides of what its preset sets."""

    name: Literal[tuple(PRESETS)] = Field(
        "grpo", description="Preset; see ascent.trainer.rl.presets."
    )
    estimator: str | None = Field(None, description="Advantage estimator (name or import path).")
    estimator_params: dict[str, Any] = Field(default_factory=dict, description="Its parameters.")
    loss: str | None = Field(None, description="Policy loss (name or import path).")
    loss_params: dict[str, Any] = Field(default_factory=dict, description="Its parameters.")
    aggregation: AggregationMode | None = Field(None, description="Loss aggregation mode.")
    kl: KLSettings = Field(KLSettings(), description="KL to the reference (KLSettings).")
    dynamic_sampling: bool | None = Field(
        None, description="Drop groups whose accuracy does not vary, refill with new prompts."
    )
    max_generation_rounds: int = Field(
        4, ge=1, description="Refill rounds per step (dynamic sampling)."
    )
    overlong_buffer: int | None = Field(
        None,
        ge=1,
        description="Overlong shaping zone in tokens (default for dapo: 1/4 of the length).",
    )
    overlong_penalty: float = Field(
        1.0, ge=0, description="Overlong shaping's penalty at the length limit (its factor)."
    )
    pf_ppo: PFPPOSettings | None = Field(
        None, description="PF-PPO: resample each step's batch by score before the update."
    )


class RLTrainerSettings(RunSettings):
    """The loop."""

    run_dir: str = Field("runs/rl", description="Checkpoints, metrics, generations, export.")
    total_steps: int | None = Field(None, ge=1, description="RL steps; None: data.epochs worth.")
    epochs: int = Field(1, ge=1, description="Passes over the prompts when total_steps is None.")
    val_every: int = Field(10, ge=0, description="Validate every N steps (0: never).")
    val_at_start: bool = Field(True, description="Validate before the first step.")
    max_consecutive_nonfinite: int = Field(
        3,
        ge=0,
        description="Stop after this many steps in a row whose update was skipped for "
        "a non-finite loss or gradient (their batches are saved); 0: never stop.",
    )
    log_generations: int = Field(
        4, ge=0, description="Generations per step written to generations.jsonl."
    )
    mode: Literal["sync", "one_step_off", "async"] = Field(
        "sync",
        description="sync: generate, then train, in turn. one_step_off: step t+1's rollouts "
        "are generated (by the weights before step t's update) while step t trains. async: "
        "generation runs on; each update enters the running engine between decode steps, "
        "and step t's prompts start once the rollout holds weights at most max_staleness "
        "updates older than step t's.",
    )
    max_staleness: int = Field(
        1,
        ge=1,
        description="async: how many updates a trained token's weights may lag the "
        "trainer's (bounded by waiting: prompts are not started earlier).",
    )
    partial_rollouts: bool = Field(
        True,
        description="async: responses in flight at an update go on under the new weights "
        "(tokens record their versions); false: they are dropped and restarted from their "
        "prompts under the new weights (no response mixes versions).",
    )
    dump_rollouts: str | None = Field(None, description="Save each step's scored batch here.")
    replay_rollouts: str | None = Field(None, description="Train on saved batches, no generation.")


class RLConfig(Strict):
    """Reinforcement learning, the whole run."""

    model: ModelConfig = Field(description="The policy checkpoint (ModelConfig).")
    data: RLDataConfig = Field(description="Prompts (RLDataConfig).")
    rollout: RolloutSettings = Field(RolloutSettings(), description="Generation (RolloutSettings).")
    actor: ActorSettings = Field(ActorSettings(), description="Policy update (ActorSettings).")
    critic: CriticSettings = Field(CriticSettings(), description="Value model (CriticSettings).")
    implicit_prm: ImplicitPRMSettings = Field(
        ImplicitPRMSettings(), description="PRIME's process reward model (ImplicitPRMSettings)."
    )
    algorithm: AlgorithmSettings = Field(
        AlgorithmSettings(), description="Algorithm (AlgorithmSettings)."
    )
    reward: RewardConfig = Field(RewardConfig(), description="Scoring (RewardConfig).")
    reward_model: RewardModelSettings | None = Field(
        None, description="A reward model scoring responses (RewardModelSettings)."
    )
    judge: JudgeConfig | None = Field(
        None, description="An LLM endpoint grading responses (JudgeConfig)."
    )
    trainer: RLTrainerSettings = Field(
        RLTrainerSettings(), description="The loop (RLTrainerSettings)."
    )
    resources: ResourcesConfig = Field(ResourcesConfig(), description="Devices (ResourcesConfig).")
    tracking: TrackingConfig = Field(TrackingConfig(), description="Metric sinks (TrackingConfig).")


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
            raise ValueError(
                f"data.prompts_per_step={prompts} must be a multiple of "
                f"{role}.prompts_per_update={per_update}"
            )
        count = prompts // per_update
        if samples % (world * count):
            raise ValueError(
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
        raise ValueError(
            f"data.prompts_per_step={prompts} must be a multiple of the rollout's {rollout_world} "
            "rank(s) (each generates an equal share of the prompts)"
        )
    _check_mode(config, dynamic, estimator)
    if estimator == "prime" and config.rollout.samples_per_prompt < 2:
        raise ValueError(
            "algorithm prime needs rollout.samples_per_prompt >= 2 (leave-one-out baselines)"
        )
    if config.rollout.agent is not None:
        if estimator == "prime":
            raise ValueError(
                "the prime estimator cannot train on rollout.agent episodes yet (the implicit "
                "PRM scores one response per prompt); use grpo or rloo"
            )
        if config.reward_model is not None:
            raise ValueError(
                "reward_model cannot score rollout.agent episodes yet (a turn's prompt is the "
                "episode so far, in the policy's tokens); score episodes with reward.function"
            )
        if config.judge is not None:
            raise ValueError(
                "judge cannot grade rollout.agent episodes yet (it would grade each turn "
                "alone, not the episode); score episodes with reward.function"
            )
        if not config.data.chat_template:
            raise ValueError(
                "rollout.agent needs data.chat_template=true: episodes are conversations, "
                "rendered with the model's chat template"
            )
        if config.rollout.engine not in ("native", "serve", "vllm"):
            raise ValueError(
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
    mode = config.trainer.mode
    if mode == "sync":
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
    }
    for what, present in conflicts.items():
        if present:
            raise ValueError(
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
            raise ValueError(f"{field}: {error}") from error
    try:
        kl_estimator_name(kl_estimator)
    except ValueError as error:
        raise ValueError(f"algorithm.kl.estimator: {error}") from error


def _check_params(field: str, function: Callable, params: dict[str, Any]) -> None:
    """Parameters the estimator or loss does not take fail now, naming the ones it does,
    rather than at the first update on a worker."""
    signature = inspect.signature(function)
    try:
        signature.bind(None, **params)  # the first argument is the inputs
    except TypeError as error:
        taken = list(signature.parameters)[1:]
        raise ValueError(
            f"{field}={params}: {error}; {getattr(function, '__name__', function)} takes "
            f"{', '.join(taken) or 'no parameters'}"
        ) from None
