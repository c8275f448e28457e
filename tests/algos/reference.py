"""Independent references for the estimators, written from docs/ALGORITHMS.md in plain Python.

Python floats (double precision), explicit loops, the statistics module: nothing is shared
with the vectorised implementations under test. Each function takes lists (rows of floats,
rows of bools, group labels) and returns rows of floats that are 0.0 outside the mask.
"""

import math
import statistics
from collections import defaultdict

Rows = list[list[float]]
Mask = list[list[bool]]


def valid_positions(mask: Mask) -> list[tuple[int, int]]:
    return [(i, t) for i, row in enumerate(mask) for t, m in enumerate(row) if m]


def whiten(x: Rows, mask: Mask) -> Rows:
    cells = [x[i][t] for i, t in valid_positions(mask)]
    out = [[0.0] * len(row) for row in x]
    if not cells:
        return out
    mean = statistics.fmean(cells)
    for i, t in valid_positions(mask):
        centered = x[i][t] - mean
        if len(cells) >= 2:
            centered /= math.sqrt(statistics.variance(cells) + 1e-8)
        out[i][t] = centered
    return out


def broadcast(per_seq: list[float], mask: Mask) -> Rows:
    return [[a if m else 0.0 for m in row] for a, row in zip(per_seq, mask, strict=True)]


def scores_of(rewards: Rows, mask: Mask) -> list[float]:
    return [
        math.fsum(r for r, m in zip(row, mrow, strict=True) if m)
        for row, mrow in zip(rewards, mask, strict=True)
    ]


