"""Router replay: the trainer sends each token to the experts the rollout engine sent it to.

The engine and the trainer compute the router logits with different kernels (and often
precisions), so near ties between experts break differently: a token goes through other
experts in the trainer than the ones that produced the sampled token, and the importance
ratio pi_train / pi_rollout moves for reasons that have nothing to do with learning.
Replaying the rollout's choices removes that source of mismatch (R3, "rollout routing
replay").

With the rollout's experts e (N, k) of a layer (-1 where the engine kept none: padding and
the last token, which decides no log-prob) and the trainer's router logits z (N, E), the
replayed routing weights are the trainer's own probabilities of those experts,

    w_j = p_{e_j} / sum_i p_{e_i}   (normalised when the router normalises its top-k),
    p = softmax(z) in float32,

so the router still trains through them; tokens without a record keep the trainer's choice.

``routing_mismatch`` measures how many tokens went elsewhere: the share of recorded tokens
whose expert *set* differs from the rollout's in at least one sparse layer.
"""

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn


def laid_out_routes(routes: Tensor, lay_out: object) -> list[Tensor]:
    """Batch field ``routed_experts`` (B, L, S, k) -> per sparse layer (tokens, k) long, in
    the flattened order the model sees the micro-batch (``lay_out``: the layout's
    ``PackedSequences.lay_out``, (..., B, L) -> (..., 1, N) packed or (..., B, L'))."""
    per_layer = lay_out(routes.long().permute(2, 3, 0, 1))  # (S, k, ..., tokens)
    return list(per_layer.flatten(2).permute(0, 2, 1))


# (router module, router logits (N, E), experts to use (N, k)) -> their weights (N, k)
RouterWeights = Callable[[nn.Module, Tensor, Tensor], Tensor]


def softmax_weights(router: nn.Module, logits: Tensor, experts: Tensor) -> Tensor:
    """The module docstring's weights (Qwen-MoE's routers): the experts' softmax
    probabilities (float32), renormalised over the k when the router normalises its top-k,
    in the logits' dtype."""
    weights = torch.softmax(logits, dim=-1, dtype=torch.float).gather(1, experts)
    if getattr(router, "norm_topk_prob", False):
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.to(logits.dtype)


@dataclass
class RouterReplay:
    """``with RouterReplay(routers, routes):`` every router's output takes the experts of
    ``routes`` (one (tokens, k) per sparse layer, in order) where recorded, with the
    weights ``weights_of`` gives them (the module docstring's, unless the model's family
    routes otherwise: ``TrainingHooks.router_weights``); ``natural`` keeps what the routers
    chose themselves. ``routes=None`` replays nothing (and records nothing)."""

    routers: list[nn.Module]
    routes: list[Tensor] | None
    weights_of: RouterWeights = softmax_weights
    natural: list[Tensor] = field(default_factory=list)

    def __enter__(self) -> "RouterReplay":
        self._hooks = []
        if self.routes is not None:
            self.natural = [None] * len(self.routers)
            self._hooks = [
                router.register_forward_hook(self._replay(slot))
                for slot, router in enumerate(self.routers)
            ]
        return self

    def _replay(self, slot: int) -> Callable:
        def hook(router: nn.Module, inputs: tuple, output: tuple) -> tuple:
            logits, _, chosen = output  # transformers' router: (logits, weights, indices)
            replayed = self.routes[slot].to(chosen.device)
            if replayed.shape != chosen.shape:
                raise ValueError(
                    f"routed_experts give {tuple(replayed.shape)} (tokens, k) for sparse layer "
                    f"{slot}, the router routed {tuple(chosen.shape)}: the rollout's routes do "
                    "not belong to these tokens"
                )
            self.natural[slot] = chosen
            recorded = (replayed >= 0).all(dim=-1, keepdim=True)
            experts = torch.where(recorded, replayed, chosen)
            return logits, self.weights_of(router, logits, experts), experts

        return hook

    def __exit__(self, *exc: object) -> None:
        for hook in self._hooks:
            hook.remove()


def routing_mismatch(trainer: list[Tensor], rollout: list[Tensor], valid: Tensor) -> Tensor:
    """The share of tokens (where ``valid`` (N,) and the rollout recorded routes) whose
    experts in ``trainer`` differ, as a set, from ``rollout``'s in some sparse layer; both
    one (N, k) per layer. 0 when no token qualifies."""
    recorded = valid.clone()
    differs = torch.zeros_like(valid)
    for ours, theirs in zip(trainer, rollout, strict=True):
        theirs = theirs.to(ours.device)
        recorded &= (theirs >= 0).all(dim=-1)
        differs |= (ours.sort(dim=-1).values != theirs.sort(dim=-1).values).any(dim=-1)
    count = recorded.sum()
    return (differs & recorded).sum() / count.clamp(min=1)
