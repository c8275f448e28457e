"""Spread rows by token count: micro-batches under a token budget, and data-parallel shards
of similar total work.

The number of micro-batches must be the same on every data-parallel rank (each forward and
backward runs FSDP collectives that all ranks join), so each rank plans its own, the ranks
agree on the largest count, and the others split until they have as many.
"""

import torch
import torch.distributed as dist

# What one more padded micro-batch costs beyond its tokens, in tokens: a forward and backward
# has a fixed cost (kernel launches, Python per layer), so a split must save more padding than
# this. About the fixed cost of a small model's pass on a CPU; for a large model it is a few
# tokens' worth, so this errs towards fewer micro-batches there.
MICRO_BATCH_OVERHEAD_TOKENS = 256


def plan_micro_batches(
    tokens: list[int], budget: int, min_count: int = 1, padded: bool = False
) -> list[list[int]]:
    """Row indices per micro-batch: at most ``budget`` tokens each (a longer row goes alone);
    then the heaviest micro-batch is halved until there are at least ``min_count`` (needs
    that many rows). Indices are in ascending order within each.

    Packed (``padded`` False): a micro-batch costs the sum of its rows' tokens; first-fit
    decreasing. Padded: it costs rows x its longest row, so rows of similar length go
    together: ``padded_plan`` cuts the rows sorted by length where that minimises the padded
    tokens plus ``MICRO_BATCH_OVERHEAD_TOKENS`` per micro-batch.
    """
    if budget < 1:
        raise ValueError(f"tokens_per_micro_batch must be >= 1, got {budget}")
    if min_count > len(tokens):
        raise ValueError(f"cannot make {min_count} micro-batches from {len(tokens)} rows")
    bins = padded_plan(tokens, budget) if padded else first_fit_plan(tokens, budget)
    loads = [sum(tokens[row] for row in b) for b in bins]
    while len(bins) < min_count:
        heaviest = max((b for b in range(len(bins)) if len(bins[b]) > 1), key=lambda b: loads[b])
        rows = bins.pop(heaviest)
        loads.pop(heaviest)
        halves: list[list[int]] = [[], []]
        half_loads = [0, 0]
        for row in sorted(rows, key=lambda r: (-tokens[r], r)):
            lighter = 0 if half_loads[0] <= half_loads[1] else 1
            halves[lighter].append(row)
            half_loads[lighter] += tokens[row]
        bins.extend(halves)
        loads.extend(half_loads)
    return [sorted(b) for b in bins]


def first_fit_plan(tokens: list[int], budget: int) -> list[list[int]]:
    """Rows longest first, each into the first micro-batch whose token sum stays within
    ``budget`` (a new one if none)."""
    bins: list[list[int]] = []
    loads: list[int] = []
    for row in sorted(range(len(tokens)), key=lambda r: (-tokens[r], r)):
        target = next((b for b in range(len(bins)) if loads[b] + tokens[row] <= budget), None)
        if target is None:
            bins.append([row])
            loads.append(tokens[row])
        else:
            bins[target].append(row)
            loads[target] += tokens[row]
    return bins


def padded_plan(tokens: list[int], budget: int) -> list[list[int]]:
    """The padded micro-batches of least cost: rows sorted longest first, cut into runs.

    A run of rows i..k-1 (sorted) costs (k - i) x tokens[i] + MICRO_BATCH_OVERHEAD_TOKENS and
    must fit ``budget`` (a single row always may). Dynamic programming over the cut points:
    best[k] = min over i of best[i] + cost(i, k), O(rows x rows per micro-batch).
    """
    order = sorted(range(len(tokens)), key=lambda r: (-tokens[r], r))
    length = [tokens[row] for row in order]
    best = [0] + [None] * len(order)
    cut = [0] * (len(order) + 1)
    for end in range(1, len(order) + 1):
        for start in range(end - 1, -1, -1):
            rows = end - start
            if rows > 1 and rows * length[start] > budget:
                break  # longer runs starting earlier hold longer rows: over budget too
            cost = best[start] + rows * length[start] + MICRO_BATCH_OVERHEAD_TOKENS
            if best[end] is None or cost < best[end]:
                best[end], cut[end] = cost, start
    bins = []
    end = len(order)
    while end:
        bins.append(order[cut[end] : end])
        end = cut[end]
    return bins[::-1]


