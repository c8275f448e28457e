"""The actor: the policy being trained, and (with LoRA) its own reference."""

import torch

from ascent.algos import (
    LossNormalizer,
    PolicyLossInputs,
    actor_objective,
    compute_policy_loss,
    rollout_correction,
)
from ascent.batch import Batch
from ascent.controller import Dispatch, Worker, register
from ascent.engine.weights import buckets
from ascent.workers.common import (
    EngineCheckpoints,
    check_replicas,
    gather_full_weights,
    pack,
    policy_forward,
    require,
    response_length,
    response_log_probs,
    train,
    trainable_policy_engine,
)
from ascent.workers.config import ActorConfig
from ascent.workers.distill_terms import distillation_terms, teacher_targets
from ascent.workers.policy_routing import PolicyRouting

TOKENS = ("input_ids", "attention_mask", "responses")


class ActorWorker(EngineCheckpoints, Worker):
    """``log_probs`` (old log-probs), ``ref_log_probs`` (LoRA only), ``update``."""

    def __init__(self, config: ActorConfig | dict) -> None:
        self.config = ActorConfig.model_validate(config)
        check_replicas(self.ctx, self.config.parallel)
        self.packed = self.config.model.packed
        self.engine = trainable_policy_engine(self.config, self.device, self.config.parallel)
        replay = self.config.router_replay == "rollout"
        self.routing = PolicyRouting(self.engine, replay, self.config.router_aux_loss_coef)

    @register(Dispatch.DP)
    def log_probs(self, batch: Batch) -> Batch:
        """``old_log_probs`` and ``entropy`` (B, R) of the responses under the current policy."""
        return self._log_probs(batch, "old_log_probs")

    @register(Dispatch.DP)
    def ref_log_probs(self, batch: Batch) -> Batch:
        """``ref_log_probs`` (B, R) with the LoRA adapters disabled: the base model is the
        reference, and no second copy of it is held."""
        if self.config.model.lora is None:
            raise ValueError(
                "ref_log_probs on the actor needs LoRA; use a ReferenceWorker otherwise"
            )
        with self.engine.module.model.disable_adapter():
            return self._log_probs(batch, "ref_log_probs", with_entropy=False)

    def _log_probs(self, batch: Batch, name: str, with_entropy: bool = True) -> Batch:
        require(batch, "actor", *TOKENS)
        self.routing.require_routes(batch, "actor")
        log_probs, entropy = response_log_probs(
            self.engine, batch, self.device, self.config, self.packed, self._forward
        )
        fields = {name: log_probs, "entropy": entropy} if with_entropy else {name: log_probs}
        return Batch.from_dict(fields)

    @register(Dispatch.DP)
    def update(self, batch: Batch) -> dict[str, float]:
        """Epochs x mini-batches (one optimiser step each) x token-budget micro-batches of the
        configured policy loss, entropy bonus, KL loss and rollout correction.

        Needs ``response_mask`` and ``advantages`` (B, R); ``old_log_probs`` (else the batch
        is taken as on-policy: lp_old = lp_new detached), ``ref_log_probs`` when
        ``kl_coef > 0``, ``rollout_log_probs`` for rollout correction. Returns the same
        rank-averaged metrics on every rank (``actor/pg_loss``, ``actor/grad_norm``, ...).
        """
        cfg = self.config
        require(batch, "actor.update", *TOKENS, "response_mask", "advantages")
        self.routing.require_routes(batch, "actor.update")
        if cfg.kl_coef > 0:
            require(batch, "actor.update with kl_coef > 0", "ref_log_probs")
        if cfg.distill is not None and cfg.distill.reverse_kl_coef > 0:
            require(batch, "actor.update with a reverse KL loss", "teacher_log_probs")
        if cfg.distill is not None and cfg.distill.forward_kl_top_k_coef > 0:
            require(batch, "actor.update with a top-k forward KL", "teacher_top_ids")
        return train(
            self.engine,
            batch,
            cfg,
            self._micro_loss,
            role="actor",
            norm_length=cfg.max_response_length or response_length(batch),
            dp_size=self.ctx.dp_size,
            padded=not self.packed,
            scored_loss=self._objective,
            temperature=cfg.temperature,
        )

    def _forward(self, micro: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probs and entropy (B, R) of a micro-batch (the rollout's routes replayed)."""
        layout = pack(micro, self.engine, self.packed)
        with self.routing.routed(micro, layout):
            return policy_forward(
                self.engine, micro, self.device, self.config.temperature, self.packed, layout
            )

    def _micro_loss(self, micro: Batch, normalizer: LossNormalizer) -> tuple[torch.Tensor, dict]:
        cfg, device = self.config, self.device
        layout = pack(micro, self.engine, self.packed)
        top_k = cfg.distill is not None and cfg.distill.forward_kl_top_k_coef > 0
        # With the top-k forward KL, each query also scores the teacher's top-k tokens.
        targets = teacher_targets(micro, layout, device) if top_k else None
        with self.routing.routed(micro, layout) as routed:  # a no-op for a dense model
            log_probs, entropy = policy_forward(
                self.engine, micro, device, cfg.temperature, self.packed, layout, targets
            )
        student_top = None
        if targets is not None:
            log_probs, student_top = log_probs[..., 0], log_probs[..., 1:]
        loss, metrics = self._objective(micro, (log_probs, entropy), normalizer, student_top)
        mask = micro["response_mask"]
        share = float(mask.sum()) * normalizer.dp_size / max(normalizer.num_tokens, 1.0)
        balance, routing_metrics = self.routing.terms(layout, routed, share)
        loss = loss if balance is None else loss + balance
        return loss, metrics | routing_metrics

    def _objective(
        self,
        micro: Batch,
        scored: tuple[torch.Tensor, torch.Tensor],
        normalizer: LossNormalizer,
        student_top: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict]:
        """The micro-batch's share of the actor's loss from its log-probs and entropy
        ``scored`` (B, R) (and the student's log-probs of the teacher's top-k tokens)."""
        cfg, device = self.config, self.device
        log_probs, entropy = scored
        mask = micro["response_mask"].to(device)
        old = micro["old_log_probs"].to(device) if "old_log_probs" in micro else log_probs.detach()
        behaviour = micro["rollout_log_probs"].to(device) if "rollout_log_probs" in micro else None
        # Anchored at the rollout, the ratio is itself the importance weight against the
        # weights that sampled, and the clip bounds the move away from them.
        anchored = cfg.rollout_correction.anchor == "rollout" and behaviour is not None
        inputs = PolicyLossInputs(
            log_probs, behaviour if anchored else old, micro["advantages"].to(device), mask
        )
        policy = compute_policy_loss(cfg.loss.name, inputs, **cfg.loss.params)
        metrics: dict = {}
        weights = None
        if behaviour is not None:
            settings = cfg.rollout_correction
            # Anchored, the ratio already weights; masking and rejection still drop samples.
            mode = settings.mode or "none"
            mode = "none" if anchored and mode == "truncate" else mode
            correction = rollout_correction(
                old,
                behaviour,
                mask,
                level=settings.level,
                mode=mode,
                lower=settings.lower,
                upper=settings.upper,
                reject_above=settings.reject_above,
            )
            weights = correction.weights if mode != "none" else None
            metrics |= {f"rollout_{k}": v for k, v in correction.metrics.items()}
        reference = micro["ref_log_probs"].to(device) if "ref_log_probs" in micro else None
        objective = actor_objective(
            policy,
            mask,
            mode=cfg.aggregation,
            normalizer=normalizer,
            weights=weights,
            entropy=entropy,
            entropy_coef=cfg.entropy_coef,
            log_probs=log_probs,
            ref_log_probs=reference,
            kl_coef=cfg.kl_coef,
            kl_estimator=cfg.kl_estimator,
            terms=distillation_terms(cfg.distill, micro, log_probs, student_top, mask),
        )
        return objective.loss, metrics | objective.metrics

    @register(Dispatch.RANK_ZERO)
    def weight_bucket_count(self, bucket_bytes: int) -> int:
        """How many buckets of at most ``bucket_bytes`` the full weights make."""
        return len(buckets(self.engine.weight_layout(), bucket_bytes))

    @register(Dispatch.ALL)
    def weight_bucket(self, index: int, bucket_bytes: int) -> dict[str, torch.Tensor] | None:
        """Bucket ``index`` of the full weights (LoRA merged) on rank 0, on the CPU; None on
        the other ranks, which take part in the gathers. Sending the weights to a rollout
        on other devices bucket by bucket bounds the memory a transfer needs."""
        names = set(buckets(self.engine.weight_layout(), bucket_bytes)[index])
        bucket = {name: tensor.cpu() for name, tensor in self.engine.full_weights(names)}
        return bucket if self.ctx.rank == 0 else None

    @register(Dispatch.ALL)
    def full_weights(self) -> dict[str, torch.Tensor] | None:
        """Every weight unsharded on rank 0 (None elsewhere); all ranks take part."""
        return gather_full_weights(self.engine, self.ctx.rank)
