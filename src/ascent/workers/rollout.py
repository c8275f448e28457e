"""The rollout role: generation for the RL loop, colocated with the actor or on its own
devices, with weights refreshed from the actor. The generation itself is a backend
(``ascent.rollout.backends.start_backend``); what a row is, a sample or an agent's episode,
is plugged in (``SampleRollouts``, ``ascent.agents.rollouts.EpisodeRollouts``, or an outside
agent's through the gateway, ``ascent.gateway.rollouts.OutsideRollouts``)."""

import asyncio
from collections.abc import Iterable

import torch
from pydantic import Field

from ascent.agents.config import AGENT_HELP, AgentConfig
from ascent.agents.rollouts import EpisodeRollouts
from ascent.batch import Batch
from ascent.controller import Dispatch, Worker, register
from ascent.engine.modules import unwrap
from ascent.models.loading import load_tokenizer
from ascent.rollout.backends import start_backend
from ascent.rollout.background import BackgroundBackend
from ascent.rollout.config import GenerationConfig
from ascent.rollout.protocol import Capability, WeightReceiver
from ascent.rollout.types import SamplingParams
from ascent.workers.rollout_samples import SampleRollouts


class RolloutConfig(GenerationConfig):
    """The rollout role: the generator (``GenerationConfig``) and how the role uses it."""

    agent: AgentConfig | None = Field(None, description=AGENT_HELP)
    stop_at_eos: bool = Field(True, description="Add the tokenizer's EOS to the stop tokens.")
    free_cache_after_generate: bool = Field(
        True, description="Release the KV cache after each generate (colocated training)."
    )
    background: bool = Field(
        False,
        description="Generation beside training (submit now, take later; trainer.mode "
        "one_step_off or async): new weights are copied in between two decode steps, never "
        "aliased to the trainer's, and the cache is kept.",
    )
    partial_rollouts: bool = Field(
        True,
        description="background: responses in flight at a weight update go on under the new "
        "weights (tokens record their versions); false: they restart from their prompts.",
    )


