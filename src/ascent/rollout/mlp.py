"""The feed-forward half of a decoder layer for the native engine: a SiLU-gated MLP, a
mixture of experts (Qwen3-MoE's sparse block), or one with a shared expert (Qwen2-MoE's).
All read the model's own parameters, so a weight refresh that replaces their data is seen
at once."""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass(frozen=True)
class GatedMLP:
    """down(silu(gate(x)) * up(x)); weights (I, H), (I, H), (H, I)."""

    gate: Tensor
    up: Tensor
    down: Tensor

    def __call__(self, x: Tensor) -> Tensor:
        return F.linear(F.silu(F.linear(x, self.gate)) * F.linear(x, self.up), self.down)

    top_k = 0  # no routing

    def with_routes(self, x: Tensor) -> tuple[Tensor, None]:
        return self(x), None


@dataclass(frozen=True)
class Experts:
    """A top-k mixture of E SiLU-gated experts, as transformers' Qwen3-MoE block computes it.

    Routing: p = softmax(x @ router^T) in float32 (router (E, H)); each token keeps its k
    most probable experts, their probabilities renormalised to sum to 1 when ``normalize``
    (``norm_topk_prob``), cast back to x's dtype as weights w (N, k). Output:
    sum_j w_j * down_e (silu(g_e) * u_e) with (g_e, u_e) = split(gate_up_e @ x),
    gate_up (E, 2I, H), down (E, H, I).

    Dispatch is batched: the (token, expert) pairs are sorted by expert, so each expert runs
    one matmul over all its tokens (a loop over experts, never over tokens), and each
    result is added into its token's row. A token's k contributions are added in ascending
    expert order, as transformers adds them, so the sums agree to the last bit where the
    matmuls do.
    """

    router: Tensor
    gate_up: Tensor
    down: Tensor
    top_k: int
    normalize: bool

    def route(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Routing weights (N, k) in x's dtype and expert indices (N, k) of tokens x (N, H)."""
        logits = F.linear(x, self.router)
        probs = torch.softmax(logits, dim=-1, dtype=torch.float)
        top, experts = torch.topk(probs, self.top_k, dim=-1)
        if self.normalize:
            top = top / top.sum(dim=-1, keepdim=True)
        return top.to(logits.dtype), experts

    def __call__(self, x: Tensor) -> Tensor:
        return self.with_routes(x)[0]

    def with_routes(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The output (like x) and each token's k experts (tokens of x flattened, k)."""
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        weights, experts = self.route(flat)
        out = torch.zeros_like(flat)
        pairs = experts.flatten()
        order = torch.argsort(pairs, stable=True)  # (N*k,), grouped by expert
        counts = torch.bincount(pairs, minlength=self.router.shape[0]).tolist()
        tokens, pair_weights = order // self.top_k, weights.flatten()[order]
        start = 0
        for expert, count in enumerate(counts):
            if count == 0:
                continue
            rows = tokens[start : start + count]
            gate, up = F.linear(flat[rows], self.gate_up[expert]).chunk(2, dim=-1)
            y = F.linear(F.silu(gate) * up, self.down[expert])
            out.index_add_(0, rows, y * pair_weights[start : start + count, None])
            start += count
        return out.view(shape), experts


@dataclass(frozen=True)
class SharedExperts:
    """Qwen2-MoE's block: the routed ``Experts`` plus one shared expert that every token
    goes through, scaled by sigmoid(x @ shared_gate^T) (shared_gate (1, H))."""

    routed: Experts
    shared: GatedMLP
    shared_gate: Tensor

    @property
    def top_k(self) -> int:
        return self.routed.top_k

    def __call__(self, x: Tensor) -> Tensor:
        return self.with_routes(x)[0]

    def with_routes(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The output and the routed experts' choices (as ``Experts.with_routes``)."""
        out, experts = self.routed.with_routes(x)
        return out + torch.sigmoid(F.linear(x, self.shared_gate)) * self.shared(x), experts


# Each has ``top_k`` (0: dense) and ``with_routes(x) -> (output, experts (tokens, k) or None)``.
FeedForward = GatedMLP | Experts | SharedExperts


def mlp_of(layer: nn.Module) -> FeedForward:
    """The feed-forward of a transformers decoder layer; ValueError for a kind the engine
    does not run (MLP biases)."""
    mlp = layer.mlp
    if not hasattr(mlp, "experts"):
        return _gated(mlp)
    routed = Experts(
        router=mlp.gate.weight,
        gate_up=mlp.experts.gate_up_proj,
        down=mlp.experts.down_proj,
        top_k=mlp.gate.top_k,
        normalize=bool(mlp.gate.norm_topk_prob),
    )
    if not hasattr(mlp, "shared_expert"):
        return routed
    return SharedExperts(routed, _gated(mlp.shared_expert), mlp.shared_expert_gate.weight)


def _gated(mlp: nn.Module) -> GatedMLP:
    if getattr(mlp.gate_proj, "bias", None) is not None:
        raise ValueError("MLP biases are not supported by the native engine")
    return GatedMLP(mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight)
