"""What the actor, reference and critic share: batch field checks, packed forwards, and
micro-batched inference over a rank's share of a batch.

Batch layout (see ``ascent.engine.packing``): ``input_ids`` and ``attention_mask`` (B, L) hold
prompt then response; ``responses`` (B, R) are the last R columns; per-token training fields
(``response_mask``, ``old_log_probs``, ``advantages``, ...) are (B, R).
"""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ascent.algos import LossNormalizer
from ascent.batch import Batch
from ascent.controller import Dispatch, register
from ascent.engine.config import NO_SPLIT, ModelConfig, ParallelConfig
from ascent.engine.context_parallel import SplitAxes, shard_context
from ascent.engine.export import export_hf
from ascent.engine.fsdp import TrainEngine
from ascent.engine.mesh import TrainingMesh
from ascent.engine.modules import PolicyModule, unwrap
from ascent.engine.packing import PackedSequences, pack_for_responses
from ascent.engine.pipeline import PipelineEngine, make_engine
from ascent.engine.sequence_shard import SequenceShard
from ascent.engine.state import load_engine, save_engine
from ascent.engine.tensor_parallel import TensorPlan
from ascent.engine.token_budget import synchronized_micro_batches
from ascent.engine.ulysses import shard_sequence
from ascent.models.families import family_of
from ascent.models.families.registry import tensor_parallel_plan
from ascent.models.loading import load_causal_lm
from ascent.models.lora import apply_lora
from ascent.vision.prompts import vision_tower
from ascent.workers.config import MicroBatching
from ascent.workers.metrics import MetricAccumulator
from ascent.workers.mini_batches import normalized_mini_batches
from ascent.workers.pipeline_passes import ScoredLoss, pipeline_outputs, pipeline_train


def require(batch: Batch, role: str, *names: str) -> None:
    """A KeyError naming the fields ``role`` needs and the batch lacks."""
    missing = [name for name in names if name not in batch]
    if missing:
        raise KeyError(f"{role} needs batch fields {missing}; the batch has {batch.keys()}")


def response_length(batch: Batch) -> int:
    return batch["responses"].shape[1]


def token_counts(batch: Batch) -> list[int]:
    """Tokens (prompt + response) per row: the compute a row costs."""
    return batch["attention_mask"].sum(dim=-1).tolist()


def pack(batch: Batch, engine: TrainEngine, packed: bool) -> PackedSequences:
    """The model inputs of ``batch`` on ``engine``'s device: packed rows, or padded rows
    (see engine.packing), as long as the engine's tensor ranks need (``token_multiple``)."""
    ids, mask = batch["input_ids"].to(engine.device), batch["attention_mask"].to(engine.device)
    layout = pack_for_responses(ids, mask, response_length(batch), packed=packed)
    return layout.with_filler(engine.token_multiple)


def model_inputs(
    module: nn.Module, batch: Batch, inputs: PackedSequences, device: torch.device
) -> dict[str, Tensor]:
    """The forward's inputs beyond the ids: ``position_ids``, and for rows with images (field
    ``images``) what the module's ``extra_inputs`` builds from them (pixel values, grids and
    M-RoPE planes in place of the plain positions)."""
    images = batch.get("images")
    if not images or not any(images):
        return {"position_ids": inputs.position_ids}
    if module.extra_inputs is None:
        raise ValueError(
            f"rows have images but the model ({type(unwrap(module.model)).__name__}) is not a "
            "vision-language model: use one (e.g. Qwen2.5-VL), or data without an images column"
        )
    return module.extra_inputs(batch["input_ids"], batch["attention_mask"], images, inputs, device)