def synchronized_micro_batches(
    tokens: list[int],
    budget: int,
    device: torch.device,
    padded: bool = False,
    fill_empty: bool = False,
) -> list[list[int]]:
    """``plan_micro_batches`` with the same count on every rank of the default group.

    ``fill_empty``: a rank with fewer rows than the agreed count (or none) gets empty
    micro-batches to make it up, for which its caller runs a filler pass of no weight;
    without it such a rank is an error."""
    plan = plan_micro_batches(tokens, budget, padded=padded) if tokens or not fill_empty else []
    if dist.is_initialized() and dist.get_world_size() > 1:
        count = torch.tensor([len(plan)], device=device)
        dist.all_reduce(count, op=dist.ReduceOp.MAX)
        count = int(count)
        if count > len(plan) and tokens:
            rows = min(count, len(tokens)) if fill_empty else count
            plan = plan_micro_batches(tokens, budget, min_count=rows, padded=padded)
        plan += [[] for _ in range(count - len(plan))]
    return plan


def spread_rows(tokens: list[int], parts: int) -> list[list[int]]:
    """Rows over ``parts`` ranks by token count, any number each (a part may get none):
    rows by decreasing tokens, each to the lightest part. Indices ascending within a part."""
    members: list[list[int]] = [[] for _ in range(parts)]
    loads = [0] * parts
    for row in sorted(range(len(tokens)), key=lambda r: (-tokens[r], r)):
        part = min(range(parts), key=lambda p: (loads[p], p))
        members[part].append(row)
        loads[part] += tokens[row]
    return [sorted(part) for part in members]


def balance_rows(tokens: list[int], parts: int) -> list[int]:
    """A row order whose ``parts`` consecutive equal slices carry similar token totals.

    Greedy: rows by decreasing tokens, each to the lightest part that still has room (every
    part gets exactly len(tokens) / parts rows). Apply with ``batch.index(order)`` before a
    data-parallel split; the loss is unchanged (its normalisation is global), only the time
    ranks wait for each other shrinks.
    """
    if len(tokens) % parts:
        raise ValueError(f"{len(tokens)} rows do not split into {parts} equal parts")
    capacity = len(tokens) // parts
    members: list[list[int]] = [[] for _ in range(parts)]
    loads = [0] * parts
    for row in sorted(range(len(tokens)), key=lambda r: (-tokens[r], r)):
        open_parts = [p for p in range(parts) if len(members[p]) < capacity]
        part = min(open_parts, key=lambda p: (loads[p], p))
        members[part].append(row)
        loads[part] += tokens[row]
    return [row for part in members for row in sorted(part)]


def data_parallel_order(tokens: list[int], dp_size: int, mini_batches: int) -> list[int]:
    """The row order to dispatch a step's batch in, so that rank r's ``mini_batches`` local
    slices are its shares of the *global* mini-batches.

    Mini-batch j is rows [j * M, (j + 1) * M) of the batch as given (M = B / mini_batches):
    the same rows whatever the number of ranks, so the updates do not depend on it. Within
    each mini-batch the rows are spread over the ranks by ``balance_rows``. The result is
    rank-major: rank 0's share of mini-batch 0, of mini-batch 1, ..., then rank 1's.
    """
    if len(tokens) % (dp_size * mini_batches):
        raise ValueError(
            f"{len(tokens)} rows do not split into {mini_batches} mini-batches over "
            f"{dp_size} ranks; the batch must be a multiple of {dp_size * mini_batches}"
        )
    size = len(tokens) // mini_batches
    share = size // dp_size
    per_rank: list[list[int]] = [[] for _ in range(dp_size)]
    for j in range(mini_batches):
        rows = list(range(j * size, (j + 1) * size))
        order = balance_rows([tokens[r] for r in rows], dp_size)
        for rank in range(dp_size):
            per_rank[rank].extend(rows[i] for i in order[rank * share : (rank + 1) * share])
    return [row for rank_rows in per_rank for row in rank_rows]
