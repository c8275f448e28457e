"""The CPU paged-attention kernel against gathering the blocks for SDPA, per layer call:
one run, interleaved repeats (medians).

Shapes (heads / KV heads x head dim): the bench model's 4/2 x 32 (hidden 128, the agent
bench), and SmolLM2-135M's 9/3 x 64. Cases: a decode step (one query per sequence) over
``context`` cached positions, and a prefill of ``tokens`` queries after ``context`` cached
ones (an agent's next turn). Blocks of 16 in random order in a pool, as a running cache
leaves them. Both paths get the same tensors and must agree (checked each case); each takes
the median of --repeats timings of --calls calls, one thread (torch's and the kernel's).

A case over L layers holds L pools and each call reads the next layer's, as a decode step
does: 30 layers of SmolLM2's cache at 64 x 172 are 500 MB, so its keys and values come from
DRAM, not from a cache the previous call warmed (the other cases fit in L2/L3). GB/s is the
keys and values each call must read (every visible position's, once) over its time.

    .venv/bin/python bench/attention_kernel.py [--repeats 5] [--calls 20] [--json PATH]
"""

import argparse
import itertools
import json
import statistics
import time
from pathlib import Path

import torch

from ascent.rollout import kernels, paged_attention

BLOCK = 16
# (name, heads, kv_heads, head_dim, sequences, query tokens, cached context, layers)
CASES = [
    ("bench model, decode 64 x 150", 4, 2, 32, 64, 1, 150, 1),
    ("bench model, turn 55 x 27 after 100", 4, 2, 32, 55, 27, 100, 1),
    ("SmolLM2, decode 8 x 256", 9, 3, 64, 8, 1, 256, 1),
    ("SmolLM2, decode 32 x 128", 9, 3, 64, 32, 1, 128, 1),
    ("SmolLM2, turn 16 x 27 after 200", 9, 3, 64, 16, 27, 200, 1),
    ("SmolLM2, decode 64 x 172, 30 layers", 9, 3, 64, 64, 1, 172, 30),
]


def inputs(heads, kv_heads, dim, sequences, tokens, context, layers, seed=0):
    """q (B, heads, T, D), the pools (layers, blocks, ...), tables (B, nb) of shuffled
    blocks, positions (B, T)."""
    g = torch.Generator().manual_seed(seed)
    width = (context + tokens + BLOCK - 1) // BLOCK
    blocks = sequences * width + 1  # block 0: scratch, as in the engine
    k_pool = torch.randn(layers, blocks, kv_heads, dim, BLOCK, generator=g)
    v_pool = torch.randn(layers, blocks, kv_heads, BLOCK, dim, generator=g)
    tables = (torch.randperm(blocks - 1, generator=g) + 1).view(sequences, width)
    positions = (context + torch.arange(tokens)).expand(sequences, tokens).contiguous()
    q = torch.randn(sequences, heads, tokens, dim, generator=g)
    return q, k_pool, v_pool, tables, positions


def layer_by_layer(attend, q, k_pools, v_pools, tables, positions):
    """A call of ``attend`` that reads the next layer's pools each time (as a decode step
    goes through its layers), counting its own calls."""
    turn = itertools.count()

    def call():
        layer = next(turn) % len(k_pools)
        return attend(q, k_pools[layer], v_pools[layer], tables, positions)

    return call


def milliseconds(call, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - start) / calls * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if kernels.library() is None:
        raise SystemExit("the C kernel could not be built here (see the warning above)")

    rows = []
    for name, heads, kv_heads, dim, sequences, tokens, context, layers in CASES:
        q, k_pools, v_pools, tables, positions = inputs(
            heads, kv_heads, dim, sequences, tokens, context, layers
        )

        kernel = layer_by_layer(kernels.paged_attention, q, k_pools, v_pools, tables, positions)
        gathered = layer_by_layer(
            paged_attention.attend_gathered, q, k_pools, v_pools, tables, positions
        )
        for _ in range(layers):  # the same layer for both: compare every layer once
            torch.testing.assert_close(kernel(), gathered(), atol=1e-4, rtol=1e-4)
        runs = {"kernel": [], "gathered": []}
        for _ in range(args.repeats):  # interleaved
            runs["kernel"].append(milliseconds(kernel, args.calls))
            runs["gathered"].append(milliseconds(gathered, args.calls))
        median = {k: statistics.median(v) for k, v in runs.items()}
        # q.k and p.v: 2 flops per multiply-add, over the keys each query sees
        seen = sequences * heads * sum(context + t + 1 for t in range(tokens))
        gflops = 4 * seen * dim / (median["kernel"] * 1e-3) / 1e9
        read = sequences * kv_heads * (context + tokens) * dim * 2 * 4  # keys and values
        gbps = read / (median["kernel"] * 1e-3) / 1e9
        rows.append(
            {"case": name, **median, "kernel_gflops": gflops, "kernel_gbps": gbps, "runs": runs}
        )

    print("one thread; per call, median of", args.repeats, "repeats of", args.calls, "calls")
    header = f"{'case':<38} {'kernel ms':>10} {'GFLOP/s':>8} {'GB/s':>6} {'gathered ms':>12}"
    print(header + f" {'speed-up':>9}")
    for row in rows:
        ratio = row["gathered"] / row["kernel"]
        print(
            f"{row['case']:<38} {row['kernel']:>10.2f} {row['kernel_gflops']:>8.1f} "
            f"{row['kernel_gbps']:>6.1f} {row['gathered']:>12.2f} {ratio:>8.1f}x"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"repeats": args.repeats, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
