"""Actor update throughput, and the peak memory of the log-prob computation with and without
chunking, on a CPU-sized Qwen2-shaped model (random weights, built locally).

1. tokens/s of ``ActorWorker.update`` (FSDP2 over one rank, PPO loss, packed micro-batches
   under a token budget, two optimiser steps), median over repeats.
2. peak extra memory and time of one forward + backward of the response log-probs through
   the whole model: ascent's ``PolicyModule`` (log-probs from the final hidden states in
   chunks) against the plain way (the model's float32 logits for every token, then
   log_softmax), each in a fresh subprocess. On CPU the peak is the kernel's RSS high-water
   mark, reset just before the measured steps (/proc/self/clear_refs); on CUDA, the maximum
   allocated.

    .venv/bin/python bench/train_step.py [--device cuda] [--json PATH]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

from ascent.batch import Batch
from ascent.engine import PolicyModule, pack_for_responses
from ascent.models.loading import causal_lm_from_config, load_causal_lm


def build_model(args, directory):
    from transformers import Qwen2Config

    config = Qwen2Config(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=args.hidden * 4,
        num_hidden_layers=args.layers,
        num_attention_heads=args.hidden // 64,
        num_key_value_heads=max(1, args.hidden // 128),
        max_position_embeddings=4096,
    )
    causal_lm_from_config(config).save_pretrained(directory)


def make_batch(args, seed=0):
    g = torch.Generator().manual_seed(seed)
    rows, p, r = args.rows, args.prompt, args.response
    ids = torch.randint(0, args.vocab, (rows, p + r), generator=g)
    return Batch.from_dict(
        {
            "input_ids": ids,
            "attention_mask": torch.ones(rows, p + r, dtype=torch.long),
            "responses": ids[:, p:],
            "response_mask": torch.ones(rows, r, dtype=torch.long),
            "advantages": torch.randn(rows, r, generator=g),
        }
    )


def update_throughput(args, model_dir):
    from ascent.controller import ResourcePool, spawn_group
    from ascent.workers import ActorConfig, ActorWorker

    config = ActorConfig.model_validate(
        {
            "model": {"path": model_dir},
            "optim": {"lr": 1e-6},
            "mini_batches": 2,
            "tokens_per_micro_batch": args.tokens_per_micro_batch,
        }
    )
    pool = ResourcePool(device=args.device)
    batch = make_batch(args)
    tokens = int(batch["attention_mask"].sum())
    with spawn_group(ActorWorker, pool, args=(config,), backend="in-process") as actor:
        batch = batch.union(actor.log_probs(batch).select("old_log_probs"))
        actor.update(batch)  # warm-up
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            actor.update(batch)
            if args.device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    return {
        "tokens": tokens,
        "median_s": seconds,
        "tokens_per_s": tokens / seconds,
        "times_s": times,
    }


def rss_status(field):
    """VmRSS (current) or VmHWM (peak since the last reset) of this process, in bytes."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def reset_peak(device):
    """Start a new peak: CUDA's counter, or the kernel's RSS high-water mark (clear_refs 5)."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        return torch.cuda.memory_allocated()
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")
    return rss_status("VmRSS")


def peak_bytes(device):
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return rss_status("VmHWM")


def log_prob_worker(variant, args):
    """One forward + backward of the response log-probs; prints one JSON line."""
    device = torch.device(args.device)
    module = PolicyModule(load_causal_lm(args.model_dir)).to(device)

    def packed_batch(rows, prompt, response):
        small = argparse.Namespace(
            **{**vars(args), "rows": rows, "prompt": prompt, "response": response}
        )
        batch = make_batch(small)
        ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
        return pack_for_responses(ids, mask, response)

    def step(packed):
        module.zero_grad(set_to_none=True)
        if variant == "chunked":
            log_probs, _ = module(
                packed.input_ids, packed.position_ids, packed.query_index, packed.targets
            )
        else:
            logits = module.model(
                input_ids=packed.input_ids, position_ids=packed.position_ids, use_cache=False
            ).logits[0]
            log_probs = torch.log_softmax(logits.float(), dim=-1)[packed.query_index]
            log_probs = log_probs.gather(-1, packed.targets[:, None]).squeeze(-1)
        log_probs.sum().backward()

    # Warm up on a tiny batch: lazy initialisation is not measured, and the RSS high-water
    # mark must still be below what the measured step needs.
    step(packed_batch(1, 4, 4))
    packed = packed_batch(args.rows, args.prompt, args.response)
    baseline = reset_peak(device)
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        step(packed)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    result = {
        "variant": variant,
        "peak_extra_mib": (peak_bytes(device) - baseline) / 2**20,
        "median_s": statistics.median(times),
    }
    print(json.dumps(result))


def run_worker(variant, argv, model_dir):
    env = os.environ | {"MALLOC_MMAP_THRESHOLD_": str(1 << 20)}  # freed buffers leave the RSS
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        *argv,
        "--model-dir",
        model_dir,
        "--worker",
        variant,
    ]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{variant} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=32768)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--response", type=int, default=192)
    parser.add_argument("--tokens-per-micro-batch", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    parser.add_argument("--worker", choices=["chunked", "full-logits"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return log_prob_worker(args.worker, args)

    with tempfile.TemporaryDirectory() as model_dir:
        build_model(args, model_dir)
        params = sum(p.numel() for p in load_causal_lm(model_dir).parameters())
        update = update_throughput(args, model_dir)
        memory = [run_worker(v, sys.argv[1:], model_dir) for v in ("full-logits", "chunked")]
    tokens = args.rows * (args.prompt + args.response)
    copy_mib = tokens * args.vocab * 4 / 2**20
    print(
        f"model: Qwen2-shaped, {params / 1e6:.1f}M parameters (hidden {args.hidden}, "
        f"{args.layers} layers, vocab {args.vocab}); batch {args.rows} x "
        f"({args.prompt} + {args.response}) = {tokens} tokens; device {args.device}\n"
    )
    print("| actor update | tokens | median s | tokens/s |")
    print("|---|---:|---:|---:|")
    print(
        f"| PPO, 2 optimiser steps, budget {args.tokens_per_micro_batch} | {update['tokens']} | "
        f"{update['median_s']:.2f} | {update['tokens_per_s']:,.0f} |\n"
    )
    print(f"log-prob forward + backward (one float32 [tokens x vocab] = {copy_mib:,.0f} MiB)\n")
    print("| method | peak extra MiB | median s |")
    print("|---|---:|---:|")
    for row in memory:
        print(f"| {row['variant']} | {row['peak_extra_mib']:,.0f} | {row['median_s']:.2f} |")
    ratio = memory[1]["peak_extra_mib"] / memory[0]["peak_extra_mib"]
    print(f"\nchunked / full-logits peak memory: {ratio:.2f}x")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(
                {"config": vars(args), "parameters": params, "update": update, "log_probs": memory},
                out,
                indent=1,
            )


if __name__ == "__main__":
    main()
