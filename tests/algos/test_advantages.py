"""Every advantage estimator against its plain-Python float64 reference (tests/algos/reference.py),
on random masks and group layouts with singleton groups, all-equal groups, all-masked rows,
interior masked spans, and NaN in every masked input position."""

import pytest
import torch

from ascent.algos.advantages import ADVANTAGE_ESTIMATORS, compute_advantages
from ascent.algos.types import AdvantageInputs
from tests.algos import reference as ref
from tests.algos.cases import Case, make_case

SEEDS = range(6)


def inputs_of(case: Case) -> AdvantageInputs:
    return AdvantageInputs(
        token_rewards=case.token_rewards,
        response_mask=case.mask,
        group_ids=case.group_ids,
        values=case.values,
        baseline_scores=case.baseline_scores,
    )


def lists(case: Case):
    return case.token_rewards.tolist(), case.mask.tolist(), case.group_ids.tolist()


def expected(name: str, params: dict, case: Case):
    """(advantages, returns or None) from the reference; returns None when returns = advantages."""
    rewards, mask, groups = lists(case)
    if name == "gae":
        return ref.gae(
            rewards,
            case.values.tolist(),
            mask,
            params["gamma"],
            params["lam"],
            params.get("critic_lam"),
            params.get("length_adaptive_alpha"),
        )
    if name in ("grpo", "drgrpo"):
        norm = params.get("norm_by_std", True) and name == "grpo"
        return ref.grpo(rewards, mask, groups, norm_by_std=norm), None
    if name == "grpo_passk":
        return ref.grpo_passk(rewards, mask, groups, **params), None
    if name == "rloo":
        return ref.rloo(rewards, mask, groups), None
    if name == "reinforce_pp":
        return ref.reinforce_pp(rewards, mask, params["gamma"])
    if name == "reinforce_pp_baseline":
        return ref.reinforce_pp_baseline(rewards, mask, groups), None
    if name == "remax":
        return ref.remax(rewards, mask, case.baseline_scores.tolist())
    if name == "opo":
        return ref.opo(rewards, mask, groups), None
    if name == "gpg":
        return ref.gpg(rewards, mask, groups), None
    if name == "sppo":
        return ref.sppo(
            rewards, mask, groups, params.get("eta", 1.0), params.get("temperature", 1.0)
        ), None
    raise AssertionError(name)


CONFIGS = [
    ("gae", {"gamma": 1.0, "lam": 1.0}),
    ("gae", {"gamma": 0.97, "lam": 0.9}),
    ("gae", {"gamma": 0.99, "lam": 0.95, "critic_lam": 1.0}),
    ("gae", {"gamma": 1.0, "lam": 0.95, "critic_lam": 1.0, "length_adaptive_alpha": 0.05}),
    ("grpo", {}),
    ("grpo", {"norm_by_std": False}),
    ("drgrpo", {}),
    ("grpo_passk", {}),
    ("grpo_passk", {"norm_by_std": False}),
    ("rloo", {}),
    ("reinforce_pp", {"gamma": 1.0}),
    ("reinforce_pp", {"gamma": 0.9}),
    ("reinforce_pp_baseline", {}),
    ("remax", {}),
    ("opo", {}),
    ("gpg", {}),
    ("sppo", {}),
    ("sppo", {"eta": 3.0, "temperature": 0.2}),
    ("sppo", {"temperature": 0.0}),
]


# prime reads process rewards and needs groups of 2 or more: tests/algos/test_prime.py.
OWN_TESTS = {"prime"}


def test_every_registered_estimator_is_checked_here():
    assert {name for name, _ in CONFIGS} | OWN_TESTS == set(ADVANTAGE_ESTIMATORS.names())


@pytest.mark.parametrize("dense", [False, True], ids=["outcome", "dense"])
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("name", "params"), CONFIGS, ids=lambda c: str(c))
def test_matches_reference(name, params, seed, dense):
    case = make_case(seed, dense_rewards=dense)
    out = compute_advantages(name, inputs_of(case), **params)
    want_adv, want_ret = expected(name, params, case)
    if want_ret is None:
        want_ret = want_adv
    for got, want in ((out.advantages, want_adv), (out.returns, want_ret)):
        assert got.dtype == torch.float64 and got.shape == case.mask.shape
        assert torch.isfinite(got).all(), "NaN from a masked position reached the result"
        assert (got[~case.mask] == 0).all(), "non-zero value outside the response mask"
        torch.testing.assert_close(
            got, torch.tensor(want, dtype=torch.float64), rtol=1e-9, atol=1e-9
        )


