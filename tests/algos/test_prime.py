"""PRIME's advantage and the implicit PRM's loss against plain-Python float64 references
(tests/algos/reference.py), on the shared random cases without singleton groups."""

import pytest
import torch

from ascent.algos.advantages import compute_advantages
from ascent.algos.implicit_prm import implicit_prm_loss, implicit_process_rewards
from ascent.algos.types import AdvantageInputs
from tests.algos import reference as ref
from tests.algos.cases import make_case


def grouped_case(seed: int, dense: bool = False):
    """A shared random case without its singleton groups (PRIME needs leave-one-out
    baselines), with random process rewards (NaN where masked)."""
    case = make_case(seed, dense_rewards=dense)
    ids = case.group_ids
    sizes = {g: int((ids == g).sum()) for g in ids.tolist()}
    keep = torch.tensor([sizes[g] >= 2 for g in ids.tolist()])
    g = torch.Generator().manual_seed(100 + seed)
    process = 0.05 * torch.randn(case.mask.shape, generator=g, dtype=torch.float64)
    process = torch.where(case.mask, process, torch.nan)
    return case.token_rewards[keep], process[keep], case.mask[keep], ids[keep]


PARAMS = [
    {},
    {"outcome_coef": 5.0, "process_coef": 2.0},
    {"whiten": False},
    {"outcome_coef": 0.0, "whiten": False},
]


@pytest.mark.parametrize("dense", [False, True], ids=["outcome", "dense"])
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("params", PARAMS, ids=str)
def test_prime_matches_reference(params, seed, dense):
    rewards, process, mask, ids = grouped_case(seed, dense)
    inputs = AdvantageInputs(
        token_rewards=rewards, response_mask=mask, group_ids=ids, process_rewards=process
    )
    out = compute_advantages("prime", inputs, **params)
    want_adv, want_ret = ref.prime(
        rewards.tolist(),
        process.tolist(),
        mask.tolist(),
        ids.tolist(),
        params.get("outcome_coef", 1.0),
        params.get("process_coef", 1.0),
        params.get("whiten", True),
    )
    for got, want in ((out.advantages, want_adv), (out.returns, want_ret)):
        assert got.dtype == torch.float64 and torch.isfinite(got).all()
        assert (got[~mask] == 0).all()
        torch.testing.assert_close(
            got, torch.tensor(want, dtype=torch.float64), rtol=1e-9, atol=1e-9
        )


def test_prime_without_process_rewards_is_rloo_to_go():
    # Zero process rewards, no whitening: every valid token's return is the RLOO advantage.
    rewards, process, mask, ids = grouped_case(2)
    inputs = AdvantageInputs(
        token_rewards=rewards,
        response_mask=mask,
        group_ids=ids,
        process_rewards=torch.zeros_like(process),
    )
    got = compute_advantages("prime", inputs, whiten=False).advantages
    rloo = compute_advantages("rloo", inputs).advantages
    torch.testing.assert_close(got, rloo, rtol=1e-9, atol=1e-9)


def test_prime_float32_agrees_with_float64():
    rewards, process, mask, ids = grouped_case(4, dense=True)
    out64 = compute_advantages(
        "prime",
        AdvantageInputs(rewards, mask.int(), ids, process_rewards=process),
    )
    out32 = compute_advantages(
        "prime",
        AdvantageInputs(rewards.float(), mask, ids, process_rewards=process.float()),
    )
    assert out32.advantages.dtype == torch.float32
    torch.testing.assert_close(out32.advantages.double(), out64.advantages, rtol=1e-4, atol=1e-4)


def test_prime_refuses_a_singleton_group_and_names_missing_inputs():
    inputs = AdvantageInputs(
        token_rewards=torch.ones(3, 2),
        response_mask=torch.ones(3, 2),
        group_ids=torch.tensor([0, 0, 1]),
        process_rewards=torch.zeros(3, 2),
    )
    with pytest.raises(ValueError, match="samples_per_prompt"):
        compute_advantages("prime", inputs)
    missing = AdvantageInputs(token_rewards=torch.ones(2, 2), response_mask=torch.ones(2, 2))
    with pytest.raises(ValueError, match=r"prime.*group_ids"):
        compute_advantages("prime", missing)


@pytest.mark.parametrize("seed", range(4))
def test_implicit_prm_loss_matches_reference(seed):
    case = make_case(seed)
    g = torch.Generator().manual_seed(seed)
    labels = (torch.rand(len(case.mask), generator=g) < 0.5).double()
    prm = case.log_probs.clone().requires_grad_(True)
    beta = 0.3
    out = implicit_prm_loss(
        prm,
        case.ref_log_probs,
        case.mask,
        labels,
        beta=beta,
        num_sequences=float(case.mask.any(-1).sum()),
    )
    want_loss, want_accuracy = ref.implicit_prm_loss(
        case.log_probs.tolist(),
        case.ref_log_probs.tolist(),
        case.mask.tolist(),
        labels.tolist(),
        beta,
    )
    assert out.loss.item() == pytest.approx(want_loss, rel=1e-9)
    assert out.metrics["accuracy"].item() == pytest.approx(want_accuracy, abs=1e-12)
    out.loss.backward()
    assert torch.isfinite(prm.grad).all() and (prm.grad[~case.mask] == 0).all()
    # The gradient of row i's loss w.r.t. each of its tokens is beta * (sigmoid(R_i) - l_i) / N.
    rewards = implicit_process_rewards(case.log_probs, case.ref_log_probs, case.mask, beta).sum(-1)
    per_row = beta * (torch.sigmoid(rewards) - labels) / float(case.mask.any(-1).sum())
    want_grad = torch.where(case.mask, per_row.unsqueeze(-1).expand_as(prm), 0.0)
    torch.testing.assert_close(prm.grad, want_grad, rtol=1e-9, atol=1e-12)


def test_implicit_prm_loss_splits_over_micro_batches_and_ranks():
    # The sum of the shares of any split (times 1/dp_size per rank, FSDP averages) is the loss.
    case = make_case(5)
    labels = torch.rand(len(case.mask), generator=torch.Generator().manual_seed(5))
    n = float(case.mask.any(-1).sum())
    whole = implicit_prm_loss(
        case.log_probs, case.ref_log_probs, case.mask, labels, beta=0.1, num_sequences=n
    ).loss
    parts = sum(
        implicit_prm_loss(
            case.log_probs[rows],
            case.ref_log_probs[rows],
            case.mask[rows],
            labels[rows],
            beta=0.1,
            num_sequences=n,
            dp_size=2,
        ).loss
        / 2
        for rows in (slice(0, 7), slice(7, None))
    )
    torch.testing.assert_close(parts, whole)
