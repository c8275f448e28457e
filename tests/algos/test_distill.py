"""The distillation terms (``ascent.algos.distill``) against plain-Python float64 references
written from their docstrings, on random tables with NaN outside the mask, and their
gradients against the formulas; the chunked head's several-targets-per-row mode against
autograd through log_softmax; the teacher's top-k against torch.topk."""

import math
import random

import pytest
import torch

from ascent.algos.distill import (
    distillation_metrics,
    forward_kl_top_k,
    reverse_kl_advantages,
    reverse_kl_loss,
)
from ascent.algos.logprobs_hidden import token_log_probs_and_entropy_from_hidden
from ascent.algos.top_log_probs import top_log_probs_from_hidden


def table(seed, rows=5, cols=7, k=None):
    """Random log-probs (student, teacher), a ragged mask, NaN in the masked-out cells."""
    r = random.Random(seed)
    mask = [[t < r.randint(1, cols) for t in range(cols)] for _ in range(rows)]
    shape = (rows, cols) if k is None else (rows, cols, k)
    student = torch.empty(shape, dtype=torch.float64).uniform_(-6, -0.01)
    teacher = torch.empty(shape, dtype=torch.float64).uniform_(-6, -0.01)
    holes = ~torch.tensor(mask)
    student[holes], teacher[holes] = math.nan, math.nan
    return student, teacher, mask


@pytest.mark.parametrize("seed", range(5))
def test_reverse_kl_advantage_is_minus_coef_times_the_gap_on_valid_tokens(seed):
    student, teacher, mask = table(seed)
    got = reverse_kl_advantages(student, teacher, torch.tensor(mask), coef=0.7)
    for i, row in enumerate(mask):
        for t, valid in enumerate(row):
            want = -0.7 * (float(student[i, t]) - float(teacher[i, t])) if valid else 0.0
            assert float(got[i, t]) == pytest.approx(want, abs=1e-12)
    assert not got.requires_grad


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
def test_reverse_kl_loss_values_and_k2_gradient(estimator):
    student, teacher, mask = table(7)
    student.requires_grad_(True)
    got = reverse_kl_loss(student, teacher, torch.tensor(mask), estimator)
    got.sum().backward()
    for i, row in enumerate(mask):
        for t, valid in enumerate(row):
            x = float(student[i, t].detach()) - float(teacher[i, t]) if valid else 0.0
            k3 = math.exp(-x) + x - 1
            value = {"k1": x, "k2": x * x / 2, "k3": min(k3, 10.0)}[estimator]
            # k3 is clamped at 10 (ascent.algos.kl): no gradient beyond it.
            grad = {"k1": 1.0, "k2": x, "k3": (1 - math.exp(-x)) * (k3 < 10)}[estimator]
            assert float(got[i, t]) == pytest.approx(value if valid else 0.0, abs=1e-12)
            assert float(student.grad[i, t]) == pytest.approx(grad if valid else 0.0, abs=1e-12)


def reference_forward_kl(student, teacher, mask):
    out = [[0.0] * len(row) for row in mask]
    for i, row in enumerate(mask):
        for t, valid in enumerate(row):
            if not valid:
                continue
            lt = [float(v) for v in teacher[i, t]]
            top = max(lt)
            norm = top + math.log(math.fsum(math.exp(v - top) for v in lt))
            q = [v - norm for v in lt]
            out[i][t] = math.fsum(
                math.exp(q[j]) * (q[j] - float(student[i, t, j])) for j in range(len(q))
            )
    return out


@pytest.mark.parametrize("seed", range(4))
def test_forward_kl_top_k_matches_the_reference_and_its_gradient(seed):
    student, teacher, mask = table(seed, k=4)
    student.requires_grad_(True)
    got = forward_kl_top_k(student, teacher, torch.tensor(mask))
    want = reference_forward_kl(student.detach(), teacher, mask)
    for got_row, want_row in zip(got.tolist(), want, strict=True):
        assert got_row == pytest.approx(want_row, abs=1e-12)
    got.sum().backward()
    for i, row in enumerate(mask):
        for t, valid in enumerate(row):
            lt = teacher[i, t]
            q = torch.softmax(lt, -1) if valid else torch.zeros(4, dtype=torch.float64)
            assert student.grad[i, t].tolist() == pytest.approx((-q).tolist(), abs=1e-12)