class RolloutWorker(Worker):
    """``generate`` turns prompts into scored-ready rollouts in the training layout.

    Input: ``prompts`` (B, P) token ids, left-padded, and ``prompt_mask`` (B, P). Output:
    every input row repeated ``n`` times (its other fields, ``uid`` included, copied along),
    plus ``responses``, ``response_mask``, ``rollout_log_probs``, ``rollout_weight_versions``
    (the weight version that sampled each token) (B * n, max_new_tokens),
    ``input_ids`` / ``attention_mask`` (prompt then response), ``finish_reason`` per row, and
    the engine's ``weight_version`` in the meta.
    """

    def __init__(self, config: RolloutConfig | dict) -> None:
        self.config = RolloutConfig.model_validate(config)
        cfg = self.config
        self.tokenizer = load_tokenizer(
            cfg.model.path, trust_remote_code=cfg.model.trust_remote_code
        )
        self.pad_id = self.tokenizer.pad_token_id
        if self.pad_id is None:
            self.pad_id = self.tokenizer.eos_token_id or 0
        self._update: WeightReceiver | None = None
        self._submitted: dict[str, tuple[Batch, SamplingParams]] = {}
        self.backend = start_backend(cfg, self.tokenizer, self.ctx.dp_rank, self.device)
        if cfg.background:
            self.backend = BackgroundBackend(self.backend, cfg.partial_rollouts)
        self.engine = self.backend.engine  # an in-process engine (native, transformers)
        version = lambda: self.backend.version  # noqa: E731
        if cfg.agent is None:
            self.rows = SampleRollouts(self.backend, pad_id=self.pad_id, weight_version=version)
        elif cfg.agent.run is not None:
            from ascent.gateway.rollouts import OutsideRollouts  # its server only where used

            self.rows = OutsideRollouts(
                cfg.agent, self.backend, pad_id=self.pad_id, weight_version=version
            )
        else:
            self.rows = EpisodeRollouts(
                cfg.agent,
                self.backend,
                self.tokenizer,
                max_model_len=cfg.max_model_len,
                pad_id=self.pad_id,
                weight_version=version,
                model_dir=cfg.model.path,
            )

    def close(self) -> None:
        """Stop what the rows and the backend started (an outside agent's gateway, vLLM
        servers, the native step thread, the loop beside training)."""
        if hasattr(getattr(self, "rows", None), "close"):
            self.rows.close()  # the gateway, before the engine it serves
        if getattr(self, "backend", None) is not None:
            asyncio.run(self.backend.close())

    @property
    def weight_version(self) -> int:
        return self.backend.version

    def sampling(self, overrides: dict | None = None) -> SamplingParams:
        """The default sampling with ``overrides``, plus EOS as a stop token if configured."""
        params = self.config.sampling.model_copy(update=overrides or {})
        eos = self.tokenizer.eos_token_id
        if self.config.stop_at_eos and eos is not None and eos not in params.stop_token_ids:
            params = params.model_copy(update={"stop_token_ids": [*params.stop_token_ids, eos]})
        return SamplingParams.model_validate(params.model_dump())

    @register(Dispatch.DP)
    def generate(self, batch: Batch, sampling: dict | None = None) -> Batch:
        missing = [f for f in ("prompts", "prompt_mask") if f not in batch]
        if missing:
            raise KeyError(f"rollout needs batch fields {missing}; the batch has {batch.keys()}")
        out = self.rows.generate(batch, self.sampling(sampling))
        if self.config.free_cache_after_generate and hasattr(self.engine, "sleep"):
            self.engine.sleep()
        return out

    # -- generation beside training (rollout.background) ---------------------------------

    @register(Dispatch.DP)
    def start_rollouts(
        self, batch: Batch, tag: str, sampling: dict | None = None, together: bool = False
    ) -> None:
        """Start generating ``batch``'s rollouts and return at once; ``take_rollouts(tag)`` waits
        for them. The engine decodes on its own thread meanwhile, and weight updates land
        between two of its steps. ``together``: the batch is admitted whole, as
        ``generate`` would (reproducible: see ``RolloutBackend.generate_together``)."""
        if not isinstance(self.backend, BackgroundBackend):
            raise RuntimeError("start_rollouts needs rollout.background=true (trainer.mode async)")
        if Capability.REQUEST_LEVEL not in self.backend.capabilities:
            raise ValueError(
                f"generation beside training needs a request-level engine, not the "
                f"{self.backend.name}"
            )
        params = self.sampling(sampling)
        self.rows.submit(tag, batch, params, together)
        self._submitted[tag] = (batch, params)

    @register(Dispatch.DP)
    def take_rollouts(self, tag: str) -> Batch:
        """The rollouts of ``start_rollouts(batch, tag)``, as ``generate`` returns them."""
        if tag not in self._submitted:
            raise KeyError(f"no rollouts {tag!r} were submitted to this rank")
        batch, params = self._submitted.pop(tag)
        return self.rows.collect(batch, self.backend.take(tag), params)

    @register(Dispatch.RANK_ZERO)
    def background_counters(self) -> dict[str, float]:
        """Rank 0's running totals: seconds with generation in flight (busy_s) and responses
        regenerated after weight updates (restarted; partial_rollouts=false)."""
        if not isinstance(self.backend, BackgroundBackend):
            return {"busy_s": 0.0, "restarted": 0.0}
        return {
            "busy_s": self.backend.busy_seconds(),
            "restarted": float(self.backend.restarted),
        }

    # -- weights: every backend takes them the same way (``refresh_weights``) ---------------

    @register(Dispatch.ALL)
    def sync_from_colocated(
        self, role: str = "actor", check: bool = False, *, version: int
    ) -> dict:
        """Refresh from the ``role`` worker in this process; the new weights are ``version``
        (the trainer's number for them).

        An unsharded actor (one rank, no LoRA to merge) offers its own tensors, which an idle
        in-process engine aliases (no copy) when dtype and device match; otherwise every
        rank streams the full weights (one all-gather per tensor). A server writes them for
        its reload; generation beside training copies them in between two decode steps.
        ``check`` compares engine and actor weights afterwards (debug; gathers again)."""
        actor = self.ctx.colocated(role).engine
        named, alias = self._actor_weights(actor)
        version = self.backend.call(self.backend.refresh_weights(named, version, alias=alias))
        difference = None  # a server's weights cannot be read back
        if check and self.engine is not None:
            difference = self.engine.max_weight_difference(actor.full_weights())
        return {"weight_version": version, "max_weight_difference": difference}

    def _actor_weights(self, actor: object) -> tuple[Iterable[tuple[str, torch.Tensor]], bool]:
        """(name, tensor) pairs of the actor's weights, and whether the backend may alias
        them: they are the actor's own tensors (safe to alias while the trainer does not
        step) and the backend declares it can keep them uncopied."""
        model = unwrap(actor.module.model)
        if self.world_size > 1 or model is not actor.module.model:
            return actor.full_weights(), False
        actor.reshard()  # alias the persistent shards, never a transient gathered copy
        params = model.named_parameters()
        own = ((n, p.to_local() if hasattr(p, "to_local") else p) for n, p in params)
        return own, Capability.WEIGHT_ALIASING in self.backend.capabilities

    @register(Dispatch.ALL)
    def begin_weight_update(self, version: int) -> None:
        """Start a refresh that arrives in buckets (``load_weight_bucket``); the new weights
        will be ``version``."""
        self._update = self.backend.weight_update(version)

    @register(Dispatch.ALL)
    def load_weight_bucket(self, bucket: dict[str, torch.Tensor]) -> None:
        if self._update is None:
            raise RuntimeError("load_weight_bucket before begin_weight_update")
        self._update.load(bucket.items())

    @register(Dispatch.ALL)
    def finish_weight_update(self) -> int:
        """Check every weight arrived; returns the new weight version."""
        if self._update is None:
            raise RuntimeError("finish_weight_update before begin_weight_update")
        update, self._update = self._update, None
        return update.finish()

    @register(Dispatch.ALL)
    def weight_difference(self, reference: dict[str, torch.Tensor]) -> float:
        """Debug check: the largest |engine - reference| over the given weights."""
        if self.engine is None:
            raise RuntimeError(
                f"weight_difference needs an in-process engine, not {self.config.engine}"
            )
        return self.engine.max_weight_difference(reference.items())