def members(groups: list[int]) -> dict[int, list[int]]:
    by_group: dict[int, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        by_group[g].append(i)
    return by_group


def gae_rows(rewards: Rows, values: Rows, mask: Mask, gamma: float, lams: list[float]) -> Rows:
    """Raw GAE per row: walk backwards over the valid tokens only."""
    out = []
    for row_r, row_v, row_m, lam in zip(rewards, values, mask, lams, strict=True):
        adv_row = [0.0] * len(row_r)
        next_value, next_adv = 0.0, 0.0
        for t in reversed(range(len(row_r))):
            if not row_m[t]:
                continue
            delta = row_r[t] + gamma * next_value - row_v[t]
            next_adv = delta + gamma * lam * next_adv
            next_value = row_v[t]
            adv_row[t] = next_adv
        out.append(adv_row)
    return out


def gae(rewards, values, mask, gamma, lam, critic_lam=None, alpha=None) -> tuple[Rows, Rows]:
    if alpha is not None:
        lengths = [sum(row) for row in mask]
        actor = [min(max(1 - 1 / max(alpha * n, 1e-8), 0.0), 1.0) for n in lengths]
    else:
        actor = [lam] * len(mask)
    critic = [lam if critic_lam is None else critic_lam] * len(mask)
    advantages = whiten(gae_rows(rewards, values, mask, gamma, actor), mask)
    raw_critic = gae_rows(rewards, values, mask, gamma, critic)
    returns = [
        [a + v if m else 0.0 for a, v, m in zip(ar, vr, mr, strict=True)]
        for ar, vr, mr in zip(raw_critic, values, mask, strict=True)
    ]
    return advantages, returns


def grpo(rewards, mask, groups, norm_by_std=True, eps=1e-6) -> Rows:
    scores = scores_of(rewards, mask)
    by_group = members(groups)
    out = []
    for i, s in enumerate(scores):
        group = [scores[j] for j in by_group[groups[i]]]
        if len(group) < 2:
            out.append(0.0)
            continue
        a = s - statistics.fmean(group)
        out.append(a / (statistics.stdev(group) + eps) if norm_by_std else a)
    return broadcast(out, mask)


def grpo_passk(rewards, mask, groups, norm_by_std=True, eps=1e-6) -> Rows:
    scores = scores_of(rewards, mask)
    out = [0.0] * len(scores)
    for idx in members(groups).values():
        if len(idx) < 2:
            continue
        ranked = sorted(idx, key=lambda j: (-scores[j], j))  # best first, earliest on a tie
        best, second = ranked[0], ranked[1]
        a = scores[best] - scores[second]
        if norm_by_std:
            a /= statistics.stdev([scores[j] for j in idx]) + eps
        out[best] = a
    return broadcast(out, mask)


def rloo(rewards, mask, groups) -> Rows:
    scores = scores_of(rewards, mask)
    by_group = members(groups)
    out = []
    for i, s in enumerate(scores):
        others = [scores[j] for j in by_group[groups[i]] if j != i]
        out.append(s - statistics.fmean(others) if others else 0.0)
    return broadcast(out, mask)


def reinforce_pp(rewards, mask, gamma) -> tuple[Rows, Rows]:
    returns = []
    for row_r, row_m in zip(rewards, mask, strict=True):
        out, running = [0.0] * len(row_r), 0.0
        for t in reversed(range(len(row_r))):
            if row_m[t]:
                running = row_r[t] + gamma * running
                out[t] = running
        returns.append(out)
    return whiten(returns, mask), returns


def reinforce_pp_baseline(rewards, mask, groups) -> Rows:
    scores = scores_of(rewards, mask)
    by_group = members(groups)
    centred = [
        s - statistics.fmean(scores[j] for j in by_group[groups[i]]) for i, s in enumerate(scores)
    ]
    return whiten(broadcast(centred, mask), mask)


def remax(rewards, mask, baselines) -> tuple[Rows, Rows]:
    returns, advantages = [], []
    for row_r, row_m, b in zip(rewards, mask, baselines, strict=True):
        ret = [
            math.fsum(row_r[k] for k in range(t, len(row_r)) if row_m[k]) if row_m[t] else 0.0
            for t in range(len(row_r))
        ]
        returns.append(ret)
        advantages.append([r - b if m else 0.0 for r, m in zip(ret, row_m, strict=True)])
    return advantages, returns


def opo(rewards, mask, groups) -> Rows:
    scores = scores_of(rewards, mask)
    lengths = [sum(row) for row in mask]
    by_group = members(groups)
    out = []
    for i, s in enumerate(scores):
        idx = by_group[groups[i]]
        total = sum(lengths[j] for j in idx)
        baseline = math.fsum(lengths[j] * scores[j] for j in idx) / total if total else 0.0
        out.append(s - baseline)
    return broadcast(out, mask)


def gpg(rewards, mask, groups) -> Rows:
    scores = scores_of(rewards, mask)
    alpha = len(scores) / max(sum(1 for s in scores if s != 0), 1)
    by_group = members(groups)
    out = []
    for i, s in enumerate(scores):
        group = [scores[j] for j in by_group[groups[i]]]
        out.append(alpha * (s - statistics.fmean(group)) if len(group) > 1 else 0.0)
    return broadcast(out, mask)


def prime(rewards, process, mask, groups, outcome_coef, process_coef, whiten_returns):
    """PRIME's eq. 5 token by token: leave-one-out outcome and process baselines, then the
    reward-to-go over valid tokens; returns (advantages, returns)."""
    scores = scores_of(rewards, mask)
    per_token = []
    for row, mrow in zip(process, mask, strict=True):
        valid = [p for p, m in zip(row, mrow, strict=True) if m]
        per_token.append(math.fsum(valid) / len(valid) if valid else 0.0)
    by_group = members(groups)
    returns = []
    for i, mrow in enumerate(mask):
        others = [j for j in by_group[groups[i]] if j != i]
        outcome_base = statistics.fmean(scores[j] for j in others)
        process_base = statistics.fmean(per_token[j] for j in others)
        positions = [t for t, m in enumerate(mrow) if m]
        combined = [0.0] * len(mrow)
        for t in positions:
            outcome = rewards[i][t] - (outcome_base if t == positions[-1] else 0.0)
            combined[t] = outcome_coef * outcome + process_coef * (process[i][t] - process_base)
        returns.append(
            [
                math.fsum(combined[u] for u in positions if u >= t) if m else 0.0
                for t, m in enumerate(mrow)
            ]
        )
    return (whiten(returns, mask) if whiten_returns else returns), returns


def implicit_prm_loss(prm, ref, mask, labels, beta) -> tuple[float, float]:
    """Mean over rows with a valid token of BCE(sigmoid(beta * sum_t (prm - ref)), label),
    and the share of those rows whose implicit reward's sign agrees with the label."""
    losses, agree = [], []
    for prow, rrow, mrow, label in zip(prm, ref, mask, labels, strict=True):
        if not any(mrow):
            continue
        reward = beta * math.fsum(p - r for p, r, m in zip(prow, rrow, mrow, strict=True) if m)
        probability = 1.0 / (1.0 + math.exp(-reward))
        losses.append(-(label * math.log(probability) + (1 - label) * math.log(1 - probability)))
        agree.append(float((reward > 0) == (label > 0.5)))
    return statistics.fmean(losses), statistics.fmean(agree)


def sppo(rewards, mask, groups, eta, temperature) -> Rows:
    """eta * (P_i - 1/2), P_i the mean over the others of the group of sigmoid((s_i - s_j) /
    temperature) (temperature 0: 1, 1/2 or 0 by comparison); 0 for a singleton."""
    scores = scores_of(rewards, mask)
    by_group = members(groups)
    out = []
    for i, s in enumerate(scores):
        others = [scores[j] for j in by_group[groups[i]] if j != i]
        if not others:
            out.append(0.0)
            continue
        if temperature > 0:
            wins = [1.0 / (1.0 + math.exp(-(s - o) / temperature)) for o in others]
        else:
            wins = [1.0 if s > o else 0.5 if s == o else 0.0 for o in others]
        out.append(eta * (statistics.fmean(wins) - 0.5))
    return broadcast(out, mask)
