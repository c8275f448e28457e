"""One trained model of the Tinker service: a causal LM (LoRA adapters of the client's rank
on it, or all its weights) on ascent's FSDP2 engine, driven call by call by the client.

``forward_backward`` lays a call's datums end to end as packed rows (positions restart per
datum, so none attends across), scores each position's target token with the engine's
chunked log-prob head, and sums each datum's loss (``ascent.service.losses``); gradients
add up until ``optim_step``, which runs AdamW with the client's parameters (learning rate,
betas, eps, decoupled weight decay, and clipping at ``grad_clip_norm`` unless 0).
"""

from pathlib import Path

import torch
from torch import Tensor

from ascent.controller import Dispatch, Worker, register
from ascent.engine.config import FSDPConfig, LoraSettings, OptimConfig
from ascent.engine.export import export_hf
from ascent.engine.fsdp import TrainEngine
from ascent.engine.modules import PolicyModule
from ascent.engine.state import load_engine, save_engine
from ascent.engine.token_budget import plan_micro_batches
from ascent.models.loading import load_causal_lm
from ascent.models.lora import apply_lora
from ascent.service.losses import loss_of
from ascent.service.wire import Datum, WireError

# Module names (as peft matches them: by suffix) of the Tinker LoRA config's switches. Not
# ``train_unembed``: ascent's log-prob head scores hidden states against the head's weight in
# chunks, so an adapter on the head would not take part; the head keeps its weights.
LORA_TARGETS = {
    "train_attn": ("q_proj", "k_proj", "v_proj", "o_proj"),
    "train_mlp": ("gate_proj", "up_proj", "down_proj"),
}
LORA_ALPHA = 32.0  # the adapters' scale is alpha / rank


class TinkerModelWorker(Worker):
    """``forward_backward``, ``optim_step``, ``save_state`` / ``load_state`` of one model.

    ``settings``: ``path`` (the base checkpoint), ``lora`` (the create_model request's
    ``lora_config``: rank, seed, train_attn / train_mlp / train_unembed; None for all
    weights), ``tokens_per_micro_batch``, ``chunk_tokens``."""

    def __init__(self, settings: dict) -> None:
        if self.ctx.world_size != 1:
            raise ValueError("a Tinker model runs on one rank for now (ranks=1)")
        model = load_causal_lm(settings["path"])
        self.vocab = model.get_output_embeddings().weight.shape[0]
        lora = settings.get("lora")
        if lora is not None:
            torch.manual_seed(lora.get("seed") or 0)  # the adapters' initialisation
            targets = [
                name
                for switch, names in LORA_TARGETS.items()
                if lora.get(switch, True)
                for name in names
            ]
            if not targets:
                raise WireError(
                    "lora_config trains nothing: set train_attn or train_mlp (the head has none)"
                )
            model = apply_lora(
                model, LoraSettings(rank=lora["rank"], alpha=LORA_ALPHA, target_modules=targets)
            )
        self.budget = settings.get("tokens_per_micro_batch", 8192)
        module = PolicyModule(model, chunk_tokens=settings.get("chunk_tokens", 1024))
        self.engine = TrainEngine(
            module, device=self.device, fsdp=FSDPConfig(), optim=OptimConfig(lr=1e-4)
        )

    def _check(self, datum: Datum, index: int, needs: tuple[str, ...]) -> None:
        length = datum.tokens.numel()
        if length == 0:
            raise WireError(f"datum {index}: an empty model_input")
        for name in needs:
            if name not in datum.inputs:
                raise WireError(f"datum {index}: loss_fn_inputs lacks {name!r}")
        for name, value in datum.inputs.items():
            if value.dim() != 1 or value.numel() != length:
                raise WireError(
                    f"datum {index}: loss_fn_inputs[{name!r}] has shape {list(value.shape)}; "
                    f"it must be [{length}], one value per model_input token"
                )
        for name, ids in (
            ("model_input", datum.tokens),
            ("target_tokens", datum.inputs["target_tokens"]),
        ):
            if int(ids.min()) < 0 or int(ids.max()) >= self.vocab:
                raise WireError(
                    f"datum {index}: {name} has ids outside the vocabulary [0, {self.vocab})"
                )

    def _log_probs(self, data: list[Datum]) -> list[Tensor]:
        """Each datum's target log-probs (N_i,), from one packed forward of ``data``."""
        device = self.device
        ids = torch.cat([d.tokens for d in data]).to(device)
        positions = torch.cat([torch.arange(d.tokens.numel()) for d in data]).to(device)
        targets = torch.cat([d.inputs["target_tokens"] for d in data]).to(device)
        log_probs, _ = self.engine.module(
            ids.unsqueeze(0),
            position_ids=positions.unsqueeze(0),
            query_index=torch.arange(ids.numel(), device=device),
            targets=targets,
            compute_entropy=False,
        )
        return list(log_probs.split([d.tokens.numel() for d in data]))

    @register(Dispatch.ALL)
    def forward_backward(
        self, data: list[Datum], loss_fn: str, config: dict, forward_only: bool
    ) -> tuple[list[Tensor], dict[str, float]]:
        """Per-datum target log-probs and ``loss:sum``; with ``forward_only`` no gradient."""
        loss, needs = loss_of(loss_fn)
        for index, datum in enumerate(data):
            self._check(datum, index, needs)
        self.engine.train(not forward_only)
        outputs: list[Tensor | None] = [None] * len(data)
        total = 0.0
        plan = plan_micro_batches([d.tokens.numel() for d in data], self.budget)
        for group in plan:
            part = [data[i] for i in group]
            with torch.set_grad_enabled(not forward_only):
                log_probs = self._log_probs(part)
                inputs = [{k: v.to(self.device) for k, v in d.inputs.items()} for d in part]
                value = sum(loss(lp, i, config) for lp, i in zip(log_probs, inputs, strict=True))
            if not forward_only:
                self.engine.backward(value)
            total += float(value.detach())
            for index, lp in zip(group, log_probs, strict=True):
                outputs[index] = lp.detach().cpu()
        return outputs, {"loss:sum": total}

    @register(Dispatch.ALL)
    def optim_step(self, adam: dict) -> dict[str, float]:
        """One AdamW step with the client's ``adam_params``; the gradients are cleared."""
        engine = self.engine
        for group in engine.optimizer.param_groups:
            group.update(
                lr=adam["learning_rate"],
                initial_lr=adam["learning_rate"],
                betas=(adam["beta1"], adam["beta2"]),
                eps=adam["eps"],
                weight_decay=adam["weight_decay"],
            )
        engine.scheduler.base_lrs = [adam["learning_rate"]] * len(engine.optimizer.param_groups)
        clip = adam.get("grad_clip_norm") or None
        engine.optim_config = engine.optim_config.model_copy(update={"grad_clip": clip})
        result = engine.step()
        metrics = {"grad_norm:mean": result.grad_norm, "learning_rate:mean": adam["learning_rate"]}
        return {k: float(v) for k, v in metrics.items()}

    @register(Dispatch.ALL)
    def save_state(self, directory: str, with_optimizer: bool = True) -> None:
        save_engine(self.engine, Path(directory), with_optimizer=with_optimizer)

    @register(Dispatch.ALL)
    def load_state(self, directory: str) -> None:
        load_engine(self.engine, Path(directory))

    @register(Dispatch.ALL)
    def export(self, directory: str, source: str) -> None:
        """The merged weights as a transformers checkpoint (a sampler's weights)."""
        export_hf(self.engine, source, directory)