def policy_forward(
    engine: TrainEngine,
    batch: Batch,
    device: torch.device,
    temperature: float,
    packed: bool,
    inputs: PackedSequences | None = None,
    targets: Tensor | None = None,
) -> tuple[Tensor, ...]:
    """Log-probs and entropy (B, R) of the response tokens, from one forward of the
    engine's policy module; ``inputs``: the batch already laid out by ``pack`` (else it is
    laid out here). With sequence parallelism, this rank runs its share of the tokens.
    ``targets`` (M, J): J tokens scored per query instead of the sampled one (the sampled
    token first, then a teacher's top-k): log-probs (B, R, J); not with sequence parallelism.
    Without sequence parallelism each of the module's outputs comes back laid out so: a
    ``TeacherModule``'s log-probs (B, R), top ids and top log-probs (B, R, k).
    """
    inputs = inputs if inputs is not None else pack(batch, engine, packed)
    module, shard = engine.module, sequence_shard(engine, batch, inputs)
    if shard is not None and targets is not None:
        raise ValueError("several targets per token are not split over sequence-parallel ranks")
    if shard is not None:
        log_probs, entropy = module(
            shard.input_ids,
            position_ids=shard.position_ids,
            query_index=shard.query_index,
            targets=shard.targets,
            temperature=temperature,
            sequence_split=shard.context,
        )
        return inputs.unpack(shard.gather(log_probs)), inputs.unpack(shard.gather(entropy))
    outputs = module(
        inputs.input_ids,
        query_index=inputs.query_index,
        targets=inputs.targets if targets is None else targets,
        temperature=temperature,
        attention_mask=inputs.attention_mask,
        **model_inputs(module, batch, inputs, device),
    )
    return tuple(inputs.unpack(output) for output in outputs)


def value_forward(engine: TrainEngine, batch: Batch, device: torch.device, packed: bool) -> Tensor:
    """Values (B, R): V of the state before each response token, from one forward (this
    rank's share of the tokens with sequence parallelism)."""
    inputs = pack(batch, engine, packed)
    module, shard = engine.module, sequence_shard(engine, batch, inputs)
    if shard is not None:
        values = module(
            shard.input_ids,
            position_ids=shard.position_ids,
            query_index=shard.query_index,
            sequence_split=shard.context,
        )
        return inputs.unpack(shard.gather(values))
    values = module(
        inputs.input_ids,
        query_index=inputs.query_index,
        attention_mask=inputs.attention_mask,
        **model_inputs(module, batch, inputs, device),
    )
    return inputs.unpack(values)


def check_replicas(ctx: Any, parallel: ParallelConfig) -> None:
    """The group must give the pipeline, tensor, sequence and context ranks of one replica
    the same rows."""
    if ctx.replica_size != parallel.replica:
        raise ValueError(
            f"parallel.pipeline={parallel.pipeline} x .tensor={parallel.tensor} x .sequence="
            f"{parallel.sequence} x .context={parallel.context} needs the role spawned with "
            f"replica_size={parallel.replica} "
            f"(it has {ctx.replica_size}), so that the ranks splitting a replica's work are "
            "given the same rows"
        )


def sequence_shard(
    engine: TrainEngine, batch: Batch, inputs: PackedSequences
) -> SequenceShard | None:
    """This rank's share of the packed micro-batch under sequence or context parallelism
    (None without); rows with images are refused (their vision inputs are not split yet)."""
    mesh = engine.mesh
    if mesh.sequence is None:
        return None
    images = batch.get("images")
    if images and any(images):
        raise ValueError(
            "parallel.sequence or .context > 1 does not take rows with images yet; set them to 1"
        )
    if mesh.cp is None:
        sp = mesh.sp
        return shard_sequence(inputs, sp.get_group(), sp.size(), sp.get_local_rank())
    return shard_context(inputs, split_axes(mesh))


def split_axes(mesh: TrainingMesh) -> SplitAxes:
    """The ring's and Ulysses' groups of ``mesh`` (Ulysses: this rank alone when sp = 1)."""
    sp, cp = mesh.sp, mesh.cp
    return SplitAxes(
        ring_group=cp.get_group(),
        ring_size=cp.size(),
        ring_rank=cp.get_local_rank(),
        ulysses_group=sp.get_group() if sp is not None else None,
        ulysses_size=sp.size() if sp is not None else 1,
        ulysses_rank=sp.get_local_rank() if sp is not None else 0,
        sequence_group=mesh.sequence.get_group(),
    )


