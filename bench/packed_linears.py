"""One projection of a decode step: ``F.linear`` (MKL's sgemm on torch's CPU build) against the
same product on oneDNN's prepacked weight (``ascent.rollout.packed_linears``), per call: one
run, interleaved repeats (medians), one thread.

Shapes are the real models' (rows: the sequences of a decode step): SmolLM2-135M's attention
and MLP projections and 49k-row head, Gemma 3 270M's and its 262k-row head. Both paths get
the same tensors and must agree (checked each case).

    .venv/bin/python bench/packed_linears.py [--repeats 5] [--calls 20] [--json PATH]
"""

import argparse
import json
import statistics
from pathlib import Path

import torch
import torch.nn.functional as F

from ascent.rollout.packed_linears import PackedLinears
from attention_kernel import milliseconds  # the same timing (bench/ is on the path)

# (name, output features, input features)
SHAPES = [
    ("SmolLM2 q/o (576 x 576)", 576, 576),
    ("SmolLM2 gate/up (1536 x 576)", 1536, 576),
    ("SmolLM2 down (576 x 1536)", 576, 1536),
    ("SmolLM2 head (49152 x 576)", 49152, 576),
    ("Gemma 3 q (1024 x 640)", 1024, 640),
    ("Gemma 3 gate/up (2048 x 640)", 2048, 640),
    ("Gemma 3 down (640 x 2048)", 640, 2048),
    ("Gemma 3 head (262144 x 640)", 262144, 640),
]
ROWS = [1, 8, 32]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args()
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    results = []
    for name, out_features, in_features in SHAPES:
        weight = torch.randn(out_features, in_features, generator=g) * in_features**-0.5
        packed = PackedLinears()
        for rows in ROWS:
            x = torch.randn(rows, in_features, generator=g)
            torch.testing.assert_close(packed(x, weight), F.linear(x, weight), atol=1e-4, rtol=1e-4)
            calls = max(1, args.calls // (1 + out_features // 50000))
            paths = {
                "f_linear": lambda x=x, w=weight: F.linear(x, w),
                "packed": lambda x=x, w=weight, p=packed: p(x, w),
            }
            runs = {name: [] for name in paths}
            for _ in range(args.repeats):  # interleaved
                for path, call in paths.items():
                    runs[path].append(milliseconds(call, calls))
            median = {k: statistics.median(v) for k, v in runs.items()}
            results.append({"shape": name, "rows": rows, **median, "runs": runs})
    print(f"one thread; per call, median of {args.repeats} repeats")
    print("| projection | rows | F.linear ms | packed ms | speed-up |")
    print("|---|---:|---:|---:|---:|")
    for r in results:
        ratio = r["f_linear"] / r["packed"]
        times = f"{r['f_linear']:.3f} | {r['packed']:.3f}"
        print(f"| {r['shape']} | {r['rows']} | {times} | {ratio:.2f}x |")
    if args.json:
        Path(args.json).write_text(json.dumps({"repeats": args.repeats, "rows": results}, indent=1))


if __name__ == "__main__":
    main()
