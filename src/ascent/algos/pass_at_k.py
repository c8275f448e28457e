"""Metrics of n sampled answers per prompt, at k samples: mean@k, pass@k and maj@k.

A prompt has n answers; answer j has an accuracy a_j in [0, 1] (the scorer's ``acc``) and an
answer class g_j (answers with the same extracted answer share one). Each metric is the exact
expectation, over the C(n, k) subsets S of k answers drawn without replacement, of a
statistic of S: an unbiased estimate of that statistic for k fresh samples, with no bootstrap
noise (verl resamples with replacement, which biases best@n low).

    mean@k = E_S[ mean_{j in S} a_j ] = (1/n) sum_j a_j              (the same for every k)

    pass@k = E_S[ max_{j in S} a_j ]. With a_(1) <= ... <= a_(n) sorted, a_(i) is the maximum
             of S when S holds it and k - 1 of the i - 1 below it:
           = sum_{i=k}^{n} a_(i) w_i,   w_i = C(i-1, k-1) / C(n, k),
             w_n = k / n, w_{i-1} = w_i (i - k) / (i - 1): products of factors in [0, 1],
             never a binomial. With 0/1 accuracies and c correct answers this is the Codex
             estimator 1 - C(n-c, k) / C(n, k) = 1 - prod_{i=n-c+1}^{n} (1 - k/i).

    maj@k  = E_S[ the mean accuracy of S's answers in the most frequent class of S ]; a tie
             between s + 1 classes goes to each with probability 1 / (s + 1) (verl's first of
             the tied answers, in a random order of S). Given that class g wins with t of
             its m_g answers in S, those t are a uniform t-subset of g, so the expectation is
             its mean over all of g, abar_g:
           = sum_g abar_g P(g wins),
             P(g wins) = sum_t C(m_g, t) sum_s N_g(t, k - t, s) / (s + 1) / C(n, k),
             N_g(t, r, s): the ways to draw r answers from the other classes with at most t
             from each and exactly t from s of them (a product of one polynomial per class,
             in float64; classes of one size share it). Exact while C(n, k) is finite in
             float64: n <= 1024.

Inputs: ``acc`` (P, n) float, one row per prompt; ``answers`` (P, n) int, class ids (equal
ids within a row are one class). Outputs: (P,) float64 per metric. 1 <= k <= n.
"""

from collections import Counter
from math import comb

import torch
from torch import Tensor

MAX_SAMPLES = 1024  # C(n, n/2) overflows float64 above this (maj@k's counts)


def default_ks(n: int) -> list[int]:
    """1, 2, 4, ... below n, then n (verl's ladder, from 1)."""
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return [*ks, n]


def mean_at_k(acc: Tensor, k: int) -> Tensor:
    """(P,) the mean accuracy of each row, the expectation of a k-subset's mean."""
    _check_k(acc, k)
    return acc.double().mean(dim=1)


def pass_at_k(acc: Tensor, k: int) -> Tensor:
    """(P,) the expected best accuracy of k of each row's n answers (module docstring)."""
    n = _check_k(acc, k)
    ranks = torch.arange(1, n + 1, dtype=torch.float64)  # i = 1..n, ascending accuracy
    factors = ((ranks - k) / (ranks - 1).clamp(min=1)).clamp(min=0)  # w_{i-1} / w_i at i
    # w_i = (k/n) * prod_{j=i+1}^{n} factor_j; w_i = 0 for i < k (a factor (k-k) = 0).
    later = torch.cat([factors[1:], torch.ones(1, dtype=torch.float64)])
    weights = (k / n) * later.flip(0).cumprod(0).flip(0)
    ordered = acc.double().sort(dim=1).values
    return ordered @ weights


def maj_at_k(acc: Tensor, answers: Tensor, k: int) -> Tensor:
    """(P,) the expected accuracy of the majority answer of k of each row's n answers."""
    return _maj(acc, answers, [k])[:, 0]


def at_k_metrics(acc: Tensor, answers: Tensor, ks: list[int]) -> dict[str, Tensor]:
    """``mean@k``, ``pass@k``, ``maj@k`` (P,) for every k of ``ks``."""
    majority = _maj(acc, answers, ks)
    metrics = {}
    for column, k in enumerate(ks):
        metrics[f"mean@{k}"] = mean_at_k(acc, k)
        metrics[f"pass@{k}"] = pass_at_k(acc, k)
        metrics[f"maj@{k}"] = majority[:, column]
    return metrics


