"""mean@k, pass@k and maj@k against a float64 brute force over every k-subset of the
answers, on random score tables (several seeds, n and k)."""

import itertools
import math
import random
from collections import Counter

import pytest
import torch

from ascent.algos.pass_at_k import at_k_metrics, default_ks, maj_at_k, pass_at_k


def brute_force(acc: list[float], answers: list[int], k: int) -> dict[str, float]:
    """The three statistics averaged over all C(n, k) subsets, as the docstring defines them:
    a tie of the most frequent answers shares the subset equally, and the winner's value is
    its answers' mean accuracy within the subset."""
    totals = {"mean": 0.0, "pass": 0.0, "maj": 0.0}
    subsets = list(itertools.combinations(range(len(acc)), k))
    for subset in subsets:
        totals["mean"] += sum(acc[j] for j in subset) / k
        totals["pass"] += max(acc[j] for j in subset)
        counts = Counter(answers[j] for j in subset)
        most = max(counts.values())
        winners = [g for g, count in counts.items() if count == most]
        for g in winners:
            inside = [acc[j] for j in subset if answers[j] == g]
            totals["maj"] += sum(inside) / len(inside) / len(winners)
    return {name: total / len(subsets) for name, total in totals.items()}


def table(seed: int, prompts: int, n: int, binary: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Accuracies and answer classes; a class's answers share an accuracy when binary (as
    a scorer's are), else each answer has its own."""
    rng = random.Random(seed)
    answers = [[rng.randrange(rng.randint(1, n)) for _ in range(n)] for _ in range(prompts)]
    if binary:
        right = [{g: float(rng.random() < 0.4) for g in set(row)} for row in answers]
        acc = [[right[i][g] for g in row] for i, row in enumerate(answers)]
    else:
        acc = [[rng.random() for _ in range(n)] for _ in range(prompts)]
    return torch.tensor(acc, dtype=torch.float64), torch.tensor(answers)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 10])
@pytest.mark.parametrize("binary", [True, False])
def test_every_metric_matches_the_brute_force_for_every_k(seed, n, binary):
    acc, answers = table(seed * 100 + n, prompts=6, n=n, binary=binary)
    ks = list(range(1, n + 1))
    metrics = at_k_metrics(acc, answers, ks)
    for k in ks:
        for row in range(len(acc)):
            expected = brute_force(acc[row].tolist(), answers[row].tolist(), k)
            for name, value in expected.items():
                got = float(metrics[f"{name}@{k}"][row])
                assert got == pytest.approx(value, rel=1e-12, abs=1e-12), (name, k, row)


@pytest.mark.parametrize("n", [1, 4, 16, 100, 1024])
def test_pass_at_k_is_the_codex_estimator_for_right_and_wrong_answers(n):
    rng = random.Random(n)
    for _ in range(5):
        c = rng.randint(0, n)
        acc = torch.tensor([[1.0] * c + [0.0] * (n - c)])[:, torch.randperm(n)]
        for k in {1, max(1, n // 3), n}:
            codex = 1 - math.comb(n - c, k) / math.comb(n, k)  # exact integers, then one division
            assert float(pass_at_k(acc, k)[0]) == pytest.approx(codex, rel=1e-12, abs=1e-15)


def test_maj_at_k_edge_cases():
    acc = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
    # all answers distinct: every subset is a tie of its k answers, so maj@k = mean@k
    assert float(maj_at_k(acc, torch.tensor([[0, 1, 2, 3]]), 2)) == pytest.approx(0.25)
    # one answer class: its mean accuracy whatever k
    assert float(maj_at_k(acc, torch.tensor([[7, 7, 7, 7]]), 3)) == pytest.approx(0.25)
    # a right answer outvoted 1 to 3: wins only the subsets it ties or leads
    three_wrong = torch.tensor([[0, 1, 1, 1]])
    assert float(maj_at_k(acc, three_wrong, 4)) == 0.0
    assert float(maj_at_k(acc, three_wrong, 2)) == pytest.approx(3 / 6 * 0.5)  # {0, x}: a tie


def test_large_n_stays_finite_and_in_range():
    acc, answers = table(0, prompts=2, n=64, binary=True)
    for k in default_ks(64):
        for values in (pass_at_k(acc, k), maj_at_k(acc, answers, k)):
            assert ((values >= 0) & (values <= 1 + 1e-12)).all()


def test_default_ks_and_bad_k():
    assert default_ks(1) == [1]
    assert default_ks(4) == [1, 2, 4]
    assert default_ks(6) == [1, 2, 4, 6]
    with pytest.raises(ValueError, match="between 1 and the 4 samples"):
        pass_at_k(torch.zeros(2, 4), 5)
