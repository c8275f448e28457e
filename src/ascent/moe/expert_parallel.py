"""Expert parallelism: each sparse layer's E experts split over the ``ep`` ranks of a device
mesh axis, tokens sent to the rank holding their expert and back with all-to-all.

Rank r of the ep group holds experts [r E/ep, (r+1) E/ep) as the local shard (Shard(0)) of
DTensor parameters named as transformers names the fused ones (``gate_up_proj``
(E, 2I, H), ``down_proj`` (E, H, I)), so checkpoints, full weights and the rollout's
weight refresh see the usual names and shapes.

One forward of ``ExpertParallelExperts`` over the rank's N tokens x (N, H), with the
router's choices e (N, k) and weights w (N, k):

1. the N k (token, slot) pairs are sorted by expert, hence by destination rank; each rank
   learns how many rows it will receive from every other (an all-to-all of counts);
2. the rows x[token] go to the expert's rank (all-to-all, differentiable: its backward is
   the reverse exchange), with the expert ids alongside;
3. each rank runs its experts over what it received, one matmul per local expert:
   y = down_e (silu(g) * u), (g, u) = split(gate_up_e x);
4. the results return to their tokens' ranks (all-to-all) and are combined there,
   out[n] = sum_j w_nj y_nj, as transformers' own experts module combines them.

Every rank of the ep group must call every layer's forward the same number of times (the
token-budget micro-batches are synchronised across ranks for FSDP already). Gradients of a
rank's experts collect the contributions of the tokens of every ep rank and are averaged by
FSDP over the edp ranks only; scaled by 1 / ep, they are the average over all ranks that
FSDP makes of every other gradient.
"""

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Shard

from ascent.distributed import all_to_all, exchange_counts, scale_gradient
from ascent.moe.routing import sparse_blocks


class ExpertParallelExperts(nn.Module):
    """This rank's E/ep experts of a transformers fused experts module (module docstring);
    called as that module is: ``(hidden_states (N, H), top_k_index (N, k), top_k_weights
    (N, k)) -> (N, H)``."""

    def __init__(self, experts: nn.Module, mesh: DeviceMesh) -> None:
        super().__init__()
        size, rank = mesh.size(), mesh.get_local_rank()
        self.num_experts = experts.gate_up_proj.shape[0]
        self.local_experts = self.num_experts // size
        self.first = rank * self.local_experts
        self.group = mesh.get_group()
        self.act_fn = experts.act_fn
        owned = slice(self.first, self.first + self.local_experts)
        for name in ("gate_up_proj", "down_proj"):
            local = getattr(experts, name).detach()[owned].clone()
            setattr(self, name, nn.Parameter(DTensor.from_local(local, mesh, [Shard(0)])))

    def forward(self, hidden_states: Tensor, top_k_index: Tensor, top_k_weights: Tensor) -> Tensor:
        top_k = top_k_index.shape[1]
        pairs = top_k_index.flatten()
        order = torch.argsort(pairs, stable=True)  # by expert, so by destination rank
        experts, tokens = pairs[order], order // top_k
        send = torch.bincount(experts // self.local_experts, minlength=self.group.size())
        receive = exchange_counts(send, self.group)
        send = send.tolist()
        rows = all_to_all(hidden_states[tokens], send, receive, self.group)
        with torch.no_grad():
            ids = all_to_all(experts, send, receive, self.group) - self.first
        results = all_to_all(self._local(rows, ids), receive, send, self.group)
        weighted = results * top_k_weights.flatten()[order, None]
        return torch.zeros_like(hidden_states).index_add(0, tokens, weighted.to(rows.dtype))

    def _local(self, rows: Tensor, ids: Tensor) -> Tensor:
        """Each received row through its (local) expert, in the order received."""
        # Each rank's loss is scaled so that FSDP's average over all W ranks is the step's
        # gradient; an expert's gradient collects the tokens of all ep ranks and FSDP
        # averages it over the edp = W / ep ranks only, hence 1 / ep more.
        share = 1.0 / self.group.size()
        gate_up = scale_gradient(_local_tensor(self.gate_up_proj), share)
        down = scale_gradient(_local_tensor(self.down_proj), share)
        order = torch.argsort(ids, stable=True)
        counts = torch.bincount(ids, minlength=self.local_experts).tolist()
        outputs, start = [], 0
        for expert, count in enumerate(counts):
            if count:
                x = rows[order[start : start + count]]
                gate, up = F.linear(x, gate_up[expert]).chunk(2, dim=-1)
                outputs.append(F.linear(self.act_fn(gate) * up, down[expert]))
            start += count
        if not outputs:  # nothing arrived: zero gradients, but the parameters take part
            return rows * (gate_up.sum() + down.sum()) * 0
        return torch.cat(outputs)[torch.argsort(order)]


def _local_tensor(tensor: Tensor) -> Tensor:
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def shard_experts(model: nn.Module, mesh: DeviceMesh) -> list[ExpertParallelExperts]:
    """Replace every sparse layer's fused experts with this rank's share of them over
    ``mesh`` (the ep axis); ValueError when the model has no fused experts or E is not a
    multiple of the axis size."""
    blocks = sparse_blocks(model)
    if not blocks:
        raise ValueError(
            "parallel.expert > 1 needs a mixture-of-experts model; this one has no sparse "
            "layers (set parallel.expert: 1)"
        )
    sharded = []
    for block in blocks:
        experts = block.experts
        if not hasattr(experts, "gate_up_proj"):
            raise ValueError(
                f"expert parallelism needs fused experts (gate_up_proj, down_proj); "
                f"{type(experts).__name__} has none"
            )
        count = experts.gate_up_proj.shape[0]
        if count % mesh.size():
            raise ValueError(
                f"parallel.expert={mesh.size()} does not divide the model's {count} "
                "experts; choose a divisor of the expert count"
            )
        block.experts = ExpertParallelExperts(experts, mesh)
        sharded.append(block.experts)
    return sharded
