"""The worker configs of a run, built from the RL config and its plan, and the groups."""

from ascent.controller import Role, WorkerGroup, spawn_groups
from ascent.rollout.types import SamplingParams
from ascent.trainer.rl.config import RLConfig
from ascent.trainer.rl.plan import Plan
from ascent.workers import (
    ActorConfig,
    ActorWorker,
    CriticConfig,
    CriticWorker,
    PolicyLossSettings,
    ReferenceConfig,
    ReferenceWorker,
)
from ascent.workers.config import ImplicitPRMConfig, TeacherConfig
from ascent.workers.implicit_prm import ImplicitPRMWorker
from ascent.workers.reward_model import RewardModelWorker
from ascent.workers.rollout import RolloutConfig, RolloutWorker
from ascent.workers.teacher import TeacherWorker


def actor_config(config: RLConfig, plan: Plan) -> ActorConfig:
    a = config.actor
    correction, stale = a.rollout_correction, config.trainer.mode != "sync"
    if correction.mode is None:
        correction = correction.model_copy(update={"mode": "truncate" if stale else "none"})
    if correction.anchor is None:  # stale rollouts: the clip bounds the move from them
        correction = correction.model_copy(update={"anchor": "rollout" if stale else "trainer"})
    return ActorConfig(
        model=config.model,
        optim=a.optim,
        fsdp=a.fsdp,
        loss=PolicyLossSettings(name=plan.loss, params=plan.loss_params),
        aggregation=plan.aggregation,
        entropy_coef=a.entropy_coef,
        router_replay=a.router_replay,
        router_aux_loss_coef=a.router_aux_loss_coef,
        kl_coef=plan.kl_coef if plan.kl_mode == "loss" else 0.0,
        kl_estimator=plan.kl_estimator,
        temperature=config.rollout.temperature,  # the trainer scores tokens as they were sampled
        max_response_length=config.rollout.max_response_length,
        rollout_correction=correction,
        epochs=a.epochs_per_step,
        mini_batches=plan.actor_mini_batches,
        tokens_per_micro_batch=a.tokens_per_micro_batch,
        parallel=a.parallel,
        distill=config.teacher.loss_settings() if config.teacher is not None else None,
    )


def critic_config(config: RLConfig, plan: Plan) -> CriticConfig:
    c = config.critic
    # The policy's checkpoint with all its settings (packing, attention, checkpointing), all
    # weights trained (no LoRA); critic.model configures the critic on its own.
    base = config.model.model_copy(update={"lora": None})
    return CriticConfig(
        model=c.model or base,
        optim=c.optim,
        fsdp=c.fsdp,
        value_clip=c.value_clip,
        aggregation=plan.aggregation,
        epochs=c.epochs_per_step,
        mini_batches=plan.critic_mini_batches,
        tokens_per_micro_batch=c.tokens_per_micro_batch,
        parallel=c.parallel,
    )


def implicit_prm_config(config: RLConfig, plan: Plan) -> ImplicitPRMConfig:
    p = config.implicit_prm
    # Like the critic: the policy's checkpoint and settings, all weights trained (no LoRA).
    base = config.model.model_copy(update={"lora": None})
    return ImplicitPRMConfig(
        model=p.model or base,
        optim=p.optim,
        fsdp=p.fsdp,
        beta=p.beta,
        temperature=config.rollout.temperature,  # as the reference reads the same tokens
        epochs=p.epochs_per_step,
        mini_batches=plan.prm_mini_batches,
        tokens_per_micro_batch=p.tokens_per_micro_batch,
    )


def reference_config(config: RLConfig) -> ReferenceConfig:
    model = config.model.model_copy(update={"lora": None, "gradient_checkpointing": False})
    return ReferenceConfig(
        model=model,
        fsdp=config.actor.fsdp,
        tokens_per_micro_batch=config.actor.tokens_per_micro_batch,
        temperature=config.rollout.temperature,
        parallel=config.actor.parallel,
    )


def teacher_worker_config(config: RLConfig, vocab_size: int) -> TeacherConfig:
    """The local teacher's worker config: frozen, no LoRA, at the rollout's temperature; its
    top-k drawn from the student's ``vocab_size`` ids."""
    teacher = config.teacher
    model = teacher.model.model_copy(update={"lora": None, "gradient_checkpointing": False})
    return TeacherConfig(
        model=model,
        fsdp=teacher.fsdp,
        tokens_per_micro_batch=teacher.tokens_per_micro_batch,
        temperature=config.rollout.temperature,
        top_k=teacher.top_k,
        vocab_limit=vocab_size,
    )


