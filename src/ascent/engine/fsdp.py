"""TrainEngine: one model sharded with FSDP2 over the data-parallel ranks, with its optimiser.

Sharding: every decoder layer is its own FSDP unit, and the root module (a ``PolicyModule``
or ``ValueModule`` holding embeddings, final norm and head) is the last; parameters are kept
in float32 and, on CUDA, computed in bfloat16 with float32 gradient reduction. Gradients are
*averaged* over ranks by FSDP, which is why the loss aggregation scales each rank's share by
the number of ranks (``ascent.algos.aggregation``).

With ``parallel.tensor`` = tp > 1, the family's plan first splits every layer over the
mesh's tp axis (``ascent.engine.tensor_parallel``); FSDP then shards each rank's split over
the other axes, and averages over them only (the tp ranks compute one replica's gradient
together).

With ``parallel.expert`` = ep > 1 (a mixture of experts), each sparse layer's experts
are first split over the mesh's ep axis (``ascent.moe.expert_parallel``), and each split is
its own FSDP unit over the edp axis (``ascent.engine.mesh``). An expert's gradient sums the
tokens of all ep ranks and is scaled to the same average over all W ranks.

With ``parallel.context`` = cp > 1 the same holds for the cp x sp ranks that split a
micro-batch (``ascent.engine.context_parallel``: a ring, Ulysses inside it).

With ``parallel.sequence`` = sp > 1, the sp ranks of a replica share its micro-batches
(``ascent.engine.ulysses``) and each contributes the gradient of its tokens. The losses are
scaled by the replica count D = W / (sp tp), and each rank's gradient by sp (the gradient
of the gather of every rank's log-probs), so FSDP's average over W / tp is again the step's.

With ``parallel.pipeline`` = pp > 1 the rank holds one stage of the layers
(``ascent.engine.pipeline``'s ``PipelineEngine``, through ``arrange``), sharded over the
data-parallel replicas of that stage.

With ``fsdp.param_dtype`` float16 the engine scales the loss (``backward``) and unscales,
checks and skips in ``step`` (``ascent.engine.loss_scale``): float16's range is too narrow
for small gradients without it.
"""

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, fully_shard

from ascent.engine.config import NO_SPLIT, FSDPConfig, OptimConfig, ParallelConfig
from ascent.engine.context_parallel import ATTENTION as RING_ATTENTION
from ascent.engine.gradients import clip_sharded_gradients
from ascent.engine.loss_scale import LossScaler, Verdict
from ascent.engine.mesh import TrainingMesh, training_mesh
from ascent.engine.modules import decoder_layers, unwrap
from ascent.engine.schedule import lr_multiplier
from ascent.engine.tensor_parallel import TensorPlan, parallelize
from ascent.engine.ulysses import ATTENTION as ULYSSES_ATTENTION
from ascent.engine.weights import iter_full_weights, weight_layout
from ascent.moe.expert_parallel import shard_experts
from ascent.moe.routing import sparse_blocks

