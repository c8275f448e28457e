"""Pipeline parallelism: the TrainEngine of one stage (``ascent.engine.pipeline_stages``)
under torch.distributed.pipelining's 1F1B schedule.

The mesh's pp axis (``ascent.engine.mesh``) holds one replica's S stages; each stage is
sharded by FSDP2 over the dp axis (and split over tp). A run takes a mini-batch's n packed
micro-batches at once, each padded with filler to one length T (a multiple of the tensor
ranks), and sends them through the stages: stage s runs micro-batch i's forward while the
later stages run earlier ones, and after a warm-up of S - s forwards each stage alternates
one forward and one backward, so at most S micro-batches' activations are alive on a stage.

Losses live on the last stage only: ``loss(i, outputs)`` is micro-batch i's share of the
mini-batch loss (its denominators counted over the replicas beforehand), and the schedule
does not divide the gradients by n (``scale_grads=False``): every micro-batch counts once,
on the stage that scores it, and earlier stages get its gradient through the activations.
What the last stage computes (its loss metrics, log-probs, values) is broadcast over the pp
axis, so every rank of a replica returns the same.

The full weights (the rollout refresh, export) are each gathered on the stage that owns
them and broadcast to the others, under the whole model's names; checkpoints use those
names too (``global_name``), so a run saved with pp = 2 loads with pp = 1 and back.
"""

from collections.abc import Callable, Iterator

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from ascent.engine.config import ParallelConfig
from ascent.engine.fsdp import TrainEngine
from ascent.engine.mesh import TrainingMesh
from ascent.engine.modules import ValueModule, unwrap
from ascent.engine.packing import PackedSequences
from ascent.engine.pipeline_stages import PipelineStageModule
from ascent.engine.weights import weight_gathers

# loss(micro-batch index, the last stage's outputs for it) -> (loss, metrics)
StageLoss = Callable[[int, tuple[Tensor, ...]], tuple[Tensor, dict]]


def make_engine(module: nn.Module, *, parallel: ParallelConfig, **options) -> TrainEngine:
    """The engine for ``parallel``: a pipeline stage's when it has stages, else the whole
    model's."""
    engine = PipelineEngine if parallel.pipeline > 1 else TrainEngine
    return engine(module, parallel=parallel, **options)


