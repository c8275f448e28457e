"""Aggregation modes, the full actor objective, and the two promises the trainer relies on:
masked tokens get exactly zero gradient, and the gradient does not depend on how a
mini-batch is cut into micro-batches or data-parallel shards."""

import pytest
import torch

from ascent.algos.aggregation import AGGREGATION_MODES, LossNormalizer, aggregate
from ascent.algos.losses import POLICY_LOSSES
from ascent.algos.objective import actor_objective
from ascent.algos.rollout_correction import rollout_correction
from ascent.algos.types import PolicyLossInputs
from ascent.algos.value_loss import value_loss
from tests.algos import loss_reference as ref
from tests.algos.cases import make_case
from tests.algos.reference import valid_positions


def reference_aggregate(loss, mask, mode, num_tokens, num_sequences, norm_length):
    rows = {}
    for i, t in valid_positions(mask.tolist()):
        rows.setdefault(i, []).append(float(loss[i, t]))
    if mode == "token-mean":
        return sum(sum(r) for r in rows.values()) / num_tokens
    if mode == "seq-mean-token-sum":
        return sum(sum(r) for r in rows.values()) / num_sequences
    if mode == "seq-mean-token-mean":
        return sum(sum(r) / len(r) for r in rows.values()) / num_sequences
    return sum(sum(r) for r in rows.values()) / (num_sequences * norm_length)


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
def test_aggregate_matches_reference(mode):
    case = make_case(0)
    loss = torch.where(case.mask, torch.randn(case.mask.shape, dtype=torch.float64), torch.nan)
    norm = LossNormalizer.from_mask(case.mask, norm_length=50)
    got = aggregate(loss, case.mask, mode, norm)
    valid_rows = int(case.mask.any(-1).sum())
    assert valid_rows < case.mask.shape[0], "the case has an all-masked row, not counted in N_seq"
    want = reference_aggregate(loss, case.mask, mode, int(case.mask.sum()), valid_rows, 50)
    assert got.item() == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
def test_sequence_geometric_weighting_scales_each_row_by_its_geometric_mean(mode):
    case = make_case(1)
    gen = torch.Generator().manual_seed(1)
    loss = torch.where(case.mask, torch.randn(case.mask.shape, dtype=torch.float64), torch.nan)
    weights = 0.05 + 1.95 * torch.rand(case.mask.shape, generator=gen, dtype=torch.float64)
    weights[tuple(case.mask.nonzero()[0])] = 0.0  # a masked-IS zero counts as 1e-10 in the log
    weights = torch.where(case.mask, weights, torch.nan)
    norm = LossNormalizer.from_mask(case.mask, norm_length=50)
    got = aggregate(loss, case.mask, mode, norm, weights, "sequence_geometric_mean")

    seq_weights = ref.geo_mean_sequence_weights(weights, case.mask)
    weighted = loss.clone()
    for i, t in valid_positions(case.mask.tolist()):
        weighted[i, t] = loss[i, t] * seq_weights[i]
    valid_rows = int(case.mask.any(-1).sum())
    want = reference_aggregate(weighted, case.mask, mode, int(case.mask.sum()), valid_rows, 50)
    assert got.item() == pytest.approx(want, rel=1e-12)


def test_unknown_weighting_is_an_error():
    mask = torch.ones(1, 2)
    with pytest.raises(ValueError, match="weighting"):
        aggregate(
            torch.zeros(1, 2), mask, "token-mean", LossNormalizer.from_mask(mask), mask, "sequence"
        )


def test_empty_minibatch_gives_zero_not_nan():
    mask = torch.zeros(3, 4, dtype=torch.bool)
    loss = torch.full((3, 4), torch.nan)
    for mode in AGGREGATION_MODES:
        assert aggregate(loss, mask, mode, LossNormalizer.from_mask(mask)).item() == 0.0


def test_unknown_mode_is_an_error():
    mask = torch.ones(1, 2)
    with pytest.raises(ValueError, match="aggregation mode"):
        aggregate(torch.zeros(1, 2), mask, "token-sum", LossNormalizer.from_mask(mask))


# ---- the toy "model": shared weights, so every row's gradient lands on the same parameters ----

VOCAB, DIM = 11, 6


