"""The routers' choices recorded in a forward, the Switch load-balancing loss and the
expert-load metrics (``ascent.moe.routing``)."""

import pytest
import torch

from ascent.models import load_causal_lm
from ascent.moe.routing import (
    RouterTape,
    expert_load_metrics,
    is_mixture_of_experts,
    load_balancing_loss,
    routers_of,
)


def test_the_loss_is_one_when_balanced_and_the_expert_count_when_collapsed():
    experts = 4
    even_logits = torch.zeros(8, experts)
    even_choice = torch.arange(8)[:, None] % experts  # two tokens per expert, k = 1
    valid = torch.ones(8, dtype=torch.bool)
    assert float(load_balancing_loss([even_logits], [even_choice], valid)) == pytest.approx(1.0)
    collapsed_logits = torch.full((8, experts), -30.0)
    collapsed_logits[:, 2] = 30.0
    collapsed_choice = torch.full((8, 1), 2)
    loss = load_balancing_loss([collapsed_logits], [collapsed_choice], valid)
    assert float(loss) == pytest.approx(experts, rel=1e-6)
    metrics = expert_load_metrics([collapsed_choice, even_choice], experts, valid)
    assert metrics["moe/imbalance"] == pytest.approx((4 + 1) / 2)
    assert metrics["moe/imbalance_max"] == 4 and metrics["moe/dead_experts"] == 1.5


def test_padding_does_not_count():
    logits = torch.zeros(4, 2)
    choice = torch.tensor([[0], [1], [1], [1]])
    valid = torch.tensor([True, True, False, False])
    assert float(load_balancing_loss([logits], [choice], valid)) == pytest.approx(1.0)


def test_the_tape_records_every_sparse_layer_in_the_graph(tiny_moe, tiny_model):
    model = load_causal_lm(tiny_moe)
    assert is_mixture_of_experts(model) and not is_mixture_of_experts(load_causal_lm(tiny_model))
    ids = torch.randint(0, 250, (2, 7), generator=torch.Generator().manual_seed(0))
    with RouterTape(routers_of(model)) as tape:
        model(input_ids=ids)
    assert tape.recorded() and len(tape.logits) == 2  # layers 0 and 2; layer 1 is dense
    assert tape.logits[0].shape == (14, 4) and tape.experts[0].shape == (14, 2)
    load_balancing_loss(tape.logits, tape.experts, torch.ones(14, dtype=torch.bool)).backward()
    assert model.model.layers[0].mlp.gate.weight.grad.abs().sum() > 0
    with RouterTape(routers_of(load_causal_lm(tiny_model))) as dense:
        pass
    assert not dense.recorded()
