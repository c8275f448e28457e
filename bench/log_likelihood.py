"""What the log-probs evaluation clients ask of the native engine cost, on the real
SmolLM2-135M-Instruct, in one run with one thread: scoring a prompt teacher-forced
(``NativeEngine.score``, what ``echo`` uses) against prefilling it (a one-token generation,
prefix cache emptied first) and against a transformers forward with ``log_softmax``; and
generating with the top alternatives kept (``EngineRequest.top_logprobs`` 5) against without.

Medians over ``--repeats`` rounds (each round runs every variant once), per prompt length.

    .venv/bin/python bench/log_likelihood.py [--lengths 45 200] [--repeats 7] [--json PATH]
"""

import argparse
import json
import statistics
import time

import torch

from ascent.models import load_causal_lm
from ascent.models.gguf import packaged_checkpoint
from ascent.rollout import EngineLimits, NativeEngine, SamplingParams
from ascent.rollout.requests import EngineRequest

GENERATED = 16  # tokens of the generation rows


def interleaved_medians(works: dict, repeats: int) -> dict[str, float]:
    """Median seconds of each of ``works``, run in turn within every repeat (so drift in the
    machine's speed reaches all of them alike)."""
    times: dict[str, list[float]] = {name: [] for name in works}
    for _ in range(repeats):
        for name, work in works.items():
            start = time.perf_counter()
            work()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def generate(engine: NativeEngine, prompt: list[int], top_logprobs: int) -> None:
    engine.reset_prefix_cache()
    params = SamplingParams(temperature=0, max_new_tokens=GENERATED, stop_token_ids=[])
    done = []
    engine.add_request(EngineRequest(prompt, params, done.append, top_logprobs=top_logprobs))
    while engine.has_work():
        engine.step()


def measure(model, engine: NativeEngine, length: int, repeats: int) -> dict:
    prompt = list(range(1000, 1000 + length))
    ids = torch.tensor([prompt])

    def prefill() -> None:
        engine.reset_prefix_cache()
        engine.generate([prompt], SamplingParams(temperature=0, max_new_tokens=1))

    def transformers_forward() -> None:
        with torch.no_grad():
            torch.log_softmax(model(ids).logits.float(), dim=-1)

    works = {
        "score_s": lambda: engine.score(prompt, 1),
        "prefill_s": prefill,
        "transformers_s": transformers_forward,
        "generate_s": lambda: generate(engine, prompt, 0),
        "generate_top5_s": lambda: generate(engine, prompt, 5),
    }
    return {"prompt_tokens": length, **interleaved_medians(works, repeats)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[45, 200])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", type=str, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = load_causal_lm(packaged_checkpoint("smollm2"))
    engine = NativeEngine(model, EngineLimits(max_num_seqs=4, max_model_len=1024))
    rows = [measure(model, engine, length, args.repeats) for length in args.lengths]
    print(
        f"| prompt | score | prefill | score/prefill | transformers | "
        f"generate {GENERATED} | + top 5 | ratio |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['prompt_tokens']} | {row['score_s']:.3f} s | {row['prefill_s']:.3f} s | "
            f"{row['score_s'] / row['prefill_s']:.2f} | {row['transformers_s']:.3f} s | "
            f"{row['generate_s']:.3f} s | {row['generate_top5_s']:.3f} s | "
            f"{row['generate_top5_s'] / row['generate_s']:.2f} |"
        )
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"threads": 1, "repeats": args.repeats, "rows": rows}, out, indent=2)


if __name__ == "__main__":
    main()
