"""KV-cache memory against the tokens actually live, and the same workload at two
``max_model_len`` values: one model, one run, interleaved repeats (medians).

Model: SmolLM2-135M-Instruct (the packaged GGUF, converted once), float32, one thread.
Workload: c concurrent sequences (c/2 prompts of 24-64 random token ids, 2 samples each,
temperature 1) of exactly N new tokens. For each ``max_model_len`` a fresh engine runs it
(its cache grows as the tokens arrive and is measured after the run), and reports:

- **allocated**: the bytes of the KV tensors the engine holds;
- **live**: at the moment the most blocks were held, each running sequence's cached tokens
  x bytes per token, plus one block per sequence (its partly filled last block);
- **slot cache**: what the engine before paging reserved for the same settings
  (max_num_seqs x max_model_len tokens).

    .venv/bin/python bench/kv_memory.py [--concurrency 32] [--new-tokens 128]
        [--lengths 256 8192] [--repeats 3] [--json PATH]
"""

import argparse
import json
import statistics
import time

import torch

from ascent.models.gguf import packaged_checkpoint
from ascent.models.loading import load_causal_lm
from ascent.rollout.engine import NativeEngine
from ascent.rollout.engine_settings import EngineLimits
from ascent.rollout.types import SamplingParams
from engine_speed import prompts_for  # the same workload (bench/ is on the path)

MIB = 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 8192])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = load_causal_lm(str(packaged_checkpoint("smollm2")), dtype=torch.float32)
    prompts = prompts_for(args.concurrency)
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=args.new_tokens, seed=0)
    engines = {
        length: NativeEngine(
            model, EngineLimits(max_num_seqs=args.concurrency, max_model_len=length)
        )
        for length in args.lengths
    }
    seconds = {length: [] for length in args.lengths}
    for _ in range(args.repeats):
        for length, engine in engines.items():
            start = time.perf_counter()
            samples = engine.generate(prompts, params)
            seconds[length].append(time.perf_counter() - start)
    tokens = sum(len(s.token_ids) for s in samples)
    rows = []
    for length, engine in engines.items():
        cache, peak = engine.cache, engine.scheduler.peak_usage
        live = peak["live_tokens"] * cache.token_bytes + peak["running"] * cache.block_bytes
        rows.append(
            {
                "max_model_len": length,
                "allocated_bytes": cache.bytes,
                "peak_held_blocks": peak["held_blocks"],
                "peak_live_tokens": peak["live_tokens"],
                "live_bytes": live,
                "allocated_over_live": cache.bytes / live,
                "slot_cache_bytes": args.concurrency * length * cache.token_bytes,
                "tokens_per_s": tokens / statistics.median(seconds[length]),
                "seconds": seconds[length],
            }
        )
    first, last = rows[0], rows[-1]
    print(
        f"SmolLM2-135M-Instruct, float32, one thread; {args.concurrency} sequences x "
        f"{args.new_tokens} new tokens; repeats={args.repeats} (medians)\n"
    )
    print(
        "| max_model_len | KV allocated MiB | live + 1 block/seq MiB | allocated / live "
        "| slot cache MiB | tokens/s |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['max_model_len']} | {row['allocated_bytes'] / MIB:.1f} | "
            f"{row['live_bytes'] / MIB:.1f} | {row['allocated_over_live']:.3f} | "
            f"{row['slot_cache_bytes'] / MIB:,.0f} | {row['tokens_per_s']:.1f} |"
        )
    memory_ratio = last["allocated_bytes"] / first["allocated_bytes"]
    time_ratio = first["tokens_per_s"] / last["tokens_per_s"]
    print(
        f"\nmax_model_len {last['max_model_len']} vs {first['max_model_len']}: memory "
        f"{memory_ratio:.3f}x, time {time_ratio:.3f}x"
    )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(
                {
                    "config": vars(args),
                    "results": rows,
                    "memory_ratio": memory_ratio,
                    "time_ratio": time_ratio,
                },
                out,
                indent=1,
            )


if __name__ == "__main__":
    main()
