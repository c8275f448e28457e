"""Generated tokens/s of the native rollout engine against transformers ``generate``.

Same model, prompts and sampling settings for both, in one run with interleaved repeats
(medians). The workload looks like an RL step: prompts of 64-192 tokens, 8 samples per
prompt, temperature 1, up to 256 new tokens, and stop tokens, so that response lengths vary
(a geometric spread with a mean near 60, like a policy that sometimes rambles). Concurrency c
is the number of sequences decoded at once: the native engine's ``max_num_seqs``, and the
batch size given to ``generate`` (which runs every sample of a batch until the longest one
ends, and prefills each sample separately).

CPU (default): a Qwen2-shaped model of about 1M parameters with the byte-level vocabulary,
the size ascent's CPU quickstart trains. GPU (``--device cuda``): a 0.5B-parameter Qwen2
shape in bf16 at 256 sequences, also reporting the fraction of the memory-bandwidth bound.

    .venv/bin/python bench/rollout.py [--device cuda] [--json PATH]
"""

import argparse
import json
import statistics
import time

import torch

from ascent.models.loading import causal_lm_from_config
from ascent.rollout.engine import NativeEngine
from ascent.rollout.engine_settings import EngineLimits
from ascent.rollout.hf_engine import TransformersEngine
from ascent.rollout.types import SamplingParams
from machine import copy_bandwidth  # bench/ is on the path

SAMPLES_PER_PROMPT = 8
VOCAB = 259
STOP_TOKENS = [255, 256, 257, 258]  # about 1.5% of the vocabulary


def build_model(args):
    from transformers import Qwen2Config

    config = Qwen2Config(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate or 4 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=max(1, args.heads // 2),
        max_position_embeddings=1024,
    )
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    return causal_lm_from_config(config).to(device=args.device, dtype=dtype)


def prompts_for(count, seed=0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(64, 193, (count,), generator=g)
    return [torch.randint(0, 250, (int(n),), generator=g).tolist() for n in lengths]


def bandwidth_bound(model, concurrency, mean_context, bandwidth) -> float:
    """tokens/s if a decode step only had to read the weights once and each running
    sequence's keys and values (mean_context positions), at ``bandwidth`` bytes/s."""
    config = model.config
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_per_token = 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * 2
    step_bytes = weight_bytes + concurrency * mean_context * kv_per_token
    return concurrency * bandwidth / step_bytes


def timed(engine, prompts, params):
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    samples = engine.generate(prompts, params)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start, sum(len(s.token_ids) for s in samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--hidden", type=int, default=None)
    parser.add_argument("--intermediate", type=int, default=None)
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--heads", type=int, default=None)
    parser.add_argument("--vocab", type=int, default=None)
    parser.add_argument("--concurrency", type=int, nargs="+", default=None)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument(
        "--stop-tokens",
        type=int,
        default=len(STOP_TOKENS),
        help="how many stop tokens (0: every response runs to --max-new-tokens)",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args()
    gpu = args.device == "cuda"
    defaults = {  # 0.5B Qwen2 shape on a GPU, ~1M parameters on a CPU
        "hidden": 896 if gpu else 128,
        "intermediate": 4864 if gpu else 512,
        "layers": 24 if gpu else 4,
        "heads": 14 if gpu else 4,
        "vocab": 151936 if gpu else VOCAB,
        "concurrency": [1, 16, 64, 256] if gpu else [1, 16, 64],
    }
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    torch.manual_seed(0)
    model = build_model(args)
    params_count = sum(p.numel() for p in model.parameters())
    sampling = SamplingParams(
        n=SAMPLES_PER_PROMPT,
        temperature=1.0,
        max_new_tokens=args.max_new_tokens,
        stop_token_ids=STOP_TOKENS[: args.stop_tokens],
        seed=0,
    )
    bandwidth = copy_bandwidth(args.device) if gpu else None
    rows = []
    for concurrency in args.concurrency:
        sequences = max(32, 4 * concurrency)
        prompts = prompts_for(sequences // SAMPLES_PER_PROMPT)
        engines = {
            "native": NativeEngine(
                model, EngineLimits(max_num_seqs=concurrency, max_model_len=512)
            ),
            "transformers": TransformersEngine(model, max_num_seqs=concurrency),
        }
        for engine in engines.values():  # warm-up
            engine.generate(prompts[:1], sampling.model_copy(update={"max_new_tokens": 8}))
        results = {name: [] for name in engines}
        for _ in range(args.repeats):
            for name, engine in engines.items():
                results[name].append(timed(engine, prompts, sampling))
        row = {"concurrency": concurrency, "sequences": sequences}
        for name, runs in results.items():
            seconds = statistics.median(s for s, _ in runs)
            tokens = statistics.median(t for _, t in runs)
            row[name] = {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}
        row["mean_response"] = row["native"]["tokens"] / sequences
        if gpu:
            mean_prompt = sum(len(p) for p in prompts) / len(prompts)
            bound = bandwidth_bound(
                model, concurrency, mean_prompt + row["mean_response"] / 2, bandwidth
            )
            row["bandwidth_bound_tokens_per_s"] = bound
            row["fraction_of_bound"] = row["native"]["tokens_per_s"] / bound
        row["speedup"] = row["native"]["tokens_per_s"] / row["transformers"]["tokens_per_s"]
        rows.append(row)
        print(f"concurrency {concurrency}: {row['speedup']:.2f}x", flush=True)

    print(
        f"\nmodel: Qwen2-shaped, {params_count / 1e6:.2f}M parameters, {args.device}, "
        f"{'bf16' if gpu else 'fp32'}; {SAMPLES_PER_PROMPT} samples per prompt, "
        f"up to {args.max_new_tokens} new tokens, {args.stop_tokens} stop tokens, "
        f"repeats={args.repeats} (medians)\n"
    )
    print(
        "| concurrency | sequences | native tokens/s | transformers tokens/s "
        "| native / transformers | mean response |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['concurrency']} | {row['sequences']} | {row['native']['tokens_per_s']:,.0f} | "
            f"{row['transformers']['tokens_per_s']:,.0f} | {row['speedup']:.2f}x | "
            f"{row['mean_response']:.0f} |"
        )
    if gpu:
        print(f"\nmeasured copy bandwidth {bandwidth / 1e12:.2f} TB/s; bound = (weights + running")
        print("sequences' keys and values, read once per decode step) / bandwidth\n")
        print("| concurrency | bound tokens/s | native / bound |")
        print("|---:|---:|---:|")
        for row in rows:
            print(
                f"| {row['concurrency']} | {row['bandwidth_bound_tokens_per_s']:,.0f} | "
                f"{row['fraction_of_bound']:.0%} |"
            )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(
                {"config": vars(args), "parameters": params_count, "results": rows}, out, indent=1
            )


if __name__ == "__main__":
    main()