def load_policy_model(model_cfg: ModelConfig) -> nn.Module:
    """The causal LM of a policy-shaped role (actor, reference, implicit PRM)."""
    return load_causal_lm(
        model_cfg.path,
        trust_remote_code=model_cfg.trust_remote_code,
        attn_implementation=model_cfg.attn_implementation,
    )


def extra_inputs_for(model: nn.Module, model_cfg: ModelConfig) -> object | None:
    """What builds the model family's own forward inputs (see ``PolicyModule``): images for
    a vision-language model, nothing for a text model. Built before LoRA wraps the model."""
    build = family_of(model).training.extra_inputs
    return None if build is None else build(model, model_cfg.path)


def policy_module(model_cfg: ModelConfig, chunk_tokens: int) -> PolicyModule:
    """The checkpoint of ``model_cfg`` in a PolicyModule (LoRA adapters on it when
    ``model_cfg.lora`` is set), with its family's extra inputs."""
    model = load_policy_model(model_cfg)
    extra = extra_inputs_for(model, model_cfg)
    tower = vision_tower(model) if extra is not None else None
    if model_cfg.lora is not None:
        model = apply_lora(model, model_cfg.lora)
    if tower is not None and model_cfg.vision_tower == "freeze":
        tower.requires_grad_(False)  # after LoRA: no adapters train inside it either
    return PolicyModule(model, chunk_tokens=chunk_tokens, extra_inputs=extra)


def trainable_policy_engine(
    settings: Any, device: torch.device, parallel: ParallelConfig = NO_SPLIT
) -> TrainEngine:
    """A trained causal LM on the FSDP2 engine (the actor, the implicit PRM):
    ``settings.model``'s checkpoint, LoRA adapters on it when ``model.lora`` is set, in a
    PolicyModule that computes log-probs in chunks of ``settings.chunk_tokens``, sharded by
    ``settings.fsdp`` (and split by ``parallel``) and stepped by
    ``settings.optim``."""
    model_cfg = settings.model
    module = policy_module(model_cfg, settings.chunk_tokens)
    return make_engine(
        module,
        device=device,
        fsdp=settings.fsdp,
        optim=settings.optim,
        gradient_checkpointing=model_cfg.gradient_checkpointing,
        parallel=parallel,
        tensor_plan=split_plan(module, parallel),
    )


def split_plan(module: nn.Module, parallel: ParallelConfig) -> TensorPlan | None:
    """The tensor-parallel plan of ``module``'s model family when ``parallel`` splits
    tensors (ValueError naming the families that have one when its family has none)."""
    return tensor_parallel_plan(unwrap(module.model)) if parallel.tensor > 1 else None


def response_log_probs(
    engine: TrainEngine,
    batch: Batch,
    device: torch.device,
    settings: Any,
    packed: bool,
    forward: Callable[[Batch], tuple[Tensor, Tensor]] | None = None,
) -> tuple[Tensor, Tensor]:
    """Log-probs and entropy (B, R) of ``batch``'s responses under ``engine``'s policy
    module, in eval mode, over micro-batches of ``settings.tokens_per_micro_batch`` tokens,
    at the rollout's ``settings.temperature``; ``forward(micro)``: the role's own pass
    (default: ``policy_forward``)."""
    if isinstance(engine, PipelineEngine):
        budget, temperature = settings.tokens_per_micro_batch, settings.temperature
        log_probs, entropy = pipeline_outputs(engine, batch, budget, temperature)
        return log_probs, entropy
    engine.train(False)
    log_probs, entropy = micro_batched(
        forward
        or (lambda micro: policy_forward(engine, micro, device, settings.temperature, packed)),
        batch,
        settings.tokens_per_micro_batch,
        device,
        not packed,
    )
    return log_probs, entropy