class PipelineEngine(TrainEngine):
    """A TrainEngine holding this rank's stage (module docstring); ``run`` replaces the
    per-micro-batch forward and ``backward``."""

    def arrange(self, module: nn.Module, mesh: TrainingMesh) -> nn.Module:
        self.stage, self.stages = mesh.pp.get_local_rank(), mesh.pp.size()
        self.group = mesh.pp.get_group()
        self._layout: list[tuple[str, int, int, tuple, torch.dtype]] | None = None
        return PipelineStageModule(
            module.model,
            self.stage,
            self.stages,
            chunk_tokens=getattr(module, "chunk_tokens", 1024),
            values=isinstance(module, ValueModule),
        )

    def global_name(self, name: str) -> str:
        return self.module.global_name(name)

    @property
    def is_last(self) -> bool:
        return self.stage == self.stages - 1

    def _src(self, stage: int) -> int:
        return dist.get_global_rank(self.group, stage)

    def run(
        self,
        layouts: list[PackedSequences],
        loss: StageLoss | None = None,
        temperature: float = 1.0,
    ) -> list[tuple[Tensor, ...]] | list[dict]:
        """One schedule over ``layouts`` (packed micro-batches). Without ``loss``: each
        micro-batch's outputs (log-probs and entropy, or values; (T,) each over its laid-out
        tokens), on every stage. With ``loss``: forward and backward (gradients summed into
        the parameters'), returning each micro-batch's loss metrics, on every stage."""
        length = max(layout.num_tokens for layout in layouts)
        length += -length % self.token_multiple
        inputs = [stage_inputs(layout, length) for layout in layouts]
        ids, positions, targets = (torch.cat(parts) for parts in zip(*inputs, strict=True))
        self.module.temperature = temperature
        training = loss is not None
        stage = PipelineStage(
            self.module,
            self.stage,
            self.stages,
            self.device,
            input_args=self._example_inputs(length, training),
            output_args=self._example_outputs(length, training),
            group=self.group,
        )
        metrics: list[dict] = []

        def stage_loss(outputs: tuple[Tensor, ...], index: Tensor) -> Tensor:
            value, micro_metrics = loss(int(index), outputs)
            metrics.append({k: float(v) for k, v in micro_metrics.items()})
            return self.scaler.scale_loss(value) if self.scaler is not None else value

        # 1F1B needs a micro-batch per stage at least; with fewer (or no backward) it is
        # GPipe's order anyway.
        kind = Schedule1F1B if training and len(layouts) >= self.stages else ScheduleGPipe
        schedule = kind(
            stage, len(layouts), loss_fn=stage_loss if training else None, scale_grads=False
        )
        args = (ids, positions, targets) if self.stage == 0 else ()
        if training:
            index = torch.arange(len(layouts)).view(-1, 1) if self.is_last else None
            schedule.step(*args, target=index)
            shared = [metrics]
            dist.broadcast_object_list(shared, src=self._src(self.stages - 1), group=self.group)
            return shared[0]
        with torch.no_grad():
            outputs = schedule.eval(*args)
        return self._share_outputs(outputs, len(layouts), length)

    def _share_outputs(
        self, outputs: Tensor | tuple[Tensor, ...] | None, micro_batches: int, length: int
    ) -> list[tuple[Tensor, ...]]:
        """The last stage's outputs, (k,) tuples of (n T,), to every stage as n tuples of
        (T,)."""
        count = 1 if self.module.values else 2
        if self.is_last:
            outputs = (outputs,) if isinstance(outputs, Tensor) else tuple(outputs)
            shared = torch.stack([o.reshape(micro_batches, length) for o in outputs], dim=1)
        else:
            shared = torch.empty(micro_batches, count, length, device=self.device)
        # stack and empty give contiguous tensors: the broadcast fills this one in place
        dist.broadcast(shared, src=self._src(self.stages - 1), group=self.group)
        return [tuple(shared[i].unbind(0)) for i in range(micro_batches)]

    def _example_inputs(self, length: int, training: bool) -> tuple[Tensor, ...]:
        tokens = torch.empty(1, length, dtype=torch.long, device="meta")
        if self.stage == 0:
            return tokens, tokens, tokens
        hidden = self._hidden(length).requires_grad_(training)
        return hidden, tokens, tokens

    def _example_outputs(self, length: int, training: bool) -> tuple[Tensor, ...]:
        if not self.is_last:
            tokens = torch.empty(1, length, dtype=torch.long, device="meta")
            return self._hidden(length).requires_grad_(training), tokens, tokens
        scores = torch.empty(length, dtype=torch.float32, device="meta")
        scores = scores.requires_grad_(training)
        return (scores,) if self.module.values else (scores, scores)

    def _hidden(self, length: int) -> Tensor:
        size = unwrap(self.module.model).config.get_text_config().hidden_size
        return torch.empty(1, length, size, dtype=self.compute_dtype, device="meta")

    def weight_layout(self) -> list[tuple[str, int]]:
        return [(name, nbytes) for name, nbytes, *_ in self._global_layout()]

    def full_weights(self, names: set[str] | None = None) -> Iterator[tuple[str, Tensor]]:
        """Every weight of the whole model (or those ``names``), gathered on the stage that
        owns it and broadcast over the pp axis: the same on every rank."""
        gathers = {
            self._weight_name(name): gather for name, _, gather in weight_gathers(self.module.model)
        }
        for name, _, owner, shape, dtype in self._global_layout():
            if names is not None and name not in names:
                continue
            if owner == self.stage:
                tensor = gathers[name]().to(self.device).contiguous()
            else:
                tensor = torch.empty(shape, dtype=dtype, device=self.device)
            dist.broadcast(tensor, src=self._src(owner), group=self.group)
            yield name, tensor

    def _weight_name(self, name: str) -> str:
        """A weight's name under the transformers model -> the whole model's."""
        return self.global_name(f"model.{name}")[len("model.") :]

    def _global_layout(self) -> list[tuple[str, int, int, tuple, torch.dtype]]:
        """(name, bytes, owning stage, shape, dtype) of every stage's weights, in stage
        order (asked once: the layout does not change)."""
        if self._layout is None:
            local = [
                (self._weight_name(name), nbytes, self.stage, *full_shape(self.module, name))
                for name, nbytes, _ in weight_gathers(self.module.model)
            ]
            stages: list = [None] * self.stages
            dist.all_gather_object(stages, local, group=self.group)
            self._layout = [entry for stage in stages for entry in stage]
        return self._layout


def full_shape(stage: PipelineStageModule, name: str) -> tuple[tuple, torch.dtype]:
    """The whole shape and dtype of weight ``name`` (under the transformers model) without
    gathering it (a DTensor's shape is the whole one); no LoRA in a stage."""
    tensor = unwrap(stage.model).get_parameter(name)
    return tuple(tensor.shape), tensor.dtype


def stage_inputs(layout: PackedSequences, length: int) -> tuple[Tensor, Tensor, Tensor]:
    """(ids, positions, targets) (1, ``length``) of a packed micro-batch: filler after its
    tokens (a row of its own), and each position's target token where it is a query, -1
    elsewhere."""
    if layout.attention_mask is not None:
        raise ValueError("parallel.pipeline > 1 needs packed rows (model.packing=packed)")
    padded = layout.padded_to(length)
    targets = torch.full((1, length), -1, dtype=torch.long, device=layout.input_ids.device)
    targets[0, layout.query_index] = layout.targets
    return padded.input_ids, padded.position_ids, targets
