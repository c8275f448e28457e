"""Generated tokens/s of the native engine in-process, through ``ascent serve`` with 64
concurrent HTTP clients, and through vLLM with the same clients: one model, one workload,
one run, interleaved repeats (medians).

Model: the quickstart's shape (Qwen2, hidden 128, 4 layers, 4 heads of 32, byte vocabulary;
about 1M parameters), saved to disk and loaded by every backend. Workload: 256 requests,
prompts of 64-192 random tokens, temperature 1, exactly --max-new-tokens new tokens each (EOS
ignored, so every backend does the same work). In-process, the engine gets all prompts in one
``generate`` call with 64 cache slots; the servers get 64 slots and 64 clients, each sending
one request at a time (token-id prompts to ``/v1/completions``). The throughput counts tokens
returned, over the wall time of the whole workload.

    .venv/bin/python bench/serve.py [--no-vllm] [--json PATH]

vLLM comes from its own venv (``make vllm-venv``; ``--vllm-python`` names another).
"""

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import torch

from ascent.models import build_tiny_model, load_causal_lm
from ascent.rollout.engine import NativeEngine
from ascent.rollout.engine_settings import EngineLimits, EngineSettings
from ascent.rollout.server_process import SERVED_NAME, ServerProcess, free_port
from ascent.rollout.types import SamplingParams
from ascent.rollout.vllm_server import start_vllm_servers, vllm_python

SLOTS = 64


def prompts_for(count, seed=0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(64, 193, (count,), generator=g)
    return [torch.randint(0, 250, (int(n),), generator=g).tolist() for n in lengths]


def in_process(engine, prompts, max_new_tokens):
    params = SamplingParams(temperature=1.0, max_new_tokens=max_new_tokens)
    start = time.perf_counter()
    samples = engine.generate(prompts, params)
    return sum(len(s.token_ids) for s in samples) / (time.perf_counter() - start)


async def over_http(url, model, prompts, max_new_tokens, clients=SLOTS):
    """``clients`` workers, each sending one request at a time until the prompts run out."""
    queue = list(reversed(prompts))
    tokens = 0
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:

        async def worker():
            nonlocal tokens
            while queue:
                prompt = queue.pop()
                body = {
                    "model": model,
                    "prompt": prompt,
                    "max_tokens": max_new_tokens,
                    "temperature": 1.0,
                    "ignore_eos": True,
                    "logprobs": 0,
                    "return_token_ids": True,
                }
                response = await client.post(f"{url}/v1/completions", json=body)
                response.raise_for_status()
                tokens += len(response.json()["choices"][0]["token_ids"])

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        return tokens / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-vllm", action="store_true", help="skip the vLLM column")
    parser.add_argument(
        "--vllm-python", help="the interpreter with vLLM (default: make vllm-venv's)"
    )
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="ascent-bench-serve-"))
    model_dir = str(
        build_tiny_model(work / "model", hidden_size=128, layers=4, intermediate_size=512)
    )
    prompts = prompts_for(args.requests)
    max_len = 192 + args.max_new_tokens + 1
    engine = NativeEngine(
        load_causal_lm(model_dir), EngineLimits(max_num_seqs=SLOTS, max_model_len=max_len)
    )

    port = free_port()
    command = [sys.executable, "-m", "ascent", "serve", model_dir, "--port", str(port)]
    command += ["--max-num-seqs", str(SLOTS), "--max-model-len", str(max_len)]
    command += ["--served-model-name", "bench"]
    servers = {
        "ascent serve": (ServerProcess(command, port, work / "serve.log").start(120), "bench")
    }
    if not args.no_vllm:
        [vllm] = start_vllm_servers(
            1,
            work,
            300,
            python=vllm_python(args.vllm_python),
            settings=EngineSettings(
                model={"path": model_dir},
                max_model_len=max_len,
                max_num_seqs=SLOTS,
                dtype="float32",
                kv_cache_bytes=256 * 2**20,
            ),
            seed=0,
            cpu=True,
            extra_args=[],
        )
        servers["vLLM (CPU)"] = (vllm, SERVED_NAME)

    runs = {"in-process": [], **{name: [] for name in servers}}
    try:
        in_process(engine, prompts[:SLOTS], 8)  # warm-up
        for server, model in servers.values():
            asyncio.run(over_http(server.url, model, prompts[:SLOTS], 8))
        for _ in range(args.repeats):
            runs["in-process"].append(in_process(engine, prompts, args.max_new_tokens))
            for name, (server, model) in servers.items():
                runs[name].append(
                    asyncio.run(over_http(server.url, model, prompts, args.max_new_tokens))
                )
    finally:
        for server, _ in servers.values():
            server.stop()

    base = statistics.median(runs["in-process"])
    rows = []
    print(f"{args.requests} requests x {args.max_new_tokens} new tokens, {SLOTS} slots / clients")
    print(f"{'backend':<16} {'tokens/s':>10} {'vs in-process':>14}   (median of {args.repeats})")
    for name, values in runs.items():
        median = statistics.median(values)
        rows.append(
            {"backend": name, "tokens_per_s": median, "ratio": median / base, "runs": values}
        )
        print(f"{name:<16} {median:>10.0f} {median / base:>13.2f}x")
    if args.json:
        figures = {
            "requests": args.requests,
            "max_new_tokens": args.max_new_tokens,
            "slots": SLOTS,
            "threads": torch.get_num_threads(),
            "rows": rows,
        }
        Path(args.json).write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
