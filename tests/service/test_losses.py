"""The Tinker losses the service computes are ascent's own policy losses on the same
tokens: ``ppo`` is ascent's clipped PPO (``clip_low_threshold`` = 1 - clip_low,
``clip_high_threshold`` = 1 + clip_high, no dual clip) summed over tokens, and
``importance_sampling`` the same loss with the clip open, ``cispo`` ascent's CISPO; values
and gradients agree."""

import pytest
import torch

from ascent.algos import PolicyLossInputs, compute_policy_loss
from ascent.service.losses import loss_of


def summed_ascent_loss(name, lp, q, advantages, **params):
    inputs = PolicyLossInputs(
        lp.unsqueeze(0), q.unsqueeze(0), advantages.unsqueeze(0), torch.ones(1, lp.numel())
    )
    return compute_policy_loss(name, inputs, **params).per_token.sum()


@pytest.mark.parametrize(
    "name, config, ascent, params",
    [
        (
            "ppo",
            {"clip_low_threshold": 0.8, "clip_high_threshold": 1.28},
            "ppo",
            {"clip_low": 0.2, "clip_high": 0.28, "dual_clip": None},
        ),
        ("importance_sampling", {}, "ppo", {"clip_low": 1.0, "clip_high": 1e9, "dual_clip": None}),
        (
            "cispo",
            {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1},
            "cispo",
            {"clip_low": 0.1, "clip_high": 0.1},
        ),
    ],
)
def test_the_service_losses_are_ascents(name, config, ascent, params):
    generator = torch.Generator().manual_seed(0)
    q = -torch.rand(12, generator=generator) * 3
    lp = (q + 0.4 * torch.randn(12, generator=generator)).requires_grad_()
    advantages = torch.randn(12, generator=generator)
    loss, _ = loss_of(name)
    ours = loss(lp, {"logprobs": q, "advantages": advantages}, config)
    (ours_grad,) = torch.autograd.grad(ours, lp)
    theirs = summed_ascent_loss(ascent, lp, q, advantages, **params)
    (theirs_grad,) = torch.autograd.grad(theirs, lp)
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ours_grad, theirs_grad, rtol=1e-6, atol=1e-6)


def test_a_loss_config_that_is_not_numbers_is_refused_by_name():
    from ascent.service.losses import numeric_config
    from ascent.service.wire import WireError

    assert numeric_config({"clip_low_threshold": 1}) == {"clip_low_threshold": 1.0}
    assert numeric_config(None) == {}
    with pytest.raises(WireError, match=r"loss_fn_config\['clip_high_threshold'\] = 'wide'"):
        numeric_config({"clip_high_threshold": "wide"})