# OptimConfig.implementation as torch's AdamW arguments.
ADAMW_IMPLEMENTATIONS = {
    "auto": {},
    "fused": {"fused": True},
    "foreach": {"foreach": True},
    "for-loop": {"foreach": False},
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class StepResult:
    grad_norm: float  # global L2 norm of the gradient before clipping
    lr: float  # learning rate used for this step
    skipped: bool  # no update: a non-finite loss or gradient (a fault the run counts)
    overflowed: bool = False  # no update: the float16 loss scale overflowed (expected)
    loss_scale: float | None = None  # the scale S this step's gradients had (float16 only)

    def metrics(self) -> dict[str, float]:
        """Per optimiser step, for the role's metrics; the norm is left out of a step that
        overflowed (its gradients were never unscaled), so it cannot make the mean inf."""
        out = {"lr": self.lr, "skipped_steps": float(self.skipped)}
        if not self.overflowed:
            out["grad_norm"] = self.grad_norm
        if self.loss_scale is not None:
            out |= {"loss_scale": self.loss_scale, "loss_scale_skipped": float(self.overflowed)}
        return out


def shard_module(module: nn.Module, mesh: TrainingMesh, options: dict) -> None:
    """FSDP units: each sparse layer's split of the experts (over edp, and tp), every decoder
    layer, then the root (over every rank but the tensor axis)."""
    if mesh.ep is not None:
        for experts in shard_experts(module.model, mesh.ep):
            fully_shard(experts, mesh=mesh.expert_shards, **options)
    elif mesh.expert_shards is not None:  # whole experts on every tensor rank
        for block in sparse_blocks(module.model):
            fully_shard(block.experts, mesh=mesh.expert_shards, **options)
    for unit in [*decoder_layers(module.model), module]:
        fully_shard(unit, mesh=mesh.fsdp, **options)


def split_model(module: nn.Module, mesh: TrainingMesh, tensor_plan: TensorPlan | None) -> None:
    """Before FSDP: the attention that splits a sequence (a ring, or Ulysses), and the
    family's tensor plan over the tp axis."""
    model = unwrap(module.model)
    if mesh.cp is not None:
        model.set_attn_implementation(RING_ATTENTION)
    elif mesh.sp is not None:
        model.set_attn_implementation(ULYSSES_ATTENTION)
    if mesh.tp is not None:
        if tensor_plan is None:
            raise ValueError("parallel.tensor > 1 needs the model family's tensor_plan")
        parallelize(module.model, mesh.tp, tensor_plan)


class TrainEngine:
    """Shards ``module`` (a root wrapper around a transformers model) and trains it."""

    def __init__(
        self,
        module: nn.Module,
        *,
        device: torch.device,
        fsdp: FSDPConfig,
        optim: OptimConfig | None,
        gradient_checkpointing: bool = False,
        parallel: ParallelConfig = NO_SPLIT,
        tensor_plan: TensorPlan | None = None,
    ) -> None:
        if fsdp.cpu_offload and device.type != "cuda":
            raise ValueError(
                "fsdp.cpu_offload needs device cuda (on the CPU there is nowhere to offload to)"
            )
        self.device = device
        model = unwrap(module.model)
        if gradient_checkpointing:
            # Non-reentrant checkpointing works with frozen inputs (LoRA) and with FSDP2.
            enable = getattr(model, "activation_checkpointing_enable", None)  # transformers >= 5
            if enable is not None:
                enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                model.gradient_checkpointing_enable(
                    gradient_checkpointing_kwargs={"use_reentrant": False}
                )
        mesh = training_mesh(device.type, parallel)
        module = self.arrange(module, mesh)
        module.to(device)
        split_model(module, mesh, tensor_plan)
        options: dict = {"reshard_after_forward": fsdp.reshard_after_forward}
        param_dtype = DTYPES[fsdp.param_dtype] if fsdp.param_dtype else None
        if param_dtype is None and device.type == "cuda":
            param_dtype = torch.bfloat16
        if param_dtype not in (None, torch.float32):
            options["mp_policy"] = MixedPrecisionPolicy(
                param_dtype=param_dtype, reduce_dtype=DTYPES[fsdp.reduce_dtype]
            )
        if fsdp.cpu_offload:
            options["offload_policy"] = CPUOffloadPolicy()
        shard_module(module, mesh, options)
        self.compute_dtype = param_dtype or torch.float32  # what the layers compute in
        self.mesh = mesh
        self.module = module
        self.optim_config = optim
        self.steps = 0
        self.trainable = [p for p in module.parameters() if p.requires_grad]
        self.optimizer = None
        self.scaler = None
        if optim is not None and param_dtype == torch.float16:
            scaling = fsdp.loss_scale
            self.scaler = LossScaler(scaling.init_scale, scaling.growth_interval, device)
        if optim is not None:
            self.optimizer = torch.optim.AdamW(
                self.trainable,
                lr=optim.lr,
                betas=optim.betas,
                eps=optim.eps,
                weight_decay=optim.weight_decay,
                **ADAMW_IMPLEMENTATIONS[optim.implementation],
            )
            self.scheduler = torch.optim.lr_scheduler.LambdaLR(
                self.optimizer, lambda step: lr_multiplier(step, optim)
            )

    def arrange(self, module: nn.Module, mesh: TrainingMesh) -> nn.Module:
        """The part of ``module`` this rank trains, before any split: all of it (a pipeline
        stage in ``ascent.engine.pipeline``)."""
        if mesh.pp is not None:
            raise ValueError("parallel.pipeline > 1 needs the PipelineEngine (make_engine)")
        return module

    def global_name(self, name: str) -> str:
        """A parameter's name under ``module`` -> its name in the whole model's module (the
        same here; a pipeline stage renumbers its layers)."""
        return name

    @property
    def token_multiple(self) -> int:
        """What a micro-batch's length must be a multiple of: the tensor ranks cut it by
        sequence into equal parts (times the sequence ranks, which cut it first: into 2 per
        ring rank with context parallelism)."""
        if self.mesh.tp is None:
            return 1
        sequence = self.mesh.sequence.size() if self.mesh.sequence is not None else 1
        ring = 2 if self.mesh.cp is not None else 1
        return self.mesh.tp.size() * sequence * ring

    def train(self, mode: bool = True) -> None:
        self.module.train(mode)

    def zero_grad(self) -> None:
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=True)

    def backward(self, loss: Tensor) -> None:
        """Gradients of ``loss`` (summed into those of earlier micro-batches), of the loss
        times the scale S when training in float16 (``step`` divides them by S again)."""
        (self.scaler.scale_loss(loss) if self.scaler is not None else loss).backward()

    def step(self) -> StepResult:
        """Clip, then step the optimiser and the schedule, unless the gradient is not finite
        (then the update is skipped, so one bad batch cannot destroy the weights). In
        float16, first the loss scaler's verdict: an overflow skips the step too (and halves
        S), and clean gradients are unscaled before clipping."""
        if self.optimizer is None:
            raise RuntimeError("this engine has no optimiser (built with optim=None)")
        lr = self.optimizer.param_groups[0]["lr"]
        scale = self.scaler.scale if self.scaler is not None else None
        verdict = self.scaler.check(self.trainable) if self.scaler is not None else Verdict.CLEAN
        if verdict is not Verdict.CLEAN:
            self.scaler.update(verdict)
            self.zero_grad()
            fault = verdict is Verdict.NON_FINITE
            overflowed = not fault
            return StepResult(math.nan, lr, fault, overflowed=overflowed, loss_scale=scale)
        max_norm = self.optim_config.grad_clip or float("inf")
        grad_norm = clip_sharded_gradients(self.trainable, max_norm, self.mesh.tp)
        skipped = not math.isfinite(grad_norm)
        if not skipped:
            self.optimizer.step()
            self.scheduler.step()
            self.steps += 1
        if self.scaler is not None:
            self.scaler.update(Verdict.NON_FINITE if skipped else Verdict.CLEAN)
        self.zero_grad()
        return StepResult(grad_norm=grad_norm, lr=lr, skipped=skipped, loss_scale=scale)

    def reshard(self) -> None:
        """Make every parameter the sharded DTensor again (FSDP frees gathered copies)."""
        for module in self.module.modules():
            if isinstance(module, FSDPModule):
                module.reshard()

    def full_weights(self, names: set[str] | None = None) -> Iterator[tuple[str, Tensor]]:
        """Every parameter (or those ``names``) unsharded, one at a time; all ranks must
        iterate together."""
        return iter_full_weights(self.module.model, names)

    def weight_layout(self) -> list[tuple[str, int]]:
        """(name, full size in bytes) of what ``full_weights`` yields, without gathering."""
        return weight_layout(self.module.model)

    def all_reduce_sum(self, values: list[float]) -> list[float]:
        """Sum ``values`` over the data-parallel replicas (used for the global loss
        denominators): the sequence and tensor ranks of a replica hold the same rows, so
        they count once."""
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        if dist.get_world_size() > 1:
            group = self.mesh.dp.get_group() if self.mesh.dp is not None else None
            dist.all_reduce(tensor, group=group)
        return tensor.tolist()