def rollout_config(config: RLConfig, colocated: bool, longest_prompt: int) -> RolloutConfig:
    """The rollout role's config. Its engines hold ``longest_prompt`` (the longest prompt the
    run loaded, at most ``data.max_prompt_length``) + ``rollout.max_response_length`` tokens
    per sequence: a KV cache sized by the 512-token default for 45-token prompts was 11x too
    big, and was allocated and zeroed again at every step."""
    r = config.rollout
    background = config.trainer.mode != "sync"
    # An agent's first request is rendered again with its tools' schemas: longer than the
    # loaded prompt, so agents keep the configured limit.
    prompt_room = config.data.max_prompt_length
    if r.agent is None:
        prompt_room = min(longest_prompt, prompt_room)
    return RolloutConfig(
        model=config.model.model_copy(update={"lora": None}),
        engine=r.engine,
        server=r.server,
        agent=r.agent,
        sampling=SamplingParams(
            n=r.samples_per_prompt,
            temperature=r.temperature,
            top_p=r.top_p,
            top_k=r.top_k,
            max_new_tokens=r.max_response_length,
            stop=r.stop,
            seed=config.trainer.seed,
        ),
        max_num_seqs=r.max_num_seqs,
        max_model_len=prompt_room + r.max_response_length,
        kv_cache_bytes=r.kv_cache_bytes,
        dtype=generation_dtype_of(config),
        free_cache_after_generate=colocated and not background,
        cuda_graphs=r.cuda_graphs,
        background=background,
        partial_rollouts=config.trainer.partial_rollouts,
    )


def generation_dtype_of(config: RLConfig) -> str:
    """``rollout.dtype``, its auto resolved to the actor's compute dtype when that is set:
    a float16 actor beside a bfloat16 generator would bring back the rounding mismatch that
    float16 removes (``auto`` alone means bfloat16 on CUDA, as the actor's unset dtype)."""
    param_dtype = config.actor.fsdp.param_dtype
    if config.rollout.dtype == "auto" and param_dtype is not None:
        return param_dtype
    return config.rollout.dtype


def spawn_roles(
    config: RLConfig, plan: Plan, longest_prompt: int, vocab_size: int
) -> dict[str, WorkerGroup]:
    """actor (+ reference, critic, implicit PRM, and the rollout, reward model and a local
    teacher when colocated) on the main pool; the rollout, the reward model and the teacher
    each on its own pool when its ``resources`` are set. ``longest_prompt``: tokens of the
    run's longest prompt; ``vocab_size``: the student tokenizer's (the teacher's top-k
    candidates)."""
    colocated = config.rollout.resources is None
    # The ranks that split a sequence or the weights are one replica: given the same rows.
    split = config.actor.parallel.replica
    roles = {"actor": Role(ActorWorker, args=(actor_config(config, plan),), replica_size=split)}
    if plan.reference and config.model.lora is None:  # with LoRA the actor is its own reference
        reference = reference_config(config)
        roles["reference"] = Role(ReferenceWorker, args=(reference,), replica_size=split)
    if plan.critic:
        critic = critic_config(config, plan)
        roles["critic"] = Role(CriticWorker, args=(critic,), replica_size=critic.parallel.replica)
    if plan.implicit_prm:
        roles["implicit_prm"] = Role(ImplicitPRMWorker, args=(implicit_prm_config(config, plan),))
    if colocated:
        roles["rollout"] = Role(RolloutWorker, args=(rollout_config(config, True, longest_prompt),))
    scorer = config.reward_model
    if scorer is not None and scorer.resources is None:
        roles["reward_model"] = Role(RewardModelWorker, args=(scorer.worker_config(),))
    teacher = config.teacher if config.teacher is not None and config.teacher.model else None
    if teacher is not None:
        teacher_role = Role(TeacherWorker, args=(teacher_worker_config(config, vocab_size),))
        if teacher.resources is None:
            roles["teacher"] = teacher_role
    options = {
        "backend": config.resources.backend,
        "ray_address": config.resources.ray_address,
        "seed": config.trainer.seed,
        "deterministic": config.trainer.deterministic,
    }
    groups = spawn_groups(roles, config.resources.pool(), **options)
    own_devices = []
    if not colocated:
        role = Role(RolloutWorker, args=(rollout_config(config, False, longest_prompt),))
        own_devices.append(("rollout", role, config.rollout.resources))
    if scorer is not None and scorer.resources is not None:
        role = Role(RewardModelWorker, args=(scorer.worker_config(),))
        own_devices.append(("reward_model", role, scorer.resources))
    if teacher is not None and teacher.resources is not None:
        own_devices.append(("teacher", teacher_role, teacher.resources))
    try:
        for name, role, own in own_devices:
            separate = spawn_groups(
                {name: role},
                own.pool(),
                backend=own.backend,
                ray_address=own.ray_address or config.resources.ray_address,
                seed=config.trainer.seed,
                deterministic=config.trainer.deterministic,
            )
            groups[name] = separate[name]
    except BaseException:  # the groups already up would outlive the failed start
        for group in {id(g.hosts): g for g in groups.values()}.values():
            group.shutdown()
        raise
    return groups
