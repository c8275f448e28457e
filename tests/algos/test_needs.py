"""An estimator declares what it needs on itself: ``@needs`` sets it, ``needs_of`` reads it
(nothing beyond the defaults when undeclared), and the built-ins declare theirs."""

import pytest
import torch

from ascent.algos import ADVANTAGE_ESTIMATORS, Needs, needs, needs_of
from ascent.algos.types import AdvantageInputs, Advantages


def undeclared(inputs: AdvantageInputs) -> Advantages:
    return Advantages(inputs.token_rewards, inputs.token_rewards)


def test_an_undeclared_estimator_needs_nothing_more():
    assert needs_of(undeclared) == Needs()
    assert Needs() == Needs(False, False, False, 1)


def test_the_declaration_survives_no_grad_on_either_side():
    @needs(values=True)
    @torch.no_grad()
    def outside(inputs):
        return inputs

    @torch.no_grad()
    @needs(baseline_scores=True, min_group_size=3)
    def inside(inputs):
        return inputs

    assert needs_of(outside) == Needs(values=True)
    assert needs_of(inside) == Needs(baseline_scores=True, min_group_size=3)
    assert outside(5) == 5  # the function itself is unchanged


def test_a_needs_attribute_of_another_type_is_an_error_that_says_what_to_do():
    def odd(inputs):
        return inputs

    odd.needs = {"values": True}
    with pytest.raises(TypeError, match=r"declare it with @ascent\.algos\.needs"):
        needs_of(odd)


def test_the_built_ins_declare_what_they_read():
    declared = {name: needs_of(ADVANTAGE_ESTIMATORS.get(name)) for name in ADVANTAGE_ESTIMATORS}
    assert declared.pop("gae") == Needs(values=True)
    assert declared.pop("remax") == Needs(baseline_scores=True)
    assert declared.pop("prime") == Needs(process_rewards=True, min_group_size=2)
    assert all(value == Needs() for value in declared.values())