def test_forward_kl_is_zero_when_the_student_holds_the_teachers_renormalised_top_k():
    teacher = torch.log(torch.tensor([[[0.4, 0.2, 0.1]]], dtype=torch.float64))
    student = torch.log(torch.tensor([[[4 / 7, 2 / 7, 1 / 7]]], dtype=torch.float64))
    mask = torch.ones(1, 1, dtype=torch.bool)
    assert float(forward_kl_top_k(student, teacher, mask)) == pytest.approx(0.0, abs=1e-12)
    # Mass outside the top-k costs: the same shape at half the mass is log 2 away.
    assert float(forward_kl_top_k(student - math.log(2), teacher, mask)) == pytest.approx(
        math.log(2), abs=1e-12
    )


def test_distillation_metrics():
    student = torch.tensor([[-1.0, -2.0, 9.0], [-0.5, 9.0, 9.0]])
    teacher = torch.tensor([[-0.5, -3.0, 9.0], [-1.5, 9.0, 9.0]])
    responses = torch.tensor([[5, 6, 0], [7, 0, 0]])
    top_ids = torch.tensor([[[5, 1], [2, 6], [0, 0]], [[7, 3], [0, 0], [0, 0]]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    got = distillation_metrics(student, teacher, responses, top_ids, mask)
    assert got["distill/reverse_kl"] == pytest.approx((-0.5 + 1.0 + 1.0) / 3)
    assert got["distill/agreement"] == pytest.approx(2 / 3)
    assert got["distill/teacher_log_prob"] == pytest.approx((-0.5 - 3.0 - 1.5) / 3)


@pytest.mark.parametrize("softcap", [None, 5.0])
def test_several_targets_per_row_match_autograd_through_log_softmax(softcap):
    torch.manual_seed(0)
    n, h, v, j = 9, 6, 13, 4
    hidden = torch.randn(n, h, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(v, h, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(v, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, v, (n, j))
    targets[0, 1] = targets[0, 0]  # a token named twice counts twice
    log_probs, entropy = token_log_probs_and_entropy_from_hidden(
        hidden, weight, targets, bias=bias, temperature=0.8, chunk_tokens=4, softcap=softcap
    )
    logits = hidden @ weight.T + bias
    if softcap is not None:
        logits = softcap * torch.tanh(logits / softcap)
    reference = (logits / 0.8).log_softmax(-1)
    want_lp = reference.gather(1, targets)
    want_entropy = -(reference.exp() * reference).sum(-1)
    assert log_probs.shape == (n, j) and entropy.shape == (n,)
    torch.testing.assert_close(log_probs, want_lp, rtol=0, atol=1e-12)
    torch.testing.assert_close(entropy, want_entropy, rtol=0, atol=1e-12)
    g_lp, g_ent = torch.randn(n, j, dtype=torch.float64), torch.randn(n, dtype=torch.float64)
    got = torch.autograd.grad(
        (log_probs * g_lp).sum() + (entropy * g_ent).sum(), [hidden, weight, bias]
    )
    want = torch.autograd.grad(
        (want_lp * g_lp).sum() + (want_entropy * g_ent).sum(), [hidden, weight, bias]
    )
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)


def test_teacher_top_k_matches_topk_of_log_softmax_within_the_vocab_limit():
    torch.manual_seed(1)
    hidden, weight = torch.randn(7, 5, dtype=torch.float64), torch.randn(11, 5, dtype=torch.float64)
    targets = torch.randint(0, 11, (7,))
    lp, ids, top = top_log_probs_from_hidden(
        hidden, weight, targets, 3, temperature=0.5, chunk_tokens=3, vocab_limit=9
    )
    reference = (hidden @ weight.T / 0.5).log_softmax(-1)
    torch.testing.assert_close(lp, reference.gather(1, targets[:, None]).squeeze(1))
    values, want_ids = reference[:, :9].topk(3, dim=-1)
    assert torch.equal(ids, want_ids)
    torch.testing.assert_close(top, values)
