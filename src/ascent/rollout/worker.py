"""The rollout role: generation for the RL loop, colocated with the actor or on its own
devices, with weights refreshed from the actor."""

import asyncio
from collections.abc import Iterable
from pathlib import Path

import torch

from ascent.batch import Batch
from ascent.controller import Dispatch, Worker, register
from ascent.engine.modules import unwrap
from ascent.models.loading import load_tokenizer
from ascent.rollout.background import BackgroundGeneration
from ascent.rollout.config import SERVER_ENGINES, RolloutConfig
from ascent.rollout.engine import NativeEngine, WeightUpdate, load_generation_model
from ascent.rollout.hf_engine import TransformersEngine
from ascent.rollout.http_backend import start_http_backend
from ascent.rollout.native_backend import NativeBackend
from ascent.rollout.types import Sample, SamplingParams
from ascent.rollout.weight_files import write_weights


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
        self._update: WeightUpdate | dict | None = None
        self._environments = None  # rollout.agent: a row -> a fresh environment
        self.engine = None  # an in-process engine (native, transformers)
        self.background: BackgroundGeneration | None = None  # see _background
        self._submitted: dict[str, tuple[Batch, SamplingParams]] = {}
        if cfg.engine in SERVER_ENGINES:
            self.backend = start_http_backend(cfg, self.tokenizer, self.ctx.dp_rank, self.device)
            return
        if cfg.engine == "native":
            self.engine = NativeEngine.load(cfg, self.device, self.tokenizer)
            self.backend = NativeBackend(self.engine)
        else:
            model = load_generation_model(cfg, self.device)
            self.engine = TransformersEngine(
                model, max_num_seqs=cfg.max_num_seqs, tokenizer=self.tokenizer
            )
            self.backend = None

    def close(self) -> None:
        """Stop what the backend started (vLLM servers, the native step thread)."""
        if getattr(self, "background", None) is not None:
            self.background.close()
        if getattr(self, "backend", None) is not None:
            asyncio.run(self.backend.close())

    @property
    def weight_version(self) -> int:
        return self.engine.weight_version if self.engine is not None else self.backend.version

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
        params = self.sampling(sampling)
        if self.config.agent is not None:
            return self._episodes(batch, params)
        prompts = _prompt_ids(batch)
        if self.backend is None:
            samples = self.engine.generate(prompts, params)
        else:
            samples = self.backend.generate_batch(prompts, params)
        if self.config.free_cache_after_generate and hasattr(self.engine, "sleep"):
            self.engine.sleep()
        return self._as_batch(batch, samples, params)

    # -- generation beside training (rollout.background) ---------------------------------

    @register(Dispatch.DP)
    def start_rollouts(
        self, batch: Batch, tag: str, sampling: dict | None = None, together: bool = False
    ) -> None:
        """Start generating ``batch``'s rollouts and return at once; ``take_rollouts(tag)`` waits
        for them. The engine decodes on its own thread meanwhile, and weight updates land
        between two of its steps. ``together``: the batch is admitted whole, as
        ``generate`` would (reproducible: see ``RolloutBackend.generate_together``)."""
        if not self.config.background:
            raise RuntimeError("start_rollouts needs rollout.background=true (trainer.mode async)")
        if self.backend is None:
            raise ValueError(
                "generation beside training needs a request-level engine, not transformers"
            )
        params = self.sampling(sampling)
        if self.config.agent is not None:
            self._background().submit_coroutine(tag, self._play(batch, params))
        else:
            self._background().submit(tag, _prompt_ids(batch), params, together)
        self._submitted[tag] = (batch, params)

    @register(Dispatch.DP)
    def take_rollouts(self, tag: str) -> Batch:
        """The rollouts of ``start_rollouts(batch, tag)``, as ``generate`` returns them."""
        if self.background is None or tag not in self._submitted:
            raise KeyError(f"no rollouts {tag!r} were submitted to this rank")
        batch, params = self._submitted.pop(tag)
        results = self.background.take(tag)
        if self.config.agent is not None:
            return self._episodes_batch(batch, results, params)
        return self._as_batch(batch, results, params)

    @register(Dispatch.RANK_ZERO)
    def background_counters(self) -> dict[str, float]:
        """Rank 0's running totals: seconds with generation in flight (busy_s) and responses
        regenerated after weight updates (restarted; partial_rollouts=false)."""
        if self.background is None:
            return {"busy_s": 0.0, "restarted": 0.0}
        return {
            "busy_s": self.background.busy_seconds(),
            "restarted": float(self.background.restarted),
        }

    def _load_in_background(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> int:
        """New weights between two decode steps of the running engine (copied)."""
        if self.engine is not None:
            tensors = list(named_tensors)
            apply = lambda: self.backend.update_weights(tensors)  # noqa: E731
        else:
            directory = self._write_for_server(named_tensors)
            apply = lambda: self.backend.update_weights_held(str(directory))  # noqa: E731

        return self._background().update_weights(apply, self.config.partial_rollouts)

    def _background(self) -> BackgroundGeneration:
        """The background loop, started by the first submit or weight update."""
        if self.background is None:
            self.background = BackgroundGeneration(self.backend)
        return self.background

    def _episodes(self, batch: Batch, params: SamplingParams) -> Batch:
        """``params.n`` multi-turn episodes per row (``rollout.agent``), as training rows."""

        async def play() -> list:
            try:
                return await self._play(batch, params)
            finally:
                await self.backend.release_connections()

        episodes = asyncio.run(play())
        if self.config.free_cache_after_generate and hasattr(self.engine, "sleep"):
            self.engine.sleep()
        return self._episodes_batch(batch, episodes, params)

    def _episodes_batch(self, batch: Batch, episodes: list, params: SamplingParams) -> Batch:
        from ascent.agents.episodes import episodes_batch

        out = episodes_batch(batch, episodes, params.n, params.max_new_tokens, self.pad_id)
        return out.with_meta(weight_version=self.weight_version)

    async def _play(self, batch: Batch, params: SamplingParams) -> list:
        """Play ``params.n`` episodes of every row against the backend."""
        # Imported here: the agent layer builds on the rollout package, not the reverse.
        from ascent.agents.episodes import environment_factory
        from ascent.agents.loop import AgentLimits, run_episodes

        if self.backend is None:
            raise ValueError("rollout.agent needs a request-level engine: native, serve or vllm")
        if self._environments is None:
            self._environments = environment_factory(self.config.agent)
        agent = self.config.agent
        limits = AgentLimits(
            max_turns=agent.max_turns,
            max_response_tokens=params.max_new_tokens,
            max_tool_response_tokens=agent.max_tool_response_tokens,
            max_model_len=self.config.max_model_len,
            on_drift=agent.on_template_drift,
            tools_in_prompt=agent.tools_in_prompt,
        )
        rows = [
            {
                "prompt": batch["raw_prompt"][i],
                "data_source": batch["data_source"][i],
                "reward_model": {"ground_truth": batch["ground_truth"][i]},
                "extra_info": batch["extra_info"][i],
                "tools": batch["tools"][i] if "tools" in batch else None,
            }
            for i in range(len(batch))
        ]
        return await run_episodes(
            self.backend, self.tokenizer, self._environments, rows, params, limits
        )

    def _as_batch(self, batch: Batch, samples: list[Sample], params: SamplingParams) -> Batch:
        width = params.max_new_tokens
        rows = len(samples)
        responses = torch.full((rows, width), self.pad_id, dtype=torch.long)
        response_mask = torch.zeros(rows, width, dtype=torch.long)
        log_probs = torch.zeros(rows, width, dtype=torch.float32)
        versions = torch.zeros(rows, width, dtype=torch.int32)
        for row, sample in enumerate(samples):
            count = len(sample.token_ids)
            responses[row, :count] = torch.tensor(sample.token_ids, dtype=torch.long)
            response_mask[row, :count] = 1
            if sample.log_probs is not None:
                log_probs[row, :count] = torch.tensor(sample.log_probs)
            versions[row, :count] = torch.tensor(
                sample.weight_versions or [sample.weight_version] * count, dtype=torch.int32
            )
        repeated = batch.repeat_interleave(params.n)
        return repeated.assign(
            responses=responses,
            response_mask=response_mask,
            rollout_log_probs=log_probs,
            rollout_weight_versions=versions,
            input_ids=torch.cat([repeated["prompts"], responses], dim=1),
            attention_mask=torch.cat([repeated["prompt_mask"].long(), response_mask], dim=1),
            finish_reason=[s.finish_reason for s in samples],
        ).with_meta(weight_version=self.weight_version)

    # -- weights ----------------------------------------------------------------------------

    @register(Dispatch.ALL)
    def sync_from_colocated(self, role: str = "actor", check: bool = False) -> dict:
        """Refresh from the ``role`` worker in this process.

        An unsharded actor (one rank) whose parameters have the engine's dtype and device is
        read in place: the engine's parameters alias the actor's tensors, no copy. Otherwise
        every rank streams the full weights (one all-gather per tensor) into its engine.
        ``check`` compares engine and actor weights afterwards (debug; gathers again). With
        ``background`` the weights are copied in between two decode steps of the running
        engine (aliased, the optimiser would change them under a decode step).
        """
        engine = self.ctx.colocated(role).engine
        if self.config.background:
            version = self._load_in_background(engine.full_weights())
        elif self.engine is None:  # a server: the weights travel through a safetensors directory
            version = self._refresh_server(engine.full_weights())
        else:
            engine.reshard()  # alias the persistent shards, never a transient gathered copy
            model = unwrap(engine.module.model)
            local = self.world_size == 1 and model is engine.module.model  # no LoRA to merge
            if local:
                named = (
                    (n, p.to_local() if hasattr(p, "to_local") else p)
                    for n, p in model.named_parameters()
                )
                version = self.engine.load_weights(named, alias=True)
            else:
                version = self.engine.load_weights(engine.full_weights())
        difference = None  # a server's weights cannot be read back
        if check and self.engine is not None:
            difference = self.engine.max_weight_difference(engine.full_weights())
        return {"weight_version": version, "max_weight_difference": difference}

    @register(Dispatch.ALL)
    def begin_weight_update(self) -> None:
        """Start a refresh that arrives in buckets (``load_weight_bucket``)."""
        gathered = self.engine is None or self.config.background  # applied at once, at the end
        self._update = {} if gathered else self.engine.begin_weight_update()

    @register(Dispatch.ALL)
    def load_weight_bucket(self, bucket: dict[str, torch.Tensor]) -> None:
        if self._update is None:
            raise RuntimeError("load_weight_bucket before begin_weight_update")
        if isinstance(self._update, dict):  # a server or background: gathered, then applied
            self._update.update(bucket)
        else:
            self._update.load(bucket.items())

    @register(Dispatch.ALL)
    def finish_weight_update(self) -> int:
        """Check every weight arrived; returns the new weight version."""
        if self._update is None:
            raise RuntimeError("finish_weight_update before begin_weight_update")
        if isinstance(self._update, dict):
            tensors, self._update = self._update, None
            if self.config.background:  # never half-new weights under a decode step
                return self._load_in_background(tensors.items())
            return self._refresh_server(tensors.items())
        version, self._update = self._update.finish(), None
        return version

    def _write_for_server(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> Path:
        """Write the weights where the server can read them; a frozen endpoint refuses."""
        if self.config.engine == "openai":
            raise RuntimeError(
                "rollout.engine=openai is a frozen endpoint: it cannot follow the trained "
                "policy. Use it for validation, a judge or a teacher; train with engine "
                "native, serve or vllm"
            )
        return write_weights(self.backend.weights_dir, named_tensors)

    def _refresh_server(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> int:
        """Write the weights where the server can read them and have it reload."""
        directory = self._write_for_server(named_tensors)

        async def reload() -> int:
            try:
                return await self.backend.update_weights_from_disk(str(directory))
            finally:
                await self.backend.release_connections()

        return asyncio.run(reload())

    @register(Dispatch.ALL)
    def weight_difference(self, reference: dict[str, torch.Tensor]) -> float:
        """Debug check: the largest |engine - reference| over the given weights."""
        if self.engine is None:
            raise RuntimeError(
                f"weight_difference needs an in-process engine, not {self.config.engine}"
            )
        return self.engine.max_weight_difference(reference.items())


def _prompt_ids(batch: Batch) -> list[list[int]]:
    """Each row's prompt tokens (``prompts`` without the left padding)."""
    return [
        row[mask.bool()].tolist()
        for row, mask in zip(batch["prompts"], batch["prompt_mask"], strict=True)
    ]
