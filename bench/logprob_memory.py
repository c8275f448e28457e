"""Peak memory and time of per-token log-probs + entropy, forward and backward.

Compares, each in a fresh subprocess so that peaks do not mix:

- naive:          log_softmax(logits.float() / τ) gathered, entropy = logsumexp - Σ softmax·z
- chunked:        ascent.algos.logprobs.token_log_probs_and_entropy on the same logits
- naive-hidden:   logits = hidden @ Wᵀ (one matmul), then the naive formula
- fused-hidden:   ascent.algos.logprobs_hidden.token_log_probs_and_entropy_from_hidden

The loss is lp.sum() - 0.01 * entropy.sum() (a policy-gradient term plus an entropy bonus), so
both outputs are differentiated. "Peak extra" is the peak above the memory held once the inputs
exist: it includes the input gradients (d logits, or d hidden and d W), which every method
must produce. On CPU it is peak RSS (getrusage), with glibc's mmap threshold fixed so that
freed buffers leave the RSS (otherwise fragmentation of the heap adds noise); on CUDA it is
torch.cuda.max_memory_allocated. Ratios compare each method with the naive one on the same
inputs (chunked with naive, fused-hidden with naive-hidden).

    python bench/logprob_memory.py                      # 2048 tokens x 151,936 vocab, bf16
    python bench/logprob_memory.py --device cuda --tokens 16384 --json results/lp.json
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

from ascent.algos.logprobs import token_log_probs_and_entropy
from ascent.algos.logprobs_hidden import token_log_probs_and_entropy_from_hidden

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
VARIANTS = ["naive", "chunked", "naive-hidden", "fused-hidden"]
BASELINE_OF = {"chunked": "naive", "fused-hidden": "naive-hidden"}


def naive(logits, targets, temperature):
    z = logits.float() / temperature
    log_probs = torch.log_softmax(z, dim=-1).gather(-1, targets[:, None]).squeeze(-1)
    entropy = torch.logsumexp(z, dim=-1) - (torch.softmax(z, dim=-1) * z).sum(dim=-1)
    return log_probs, entropy


def make_inputs(variant, args, device):
    """The leaves of one variant, created directly in their dtype (no transient copies)."""
    n, v, h = args.tokens, args.vocab, args.hidden
    targets = torch.randint(0, v, (n,), device=device)
    if variant in ("naive", "chunked"):
        logits = torch.randn(n, v, device=device, dtype=DTYPES[args.dtype])
        return {"logits": logits.requires_grad_(True)}, targets
    dtype = DTYPES[hidden_dtype(args)]
    hidden = torch.randn(n, h, device=device, dtype=dtype)
    weight = torch.randn(v, h, device=device, dtype=dtype).div_(h**0.5)
    return {"hidden": hidden.requires_grad_(True), "weight": weight.requires_grad_(True)}, targets


def forward(variant, leaves, targets, args):
    kw = {"temperature": args.temperature, "chunk_tokens": args.chunk_tokens}
    if variant == "naive":
        return naive(leaves["logits"], targets, args.temperature)
    if variant == "chunked":
        return token_log_probs_and_entropy(leaves["logits"], targets, **kw)
    if variant == "naive-hidden":
        return naive(F.linear(leaves["hidden"], leaves["weight"]), targets, args.temperature)
    return token_log_probs_and_entropy_from_hidden(
        leaves["hidden"], leaves["weight"], targets, **kw
    )


def step(variant, leaves, targets, args):
    for leaf in leaves.values():
        leaf.grad = None  # a second backward would otherwise add into (and copy) the old grad
    log_probs, entropy = forward(variant, leaves, targets, args)
    (log_probs.sum() - 0.01 * entropy.sum()).backward()


def peak_bytes(device):
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def worker(variant, args):
    """Runs in its own process; prints one JSON line."""
    device = torch.device(args.device)
    torch.manual_seed(0)
    tiny = argparse.Namespace(**{**vars(args), "tokens": 8, "vocab": 64, "hidden": 16})
    step(variant, *make_inputs(variant, tiny, device), tiny)  # lazy init is not measured
    leaves, targets = make_inputs(variant, args, device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        baseline = torch.cuda.memory_allocated(device)
    else:
        baseline = peak_bytes(device)
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        step(variant, leaves, targets, args)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    dtype = args.dtype if variant in ("naive", "chunked") else hidden_dtype(args)
    print(
        json.dumps(
            {
                "variant": variant,
                "dtype": dtype,
                "peak_extra_mib": (peak_bytes(device) - baseline) / 2**20,
                "median_s": statistics.median(times),
                "times_s": times,
            }
        )
    )


def hidden_dtype(args):
    # bf16/fp16 matmuls on a CPU without bf16 units are 10-100x slower than fp32 (oneDNN falls
    # back to a reference kernel), which would make the hidden-state rows take hours.
    if args.hidden_dtype is not None:
        return args.hidden_dtype
    return args.dtype if args.device == "cuda" else "fp32"


def run_variant(variant, argv):
    env = os.environ | {"MALLOC_MMAP_THRESHOLD_": str(1 << 20)}
    cmd = [sys.executable, os.path.abspath(__file__), *argv, "--worker", variant]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{variant} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def table(results, args):
    by_name = {r["variant"]: r for r in results}
    copy_mib = args.tokens * args.vocab * 4 / 2**20
    lines = [
        f"tokens={args.tokens} vocab={args.vocab} hidden={args.hidden} "
        f"chunk_tokens={args.chunk_tokens} temperature={args.temperature} "
        f"device={args.device} repeats={args.repeats}; "
        f"one float32 [tokens x vocab] = {copy_mib:,.0f} MiB",
        "",
        "| method | dtype | peak extra MiB | vs naive | median s (fwd+bwd) | vs naive |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in results:
        base = by_name.get(BASELINE_OF.get(r["variant"], r["variant"]))
        mem_ratio = f"{r['peak_extra_mib'] / base['peak_extra_mib']:.2f}x" if base else "-"
        time_ratio = f"{r['median_s'] / base['median_s']:.2f}x" if base else "-"
        lines.append(
            f"| {r['variant']} | {r['dtype']} | {r['peak_extra_mib']:,.0f} | {mem_ratio} "
            f"| {r['median_s']:.2f} | {time_ratio} |"
        )
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--vocab", type=int, default=151936, help="Qwen2's vocabulary size")
    parser.add_argument("--hidden", type=int, default=896, help="Qwen2-0.5B's hidden size")
    parser.add_argument("--dtype", choices=DTYPES, default="bf16", help="logits dtype")
    parser.add_argument(
        "--hidden-dtype",
        choices=DTYPES,
        default=None,
        help="dtype of the hidden-state rows (default: --dtype on cuda, fp32 on cpu)",
    )
    parser.add_argument("--chunk-tokens", type=int, default=1024)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    parser.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args)

    argv = sys.argv[1:]
    results = []
    for variant in args.variants.split(","):
        results.append(run_variant(variant, argv))
        print(f"{variant}: {results[-1]['peak_extra_mib']:,.0f} MiB", file=sys.stderr)
    print(table(results, args))
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"config": vars(args), "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