def test_float32_inputs_give_float32_and_agree():
    case = make_case(11)
    as32 = AdvantageInputs(
        token_rewards=case.token_rewards.float(),
        response_mask=case.mask.int(),  # 0/1 masks work as well as bool
        group_ids=case.group_ids,
        values=case.values.float(),
        baseline_scores=case.baseline_scores.float(),
    )
    for name in sorted(set(ADVANTAGE_ESTIMATORS.names()) - OWN_TESTS):
        out32 = compute_advantages(name, as32)
        out64 = compute_advantages(name, inputs_of(case))
        assert out32.advantages.dtype == torch.float32
        torch.testing.assert_close(
            out32.advantages.double(), out64.advantages, rtol=1e-4, atol=1e-4
        )


GROUP_ESTIMATORS = ["grpo", "drgrpo", "grpo_passk", "rloo", "opo", "gpg", "sppo"]


@pytest.mark.parametrize("name", GROUP_ESTIMATORS)
def test_singleton_and_all_equal_groups_get_zero(name):
    case = make_case(3)
    out = compute_advantages(name, inputs_of(case))
    ids = case.group_ids.tolist()
    scores = case.scores
    for i, g in enumerate(ids):
        group = [j for j, h in enumerate(ids) if h == g]
        if len(group) == 1 or len({round(scores[j], 12) for j in group}) == 1:
            assert (out.advantages[i] == 0).all(), f"row {i} of a degenerate group"


def test_grpo_singleton_differs_from_verl_on_purpose():
    # One prompt, one sample: verl would give the raw score; ascent gives no signal.
    inputs = AdvantageInputs(
        token_rewards=torch.tensor([[0.0, 1.0]]),
        response_mask=torch.ones(1, 2, dtype=torch.bool),
        group_ids=torch.tensor([7]),
    )
    assert (compute_advantages("grpo", inputs).advantages == 0).all()


def test_passk_credits_only_the_best_sample():
    inputs = AdvantageInputs(
        token_rewards=torch.tensor([[0.2], [0.9], [0.5], [0.9]]),
        response_mask=torch.ones(4, 1),
        group_ids=torch.tensor([1, 1, 1, 1]),
    )
    adv = compute_advantages("grpo_passk", inputs, norm_by_std=False).advantages.squeeze(-1)
    # The first of the two tied best samples is "the best"; the tie gives it zero advantage.
    assert adv.tolist() == [0.0, 0.0, 0.0, 0.0]
    inputs = AdvantageInputs(
        token_rewards=torch.tensor([[0.2], [0.9], [0.5]]),
        response_mask=torch.ones(3, 1),
        group_ids=torch.tensor([1, 1, 1]),
    )
    adv = compute_advantages("grpo_passk", inputs, norm_by_std=False).advantages.squeeze(-1)
    torch.testing.assert_close(adv, torch.tensor([0.0, 0.4, 0.0]))


def test_gae_skips_tool_tokens_in_the_td_chain():
    # r on the last token; a masked (tool) token in the middle must not break the chain.
    mask = torch.tensor([[True, False, True]])
    values = torch.tensor([[0.5, float("nan"), 0.25]])
    rewards = torch.tensor([[0.0, float("nan"), 1.0]])
    inputs = AdvantageInputs(token_rewards=rewards, response_mask=mask, values=values)
    out = compute_advantages("gae", inputs, gamma=1.0, lam=1.0)
    # gamma = lam = 1: returns are the reward-to-go, 1.0 on both valid tokens.
    torch.testing.assert_close(out.returns, torch.tensor([[1.0, 0.0, 1.0]]))


def test_missing_input_names_the_field():
    inputs = AdvantageInputs(token_rewards=torch.zeros(2, 3), response_mask=torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"grpo.*group_ids"):
        compute_advantages("grpo", inputs)
    with pytest.raises(ValueError, match=r"gae.*values"):
        compute_advantages("gae", inputs)
    with pytest.raises(ValueError, match=r"remax.*baseline_scores"):
        compute_advantages("remax", inputs)


def test_sppo_refuses_a_negative_temperature():
    inputs = AdvantageInputs(
        token_rewards=torch.ones(2, 2), response_mask=torch.ones(2, 2), group_ids=torch.zeros(2)
    )
    with pytest.raises(ValueError, match=r"sppo: temperature=-1.*>= 0"):
        compute_advantages("sppo", inputs, temperature=-1.0)
