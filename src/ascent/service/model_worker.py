"""One trained model of the Tinker service: a causal LM (LoRA adapters of the client's rank
on it, or all its weights) on ascent's FSDP2 engine, driven call by call by the client.

``forward_backward`` lays a call's datums end to end as packed rows (positions restart per
datum, so none attends across), scores each position's target token with the engine's
chunked log-prob head, and sums each datum's loss (``ascent.service.losses``); gradients
add up until ``optim_step``, which runs AdamW with the client's parameters (learning rate,
betas, eps, decoupled weight decay, and clipping at ``grad_clip_norm`` unless 0).

On W ranks (data parallel, FSDP2 over all of them) every rank gets the whole call and takes
its share of the datums (``spread_rows``, by tokens); the ranks agree on one number of
micro-batches, a rank short of datums running filler passes of no weight. FSDP averages the
gradients over the ranks, so each rank's loss is scaled by W: the sum of every datum's
gradient, as on one rank. Each rank returns its datums' outputs (``RankOutputs``); the
driver puts them back in order (``merge_outputs``).
"""

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from ascent.controller import Dispatch, Worker, register
from ascent.engine.config import ModelConfig
from ascent.engine.export import export_hf
from ascent.engine.fsdp import TrainEngine
from ascent.engine.modules import PolicyModule
from ascent.engine.state import load_engine, save_engine
from ascent.engine.token_budget import spread_rows, synchronized_micro_batches
from ascent.models.loading import load_causal_lm
from ascent.models.lora import apply_lora
from ascent.service.config import TrainingSettings
from ascent.service.lora_config import lora_settings
from ascent.service.losses import loss_of, numeric_config
from ascent.service.wire import Datum, WireError

# A filler pass (a rank with no datum left for a micro-batch the others run): one token.
FILLER = Datum(
    torch.zeros(1, dtype=torch.long), {"target_tokens": torch.zeros(1, dtype=torch.long)}
)


@dataclass
class RankOutputs:
    """One rank's part of a ``forward_backward``: its datums' indices in the call, their
    target log-probs (N_i,), and the sum of their losses."""

    indices: list[int]
    log_probs: list[Tensor]
    loss_sum: float


def merge_outputs(parts: list[RankOutputs], count: int) -> tuple[list[Tensor], dict[str, float]]:
    """Every rank's part -> the call's per-datum log-probs in order, and ``loss:sum``."""
    outputs: list[Tensor | None] = [None] * count
    for part in parts:
        for index, log_probs in zip(part.indices, part.log_probs, strict=True):
            outputs[index] = log_probs
    missing = [index for index, out in enumerate(outputs) if out is None]
    if missing:
        raise RuntimeError(f"no rank scored datums {missing}")
    return outputs, {"loss:sum": sum(part.loss_sum for part in parts)}


class TinkerModelWorker(Worker):
    """``forward_backward``, ``optim_step``, ``save_state`` / ``load_state`` of one model.

    ``model``: the base checkpoint; ``training``: the service's settings of every trained
    model; ``lora``: the create_model request's ``lora_config`` (rank, seed, train_attn /
    train_mlp / train_unembed), None for all weights."""

    def __init__(self, model: ModelConfig, training: TrainingSettings, lora: dict | None) -> None:
        network = load_causal_lm(
            model.path,
            trust_remote_code=model.trust_remote_code,
            attn_implementation=model.attn_implementation,
        )
        self.vocab = network.get_output_embeddings().weight.shape[0]
        if lora is not None:  # the same adapters on every rank, from the client's seed
            settings = lora_settings(lora, training.lora_alpha, network)
            network = apply_lora(network, settings, seed=lora.get("seed") or 0)
        self.budget = training.tokens_per_micro_batch
        self.engine = TrainEngine(
            PolicyModule(network, chunk_tokens=training.chunk_tokens),
            device=self.device,
            fsdp=training.fsdp,
            optim=training.optim(),
            gradient_checkpointing=model.gradient_checkpointing,
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
    ) -> RankOutputs:
        """This rank's datums' target log-probs and loss sum; with ``forward_only`` no
        gradient (module docstring)."""
        loss, needs = loss_of(loss_fn)
        config = numeric_config(config)
        for index, datum in enumerate(data):
            self._check(datum, index, needs)
        self.engine.train(not forward_only)
        ranks, rank = self.ctx.world_size, self.ctx.rank
        mine = spread_rows([d.tokens.numel() for d in data], ranks)[rank]
        plan = synchronized_micro_batches(
            [data[i].tokens.numel() for i in mine], self.budget, self.device, fill_empty=True
        )
        result = RankOutputs([], [], 0.0)
        for group in plan:
            part = [data[mine[i]] for i in group] or [FILLER]
            with torch.set_grad_enabled(not forward_only):
                log_probs = self._log_probs(part)
                if not group:  # a filler: the passes' collectives, nothing learnt
                    value = 0.0 * log_probs[0].sum()
                else:
                    inputs = [{k: v.to(self.device) for k, v in d.inputs.items()} for d in part]
                    value = sum(
                        loss(lp, i, config) for lp, i in zip(log_probs, inputs, strict=True)
                    )
            if not forward_only:
                self.engine.backward(value * ranks)  # FSDP averages over the ranks
            if group:
                result.loss_sum += float(value.detach())
                result.indices += [mine[i] for i in group]
                result.log_probs += [lp.detach().cpu() for lp in log_probs]
        return result

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
        return {k: float(v) for k, v in metrics.items()}  # the same on every rank

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
