"""What a mixture-of-experts model's routers chose in one forward, and what follows from it.

``RouterTape`` records, for every sparse layer (a module with ``experts`` and a ``gate``
router, as transformers' Qwen3-MoE block has), the router's logits (N, E) and its chosen
experts (N, k), through forward hooks: the logits stay in the autograd graph, so a loss
built from them trains the routers.

With p_n = softmax(logits_n) over E experts and e_nj the j-th expert of token n (N valid
tokens, k per token), the Switch Transformer load-balancing loss of one layer is

    aux = E * sum_e f_e * P_e,    f_e = (1 / (N k)) sum_n sum_j [e_nj = e],
                                  P_e = (1 / N) sum_n p_ne,

1 when both the routed share f and the mean probability P are uniform, up to E when all go
to one expert; the model's value is the mean over its sparse layers. Only f's counts are
discrete: the gradient flows through P. The load of expert e in a layer is N k f_e tokens;
its imbalance, max_e f_e / mean_e f_e (1 when even, E when one expert takes every token).
"""

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn


def sparse_blocks(model: nn.Module) -> list[nn.Module]:
    """The model's mixture-of-experts blocks, in order (empty for a dense model)."""
    return [m for m in model.modules() if hasattr(m, "experts") and hasattr(m, "gate")]


def is_mixture_of_experts(model: nn.Module) -> bool:
    return bool(sparse_blocks(model))


def routers_of(model: nn.Module) -> list[nn.Module]:
    """The routers of the model's sparse layers, in order (found once, taped many times)."""
    return [block.gate for block in sparse_blocks(model)]


@dataclass
class RouterTape:
    """``with RouterTape(routers_of(model)) as tape:`` records every sparse layer's router
    logits and chosen experts in ``tape.logits`` and ``tape.experts`` (one entry per layer,
    in order, for the last forward in the block)."""

    routers: list[nn.Module]
    logits: list[Tensor] = field(default_factory=list)
    experts: list[Tensor] = field(default_factory=list)

    def __enter__(self) -> "RouterTape":
        routers = self.routers
        self._slots = {id(router): i for i, router in enumerate(routers)}
        self.logits = [None] * len(routers)
        self.experts = [None] * len(routers)
        self._hooks = [router.register_forward_hook(self._record) for router in routers]
        return self

    def _record(self, router: nn.Module, inputs: tuple, output: tuple) -> None:
        logits, _, experts = output  # transformers' router: (logits, weights, indices)
        slot = self._slots[id(router)]
        self.logits[slot], self.experts[slot] = logits, experts

    def __exit__(self, *exc: object) -> None:
        for hook in self._hooks:
            hook.remove()

    def recorded(self) -> bool:
        return bool(self.logits) and all(t is not None for t in self.logits)

    def gathered(self, gather: Callable[[Tensor], Tensor]) -> "RouterTape":
        """The tape with every layer's logits and experts passed through ``gather`` (e.g.
        the sequence-parallel ranks' tokens put together)."""
        return RouterTape(
            self.routers, [gather(t) for t in self.logits], [gather(t) for t in self.experts]
        )


def load_balancing_loss(logits: list[Tensor], experts: list[Tensor], valid: Tensor) -> Tensor:
    """The mean over layers of the Switch load-balancing loss (module docstring) over the
    tokens where ``valid`` (N,) is true; logits (N, E) and experts (N, k) per layer."""
    losses = []
    for layer_logits, chosen in zip(logits, experts, strict=True):
        probs = torch.softmax(layer_logits[valid].float(), dim=-1)
        routed = routed_share(chosen[valid], probs.shape[-1])
        losses.append(probs.shape[-1] * (routed * probs.mean(0)).sum())
    return torch.stack(losses).mean()


def routed_share(experts: Tensor, num_experts: int) -> Tensor:
    """f (E,): the share of the (token, slot) routings that went to each expert."""
    counts = torch.bincount(experts.flatten(), minlength=num_experts).float()
    return counts / counts.sum().clamp(min=1)


def expert_load_metrics(experts: list[Tensor], num_experts: int, valid: Tensor) -> dict:
    """``moe/imbalance`` (mean over layers of max_e f_e / mean_e f_e) and
    ``moe/imbalance_max`` (the worst layer's), ``moe/dead_experts`` (mean over layers of the
    number of experts given no token)."""
    imbalances, dead = [], []
    for chosen in experts:
        share = routed_share(chosen[valid], num_experts)
        imbalances.append(float(share.max() * num_experts))
        dead.append(float((share == 0).sum()))
    return {
        "moe/imbalance": sum(imbalances) / len(imbalances),
        "moe/imbalance_max": max(imbalances),
        "moe/dead_experts": sum(dead) / len(dead),
    }


def routing_terms(tape: RouterTape, valid: Tensor, coef: float, share: float) -> tuple:
    """The load-balancing term to add to a micro-batch's loss, ``coef * share * aux``
    (``share``: the micro-batch's weight in the step's loss, so the step's term is the
    token-weighted mean of its micro-batches' aux times ``coef``), and its metrics:
    ``moe/aux_loss`` and the expert load (``expert_load_metrics``)."""
    with torch.no_grad() if coef == 0 else torch.enable_grad():
        aux = load_balancing_loss(tape.logits, tape.experts, valid)
    metrics = {"moe/aux_loss": float(aux.detach())}
    metrics |= expert_load_metrics(tape.experts, tape.logits[0].shape[-1], valid)
    return (coef * share) * aux if coef > 0 else None, metrics
