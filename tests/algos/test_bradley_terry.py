"""The Bradley-Terry pairwise loss against a plain-Python reference: values, margins,
padding pairs, the gradient, extreme gaps, and invariance to how the pairs are split."""

import math

import pytest
import torch

from ascent.algos.bradley_terry import bradley_terry_loss


def reference(chosen, rejected, margins, weights):
    """-log sigmoid(r_c - r_r - m) averaged over the real pairs, and the accuracy."""
    real = [i for i, w in enumerate(weights) if w]
    losses = [
        -math.log(1.0 / (1.0 + math.exp(-(chosen[i] - rejected[i] - margins[i])))) for i in real
    ]
    accuracy = sum(chosen[i] > rejected[i] for i in real) / len(real)
    return sum(losses) / len(real), accuracy


def test_matches_the_reference_with_margins_and_padding():
    draw = torch.Generator().manual_seed(0)
    chosen, rejected = torch.randn(12, generator=draw), torch.randn(12, generator=draw)
    margins = torch.rand(12, generator=draw)
    weights = torch.tensor([1.0] * 10 + [0.0] * 2)  # two padding pairs weigh nothing
    out = bradley_terry_loss(chosen, rejected, num_pairs=10, weights=weights, margins=margins)
    loss, accuracy = reference(chosen.tolist(), rejected.tolist(), margins.tolist(), weights)
    assert float(out.loss) == pytest.approx(loss, rel=1e-6)
    assert float(out.metrics["accuracy"]) == pytest.approx(accuracy)
    gap = (chosen - rejected)[:10]
    assert float(out.metrics["margin"]) == pytest.approx(float(gap.mean()), rel=1e-6)


def test_the_gradient_is_minus_sigmoid_of_the_negative_gap():
    """d L_i / d r_c = -sigmoid(-(r_c - r_r)) / N, and the opposite for r_r."""
    chosen = torch.tensor([2.0, -1.0, 0.5], requires_grad=True)
    rejected = torch.tensor([0.0, 1.0, 0.5], requires_grad=True)
    bradley_terry_loss(chosen, rejected, num_pairs=3).loss.backward()
    for i in range(3):
        gap = float(chosen[i] - rejected[i])
        expected = -1.0 / (1.0 + math.exp(gap)) / 3
        assert float(chosen.grad[i]) == pytest.approx(expected, rel=1e-6)
        assert float(rejected.grad[i]) == pytest.approx(-expected, rel=1e-6)


def test_extreme_gaps_stay_finite():
    out = bradley_terry_loss(
        torch.tensor([-200.0, 200.0]), torch.tensor([200.0, -200.0]), num_pairs=2
    )
    assert float(out.loss) == pytest.approx(400.0 / 2)  # softplus(400) = 400, the other 0
    assert float(out.metrics["accuracy"]) == 0.5


def test_a_tie_is_not_counted_as_right():
    out = bradley_terry_loss(torch.tensor([1.0]), torch.tensor([1.0]), num_pairs=1)
    assert float(out.metrics["accuracy"]) == 0.0
    assert float(out.loss) == pytest.approx(math.log(2.0))


@pytest.mark.parametrize("parts", [1, 2, 4])
def test_micro_batch_shares_add_up_to_the_whole(parts):
    """Each part divides by the global pair count: the parts' losses sum to the whole's,
    and times dp_size when the parts are ranks whose gradients FSDP averages."""
    draw = torch.Generator().manual_seed(1)
    chosen, rejected = torch.randn(8, generator=draw), torch.randn(8, generator=draw)
    whole = bradley_terry_loss(chosen, rejected, num_pairs=8).loss
    shares = [
        bradley_terry_loss(c, r, num_pairs=8, dp_size=parts).loss
        for c, r in zip(chosen.chunk(parts), rejected.chunk(parts), strict=True)
    ]
    assert float(sum(shares)) / parts == pytest.approx(float(whole), rel=1e-6)