def _check_k(acc: Tensor, k: int) -> int:
    if acc.dim() != 2:
        raise ValueError(f"acc must be (prompts, samples), got shape {tuple(acc.shape)}")
    n = acc.shape[1]
    if not 1 <= k <= n:
        raise ValueError(f"k={k} must be between 1 and the {n} samples per prompt")
    if n > MAX_SAMPLES:
        raise ValueError(f"{n} samples per prompt: at most {MAX_SAMPLES}")
    return n


def _maj(acc: Tensor, answers: Tensor, ks: list[int]) -> Tensor:
    """(P, len(ks)) maj@k of every row for every k."""
    n = acc.shape[1]
    for k in ks:
        _check_k(acc, k)
    if answers.shape != acc.shape:
        raise ValueError(f"answers {tuple(answers.shape)} and acc {tuple(acc.shape)} differ")
    rows = [_maj_row(a.double(), g.tolist(), n, ks) for a, g in zip(acc, answers, strict=True)]
    return torch.tensor(rows, dtype=torch.float64).view(len(acc), len(ks))


def _maj_row(acc: Tensor, answers: list, n: int, ks: list[int]) -> list[float]:
    """maj@k of one row: sum over class sizes m of (the values of the classes of size m) x
    (the count of subsets that one class of size m wins, ties weighted) / C(n, k)."""
    members: dict[int, list[int]] = {}
    for j, g in enumerate(answers):
        members.setdefault(g, []).append(j)
    value_of_size: Counter = Counter()  # m -> sum of abar_g over classes of size m
    for rows in members.values():
        value_of_size[len(rows)] += float(acc[rows].mean())
    sizes = Counter(len(rows) for rows in members.values())  # m -> classes of that size
    totals = torch.zeros(len(ks), dtype=torch.float64)
    for m, value in value_of_size.items():
        others = sizes.copy()
        others[m] -= 1
        totals += value * _wins(m, others, ks)
    return [float(total) / comb(n, k) for total, k in zip(totals, ks, strict=True)]


def _wins(m: int, others: Counter, ks: list[int]) -> Tensor:
    """(len(ks),) the subsets of k answers one class of size m wins, a tie between s + 1
    classes counted 1 / (s + 1): sum_t C(m, t) sum_s N(t, k - t, s) / (s + 1)."""
    classes = sum(others.values())
    ties = torch.arange(1, classes + 2, dtype=torch.float64).unsqueeze(1)
    won = torch.zeros(len(ks), dtype=torch.float64)
    for t in range(1, min(m, max(ks)) + 1):
        # poly[s, r]: ways to draw r answers from the classes so far, at most t from each,
        # exactly t from s of them.
        poly = torch.zeros(classes + 1, max(ks) - t + 1, dtype=torch.float64)
        poly[0, 0] = 1.0
        for size, count in others.items():
            for _ in range(count):
                poly = _add_class(poly, size, t)
        per_r = (poly / ties).sum(0)  # ties weighted, (R,)
        drawn = torch.tensor([per_r[k - t] if k >= t else 0.0 for k in ks], dtype=torch.float64)
        won += float(comb(m, t)) * drawn
    return won


def _add_class(poly: Tensor, size: int, t: int) -> Tensor:
    """poly times sum_{u <= min(size, t)} C(size, u) x^u in r, the u = t term also moving
    one tie up in s: a convolution along r (u < t) plus a shifted copy (u = t)."""
    below = torch.tensor([float(comb(size, u)) for u in range(min(size + 1, t))])
    kernel = below.to(torch.float64).flip(0).view(1, 1, -1)
    padded = torch.nn.functional.pad(poly.unsqueeze(1), (len(below) - 1, 0))
    out = torch.nn.functional.conv1d(padded, kernel).squeeze(1)
    if t <= size and t < poly.shape[1]:
        out[1:, t:] += poly[:-1, : poly.shape[1] - t] * float(comb(size, t))
    return out
