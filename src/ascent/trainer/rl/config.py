"""The RL config tree (``ascent train``); what is derived from it and checked at start is in
``ascent.trainer.rl.plan``."""

from typing import Any, Literal

from pydantic import Field

from ascent.agents.config import AGENT_HELP, AgentConfig
from ascent.algos.pass_at_k import MAX_SAMPLES
from ascent.algos.types import AggregationMode
from ascent.data.rl import RLDataConfig
from ascent.engine.config import FSDPConfig, ModelConfig, OptimConfig, ParallelConfig, Strict
from ascent.rewards.judge import JudgeConfig
from ascent.rewards.manager import RewardConfig
from ascent.rollout.config import ENGINE_HELP, SERVER_HELP, RolloutEngine, ServerConfig
from ascent.rollout.engine_settings import GenerationDtype, knob
from ascent.rollout.types import SamplingParams
from ascent.trainer.rl.presets import PRESETS
from ascent.trainer.rl.rewards import RewardModelSettings
from ascent.trainer.rl.teacher import TeacherSettings
from ascent.trainer.settings import RunSettings
from ascent.trainer.tracking import TrackingConfig
from ascent.workers.config import RolloutCorrectionSettings
from ascent.workers.resources import ResourcesConfig

SAMPLING = SamplingParams()  # sampling defaults are SamplingParams'


class RolloutSettings(Strict):
    """Generation."""

    engine: RolloutEngine = Field("native", description=ENGINE_HELP)
    server: ServerConfig = Field(ServerConfig(), description=SERVER_HELP)
    agent: AgentConfig | None = Field(None, description=AGENT_HELP)
    samples_per_prompt: int = Field(8, ge=1, description="Responses sampled per prompt (group).")
    temperature: float = Field(
        SAMPLING.temperature, gt=0, description="Sampling temperature (the trainer uses it too)."
    )
    top_p: float = Field(SAMPLING.top_p, gt=0, le=1, description="Nucleus sampling mass.")
    top_k: int = Field(SAMPLING.top_k, ge=0, description="Top-k sampling (0: off).")
    max_response_length: int = Field(512, ge=1, description="New tokens per response.")
    stop: list[str] = Field(default_factory=list, description="Stop strings (EOS always stops).")
    # The engine's own declarations; per rank, wider than a server's default batch.
    max_num_seqs: int = knob("max_num_seqs", default=256)
    kv_cache_bytes: int | None = knob("kv_cache_bytes")
    dtype: GenerationDtype = knob(
        "dtype",
        description="Generation dtype; auto: actor.fsdp.param_dtype when it is set "
        "(trainer and generator then round alike: float16 in both is the smallest mismatch "
        "short of float32), else bfloat16 on CUDA and float32 on CPU, as the actor's None.",
    )
    cuda_graphs: bool = knob("cuda_graphs")
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
    parallel: ParallelConfig = Field(
        ParallelConfig(),
        description="How the actor's (and the reference's) ranks split the model and its "
        "micro-batches: tensor, sequence and expert parallelism (ParallelConfig).",
    )
    entropy_coef: float = Field(0.0, ge=0, description="Entropy bonus weight.")
    router_replay: Literal["off", "rollout"] = Field(
        "off",
        description="Mixture of experts: the actor routes each token to the experts the "
        "rollout engine chose (recorded by the native engine) instead of its own router's "
        "choice; removes the routing part of the rollout/trainer mismatch.",
    )
    router_aux_loss_coef: float = Field(
        0.0, ge=0, description="Mixture of experts: weight of the load-balancing loss."
    )
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
    parallel: ParallelConfig = Field(
        ParallelConfig(), description="The critic's parallelism (as the actor's)."
    )
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
    val_samples_per_prompt: int = Field(
        1,
        ge=1,
        le=MAX_SAMPLES,
        description="Answers per validation prompt. 1: val/<source>/acc and /score of one "
        "(greedy) answer; more: their means over all answers, and mean@k, pass@k and maj@k "
        "(ascent.algos.pass_at_k) per source and overall (val/pass@k).",
    )
    val_temperature: float | None = Field(
        None,
        ge=0,
        description="Validation temperature (0: greedy); None: greedy for one answer per "
        "prompt, rollout.temperature (with its top_p and top_k) for more.",
    )
    val_k: list[int] | None = Field(
        None,
        description="The k of the @k metrics, each from 1 to val_samples_per_prompt; None: "
        "1, 2, 4, ... below it, and it.",
    )
    val_greedy: bool = Field(
        False,
        description="Also one greedy answer per prompt when validation samples: "
        "val/<source>/greedy/acc and /greedy/score.",
    )
    max_consecutive_nonfinite: int = Field(
        3,
        ge=0,
        description="Stop after this many steps in a row whose update was skipped for "
        "a non-finite loss or gradient (their batches are saved); 0: never stop. float16 "
        "loss-scale overflows do not count (<role>/loss_scale_skipped).",
    )
    log_generations: int = Field(
        4, ge=0, description="Generations per step written to generations.jsonl."
    )
    collapse_steps: int = Field(
        10,
        ge=0,
        description="Warn when this many steps in a row had no learning signal (every "
        "prompt's samples scored the same) or, in agent runs, a tool-error rate above "
        "collapse_tool_error_rate; 0: never.",
    )
    collapse_tool_error_rate: float = Field(
        0.5, ge=0, le=1, description="Agent runs: the share of failed tool calls that counts."
    )
    stop_on_collapse: bool = Field(
        False,
        description="End the run (checkpoint saved, exit status 3) when that warning fires.",
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
    async_schedule: Literal["timing", "fixed"] = Field(
        "timing",
        description="one_step_off / async: timing: steps start, and weights enter the "
        "engine, as soon as the bound allows (which weights sample a token depends on "
        "timing). fixed: step t is sampled wholly by weight version max(0, t - k) (k: 1, or "
        "max_staleness), each step's prompts as one batch, new weights loaded between "
        "batches: two runs with one seed give the same metrics (native engine; with "
        "rollout.agent, only the weight schedule is fixed).",
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
    teacher: TeacherSettings | None = Field(
        None, description="On-policy distillation from a frozen teacher (TeacherSettings)."
    )
    trainer: RLTrainerSettings = Field(
        RLTrainerSettings(), description="The loop (RLTrainerSettings)."
    )
    resources: ResourcesConfig = Field(ResourcesConfig(), description="Devices (ResourcesConfig).")
    tracking: TrackingConfig = Field(TrackingConfig(), description="Metric sinks (TrackingConfig).")
