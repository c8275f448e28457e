"""The clipped value loss against a per-token reference."""

import pytest
import torch

from ascent.algos.value_loss import value_loss
from tests.algos.cases import make_case
from tests.algos.reference import valid_positions


@pytest.mark.parametrize("clip", [0.2, 1.0, None])
def test_value_loss_matches_reference(clip):
    case = make_case(3)
    old = torch.where(case.mask, case.values + 0.3 * torch.randn_like(case.values), torch.nan)
    returns = torch.where(case.mask, torch.randn_like(case.values), torch.nan)
    values = case.values.clone().requires_grad_()
    out = value_loss(values, old, returns, case.mask, clip=clip)
    out.per_token.sum().backward()
    clipped_larger = 0
    cells = valid_positions(case.mask.tolist())
    for i, t in cells:
        v, o, r = float(case.values[i, t]), float(old[i, t]), float(returns[i, t])
        error = (v - r) ** 2
        if clip is None:
            loss, grad = 0.5 * error, v - r
        else:
            vc = min(max(v, o - clip), o + clip)
            clipped_error = (vc - r) ** 2
            clipped_larger += clipped_error > error
            loss = 0.5 * max(error, clipped_error)
            # Gradient flows through whichever term is larger; the clipped one is flat in v
            # outside the clip range.
            inside = o - clip < v < o + clip
            grad = (v - r) if error >= clipped_error else ((vc - r) if inside else 0.0)
        assert out.per_token[i, t].item() == pytest.approx(loss, rel=1e-12)
        assert values.grad[i, t].item() == pytest.approx(grad, rel=1e-9, abs=1e-12)
    assert (values.grad[~case.mask] == 0).all() and (out.per_token[~case.mask] == 0).all()
    assert out.metrics["vf_clipfrac"].item() == pytest.approx(clipped_larger / len(cells), rel=1e-6)
    if clip == 0.2:
        assert 0 < clipped_larger < len(cells)