class Toy:
    """Log-probs, entropy and values of fixed tokens under a linear softmax policy."""

    def __init__(self, batch: int, length: int, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.features = torch.randn(batch, length, DIM, generator=g, dtype=torch.float64)
        self.tokens = torch.randint(0, VOCAB, (batch, length), generator=g)
        self.weight = torch.randn(DIM, VOCAB, generator=g, dtype=torch.float64)
        self.value_head = torch.randn(DIM, generator=g, dtype=torch.float64)

    def params(self):
        return self.weight.clone().requires_grad_(), self.value_head.clone().requires_grad_()

    def forward(self, rows, weight, value_head):
        logits = self.features[rows] @ weight
        logp = torch.log_softmax(logits, dim=-1)
        log_probs = logp.gather(-1, self.tokens[rows].unsqueeze(-1)).squeeze(-1)
        entropy = -(logp.exp() * logp).sum(-1)
        return log_probs, entropy, self.features[rows] @ value_head


SEQUENCE_TIS = {"level": "sequence", "mode": "truncate"}


def micro_loss(toy, case, rows, name, mode, norm, weight, value_head, correction):
    log_probs, entropy, values = toy.forward(rows, weight, value_head)
    mask = case.mask[rows]
    policy = POLICY_LOSSES.get(name)(
        PolicyLossInputs(log_probs, case.old_log_probs[rows], case.advantages[rows], mask)
    )
    out = actor_objective(
        policy,
        mask,
        mode=mode,
        normalizer=norm,
        weights=rollout_correction(
            case.old_log_probs[rows], case.rollout_log_probs[rows], mask, **correction
        ).weights,
        entropy=entropy,
        entropy_coef=0.01,
        log_probs=log_probs,
        ref_log_probs=case.ref_log_probs[rows],
        kl_coef=0.1,
        kl_estimator="k3",
    )
    critic = value_loss(
        values, case.values[rows], case.token_rewards[rows].nan_to_num(), mask, clip=0.2
    )
    return out.loss + aggregate(critic.per_token, mask, mode, norm)


def gradient(toy, case, batches, name, mode, norm, correction):
    weight, value_head = toy.params()
    for rows in batches:
        micro_loss(toy, case, rows, name, mode, norm, weight, value_head, correction).backward()
    return torch.cat([weight.grad.flatten(), value_head.grad])


INVARIANT_LOSSES = ["ppo", "gspo", "reinforce", "cispo", "geo_mean"]


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
@pytest.mark.parametrize("name", INVARIANT_LOSSES)
def test_micro_batches_and_data_parallel_shards_give_the_whole_batch_gradient(name, mode):
    assert_whole_batch_gradient(name, mode, SEQUENCE_TIS)


@pytest.mark.parametrize(
    "correction",
    [
        {"level": "token", "mode": "truncate", "upper": 1.2},
        {"level": "token", "mode": "mask", "lower": 0.8, "upper": 1.25},
    ],
    ids=["token-TIS", "token-MIS"],
)
def test_geo_mean_with_token_weights_gives_the_whole_batch_gradient(correction):
    """geo_mean turns token weights into one geometric-mean weight per sequence; that too must
    not depend on the micro-batching (the mode only concerns entropy, KL and critic here)."""
    assert_whole_batch_gradient("geo_mean", "seq-mean-token-sum", correction)


def assert_whole_batch_gradient(name, mode, correction):
    batch, length = 24, 12
    case = make_case(7, batch=batch, length=length)
    toy = Toy(batch, length)
    every = torch.arange(batch)
    whole_norm = LossNormalizer.from_mask(case.mask, norm_length=length)
    whole = gradient(toy, case, [every], name, mode, whole_norm, correction)
    weights = rollout_correction(
        case.old_log_probs, case.rollout_log_probs, case.mask, **correction
    ).weights
    assert ((weights != 1) & case.mask).any(), "the case should exercise the weights"

    # Gradient accumulation over uneven micro-batches, with the mini-batch's denominators.
    micro_batches = list(torch.split(every, [5, 1, 7, 11]))
    micro = gradient(toy, case, micro_batches, name, mode, whole_norm, correction)
    torch.testing.assert_close(micro, whole, rtol=1e-10, atol=1e-12)

    # Two data-parallel ranks (uneven shards), each with its own micro-batches; the
    # denominators are all-reduced sums of the ranks' counts, and FSDP averages gradients.
    shards = [every[:13], every[13:]]
    counts = [LossNormalizer.from_mask(case.mask[s]) for s in shards]
    dp_norm = LossNormalizer(
        num_tokens=sum(c.num_tokens for c in counts),
        num_sequences=sum(c.num_sequences for c in counts),
        norm_length=length,
        dp_size=2,
    )
    rank_grads = [
        gradient(toy, case, list(torch.split(shard, 4)), name, mode, dp_norm, correction)
        for shard in shards
    ]
    torch.testing.assert_close((rank_grads[0] + rank_grads[1]) / 2, whole, rtol=1e-10, atol=1e-12)
    assert whole.abs().sum() > 0


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
@pytest.mark.parametrize("name", POLICY_LOSSES.names())
def test_masked_tokens_get_exactly_zero_gradient(name, mode):
    case = make_case(4)  # NaN sits in every masked position of every input
    log_probs = case.log_probs.clone().requires_grad_()
    entropy = torch.where(case.mask, torch.rand(case.mask.shape, dtype=torch.float64), torch.nan)
    entropy.requires_grad_()
    values = case.values.clone().requires_grad_()
    rollout_weights = torch.where(case.mask, 1.5, torch.nan)
    policy = POLICY_LOSSES.get(name)(
        PolicyLossInputs(log_probs, case.old_log_probs, case.advantages, case.mask),
        **({"kl_cov_ratio": 0.2} if name == "kl_cov" else {}),
    )
    norm = LossNormalizer.from_mask(case.mask)
    out = actor_objective(
        policy,
        case.mask,
        mode=mode,
        normalizer=norm,
        weights=rollout_weights,
        entropy=entropy,
        entropy_coef=0.01,
        log_probs=log_probs,
        ref_log_probs=case.ref_log_probs,
        kl_coef=0.1,
    )
    critic = value_loss(values, case.values.detach(), case.token_rewards, case.mask)
    (out.loss + aggregate(critic.per_token, case.mask, mode, norm)).backward()
    assert torch.isfinite(out.loss)
    for tensor in (log_probs, entropy, values):
        assert torch.isfinite(tensor.grad).all(), "NaN reached a gradient"
        assert (tensor.grad[~case.mask] == 0).all(), "a masked token received gradient"
        assert (tensor.grad[case.mask] != 0).any()
    assert all(torch.isfinite(v) for v in out.metrics.values())