@torch.no_grad()
def micro_batched(
    forward: Callable, batch: Batch, budget: int, device: torch.device, padded: bool
) -> list[Tensor]:
    """Run ``forward(micro_batch) -> tensors (b, R, ...)`` over token-budget micro-batches
    and reassemble each output as (B, R, ...) on the CPU, in the batch's row order."""
    outputs: list[Tensor] | None = None
    for rows in synchronized_micro_batches(token_counts(batch), budget, device, padded):
        results = forward(batch.index(rows))
        if outputs is None:
            outputs = [torch.zeros(len(batch), *r.shape[1:], dtype=r.dtype) for r in results]
        for out, result in zip(outputs, results, strict=True):
            out[rows] = result.cpu()
    return outputs or []


def gather_full_weights(engine: TrainEngine, rank: int) -> dict[str, Tensor] | None:
    """Every weight unsharded (LoRA merged) on rank 0, None elsewhere; all ranks must call
    (each weight is an all-gather). For tests and small models: the rollout engine streams
    ``engine.full_weights()`` instead of collecting them."""
    weights = {}
    for name, tensor in engine.full_weights():
        if rank == 0:
            weights[name] = tensor.cpu().clone()
    return weights if rank == 0 else None


MicroLoss = Callable[[Batch, LossNormalizer], tuple[Tensor, dict]]


def train(
    engine: TrainEngine,
    batch: Batch,
    settings: MicroBatching,
    micro_loss: MicroLoss,
    *,
    role: str,
    norm_length: int,
    dp_size: int,
    mask_key: str = "response_mask",
    padded: bool = False,
    scored_loss: ScoredLoss | None = None,
    temperature: float = 1.0,
) -> dict[str, float]:
    """Epochs x mini-batches (one optimiser step each) x token-budget micro-batches.

    Each mini-batch's loss denominators are counted over all ``dp_size`` data-parallel
    replicas first (``normalized_mini_batches``), so that the micro-batch losses
    ``micro_loss(micro, normaliser)`` add up to the mini-batch loss whatever the
    micro-batching and the number of replicas. On a pipeline engine the micro-batches run
    through the stages together, and the last stage computes ``scored_loss(micro, its
    outputs, normaliser)`` (``ascent.workers.pipeline_passes``; at ``temperature``).
    Returns ``role/*`` metrics, averaged over steps and ranks (the same on every rank).
    """
    loops = {"role": role, "norm_length": norm_length, "dp_size": dp_size, "mask_key": mask_key}
    if isinstance(engine, PipelineEngine):
        if scored_loss is None:
            raise ValueError(f"{role} does not run in pipeline stages yet")
        return pipeline_train(engine, batch, settings, scored_loss, temperature, **loops)
    engine.train(True)
    metrics = MetricAccumulator(role)
    for mini, normalizer in normalized_mini_batches(engine, batch, settings, **loops):
        budget = settings.tokens_per_micro_batch
        plan = synchronized_micro_batches(token_counts(mini), budget, engine.device, padded)
        for rows in plan:
            loss, micro_metrics = micro_loss(mini.index(rows), normalizer)
            engine.backward(loss)
            metrics.add_micro(micro_metrics)
        metrics.end_mini_batch(**engine.step().metrics())
    return metrics.result(engine.device)


class EngineCheckpoints:
    """Worker methods over ``self.engine``: save and restore its training state (sharded,
    reshardable to another rank count) and export a transformers checkpoint."""

    @register(Dispatch.ALL)
    def save_checkpoint(self, directory: str, with_optimizer: bool = True) -> None:
        save_engine(self.engine, Path(directory), with_optimizer=with_optimizer)

    @register(Dispatch.ALL)
    def load_checkpoint(self, directory: str) -> None:
        load_engine(self.engine, Path(directory))

    @register(Dispatch.ALL)
    def export(self, out_dir: str) -> None:
        """A plain transformers checkpoint (LoRA merged) in ``out_dir``."""
        export_hf(self.engine, self.config.model.path, out_dir)
