"""The feed-forward half of a decoder layer: a gated MLP, or a mixture of experts.

Every kind has ``top_k`` (0: dense) and ``with_routes(x) -> (output like x, experts (tokens,
k) or None)``, so the decoder records routes without asking which kind it holds. Routing is a
piece of its own (``SoftmaxTopK``: Qwen's; ``GroupedSigmoidTopK``: DeepSeek-V3's), and so is
a shared expert, so a family composes the block its checkpoint has. Dense projections go
through ``blocks.linear`` (the engine's fastest form); routers and per-expert slices stay on
``F.linear``: a router's logits decide which experts run, and must round as transformers'.
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ascent.models.families.blocks import linear

Activation = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class GatedMLP:
    """down(act(gate(x)) * up(x)); weights (I, H), (I, H), (H, I)."""

    gate: Tensor
    up: Tensor
    down: Tensor
    act: Activation = F.silu
    top_k = 0  # no routing

    def __call__(self, x: Tensor) -> Tensor:
        return linear(self.act(linear(x, self.gate)) * linear(x, self.up), self.down)

    def with_routes(self, x: Tensor) -> tuple[Tensor, None]:
        return self(x), None


@dataclass(frozen=True)
class FusedGatedMLP:
    """A gated MLP whose gate and up projections are one weight (2I, H), gate rows first
    (Phi-3's ``gate_up_proj``): one matmul, split at call time."""

    gate_up: Tensor
    down: Tensor
    act: Activation = F.silu
    top_k = 0

    def __call__(self, x: Tensor) -> Tensor:
        gate, up = linear(x, self.gate_up).chunk(2, dim=-1)
        return linear(up * self.act(gate), self.down)

    def with_routes(self, x: Tensor) -> tuple[Tensor, None]:
        return self(x), None


@dataclass(frozen=True)
class SoftmaxTopK:
    """Qwen-MoE routing: p = softmax(x @ router^T) in float32 (router (E, H)); each token
    keeps its k most probable experts, their probabilities renormalised to sum to 1 when
    ``normalize`` (``norm_topk_prob``), cast back to x's dtype."""

    router: Tensor
    top_k: int
    normalize: bool

    @property
    def experts(self) -> int:
        return self.router.shape[0]

    def __call__(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Weights (N, k) and expert indices (N, k) of tokens x (N, H)."""
        logits = F.linear(x, self.router)
        probs = torch.softmax(logits, dim=-1, dtype=torch.float)
        top, experts = torch.topk(probs, self.top_k, dim=-1)
        if self.normalize:
            top = top / top.sum(dim=-1, keepdim=True)
        return top.to(logits.dtype), experts


@dataclass(frozen=True)
class GroupedSigmoidTopK:
    """DeepSeek-V3 routing, in float32: s = sigmoid(x @ router^T) (router (E, H)). Experts
    are chosen by s + b (``e_score_correction_bias``, the auxiliary-loss-free balance):
    the E experts form G groups, a group scores the sum of its two best, the ``top_groups``
    best groups stay, and among their experts the k best are kept. Their weights are their
    s (not s + b), divided by their sum (+1e-20) when ``normalize``, times ``scale``
    (``routed_scaling_factor``)."""

    router: Tensor
    bias: Tensor
    top_k: int
    groups: int
    top_groups: int
    normalize: bool
    scale: float

    @property
    def experts(self) -> int:
        return self.router.shape[0]

    def __call__(self, x: Tensor) -> tuple[Tensor, Tensor]:
        scores = F.linear(x.float(), self.router.float()).sigmoid()  # (N, E)
        choice = scores + self.bias
        tokens, experts = choice.shape
        per_group = choice.view(tokens, self.groups, experts // self.groups)
        group_scores = per_group.topk(2, dim=-1)[0].sum(dim=-1)  # (N, G)
        kept = torch.topk(group_scores, k=self.top_groups, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores).scatter_(1, kept, 1).bool()
        expert_mask = group_mask[:, :, None].expand_as(per_group).reshape(tokens, experts)
        choice = choice.masked_fill(~expert_mask, float("-inf"))
        chosen = torch.topk(choice, k=self.top_k, dim=-1, sorted=False)[1]
        weights = scores.gather(1, chosen)
        if self.normalize:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        return weights * self.scale, chosen


Routing = SoftmaxTopK | GroupedSigmoidTopK


@dataclass(frozen=True)
class Experts:
    """A top-k mixture of E gated experts: sum_j w_j * down_e (act(g_e) * u_e) with
    (g_e, u_e) = split(gate_up_e @ x), gate_up (E, 2I, H), down (E, H, I), the weights and
    experts from ``routing``.

    Dispatch is batched: the (token, expert) pairs are sorted by expert, so each expert runs
    one matmul over all its tokens (a loop over experts, never over tokens), and each
    result is added into its token's row. A token's k contributions are added in ascending
    expert order, as transformers adds them, so the sums agree to the last bit where the
    matmuls do.
    """

    routing: Routing
    gate_up: Tensor
    down: Tensor
    act: Activation = F.silu

    @property
    def top_k(self) -> int:
        return self.routing.top_k

    def route(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Routing weights (N, k) and expert indices (N, k) of tokens x (N, H)."""
        return self.routing(x)

    def __call__(self, x: Tensor) -> Tensor:
        return self.with_routes(x)[0]

    def with_routes(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The output (like x) and each token's k experts (tokens of x flattened, k)."""
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        weights, experts = self.routing(flat)
        out = torch.zeros_like(flat)
        pairs = experts.flatten()
        order = torch.argsort(pairs, stable=True)  # (N*k,), grouped by expert
        counts = torch.bincount(pairs, minlength=self.routing.experts).tolist()
        tokens, pair_weights = order // self.top_k, weights.flatten()[order]
        start = 0
        for expert, count in enumerate(counts):
            if count == 0:
                continue
            rows = tokens[start : start + count]
            gate, up = F.linear(flat[rows], self.gate_up[expert]).chunk(2, dim=-1)
            y = F.linear(self.act(gate) * up, self.down[expert])
            weighted = y * pair_weights[start : start + count, None]
            out.index_add_(0, rows, weighted.to(out.dtype))
            start += count
        return out.view(shape), experts


@dataclass(frozen=True)
class SharedExperts:
    """Routed ``Experts`` plus a shared expert every token goes through: scaled by
    sigmoid(x @ shared_gate^T) (shared_gate (1, H); Qwen2-MoE), or added as it is
    (``shared_gate`` None; DeepSeek-V3)."""

    routed: Experts
    shared: GatedMLP
    shared_gate: Tensor | None = None

    @property
    def top_k(self) -> int:
        return self.routed.top_k

    def __call__(self, x: Tensor) -> Tensor:
        return self.with_routes(x)[0]

    def with_routes(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The output and the routed experts' choices (as ``Experts.with_routes``)."""
        out, experts = self.routed.with_routes(x)
        shared = self.shared(x)
        if self.shared_gate is not None:
            shared = torch.sigmoid(F.linear(x, self.shared_gate)) * shared
        return out + shared, experts


FeedForward = GatedMLP | FusedGatedMLP | Experts | SharedExperts
