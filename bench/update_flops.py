"""The actor update against the machine: achieved FLOP/s per phase of ``ActorWorker.update``
beside this CPU's measured matmul peak, and the optimiser's bytes/s beside its measured
memory bandwidth, for several settings side by side in one run.

Workload: one GRPO update of the real-model step's shape, ``--rows`` rows (8 prompts x 8
samples) of ``--prompt`` + ``--response`` tokens, random ids, advantages and old log-probs,
on a model of SmolLM2-135M's shape (random weights built locally; ``--model DIR`` loads a
checkpoint instead, e.g. the converted SmolLM2), one optimiser step, everything in one
micro-batch as the real-model recipe does. Each setting runs in a fresh process (``--threads``
threads), one untimed update first, then ``--repeats`` timed ones; figures are medians.

Phases, timed by hooks on the real update (nothing is reimplemented):

- trunk forward: the decoder (embeddings to the final norm), ``base_model``'s forward;
- head forward: the rest of the policy module's forward (the chunked log-prob and entropy
  head over the vocabulary at the response positions);
- head backward: from ``backward`` until the final hidden states' gradient exists;
- trunk backward: from there to the end of ``backward``;
- optimiser: ``TrainEngine.step`` (gradient clipping and AdamW);
- other: the rest of ``update`` (packing, loss terms, metrics).

Model FLOPs (what the model's math needs; recomputation not counted): for N tokens in
packed rows of T_r tokens, each of L layers does 2 N P_layer (P_layer: its linear weights)
plus causal attention 4 n_heads d_head sum_r T_r (T_r + 1) / 2; the head 2 M V H for the M
response positions; a backward is twice its forward. AdamW reads the parameter, gradient and
both moments and writes three of them: 28 bytes per float32 parameter.

Peaks, measured in the same run with the same threads (``machine``): a 2048 x 2048 x 2048
matmul in float32 and in bfloat16 and a 256 MiB copy (bytes read + written / s), 5 repeats
each after a warm-up.

    .venv/bin/python bench/update_flops.py [--settings fp32 fused bf16] [--json PATH]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from ascent.batch import Batch
from machine import copy_bandwidth, matmul_peak  # bench/ is on the path
from train_step import make_batch as train_step_batch

HERE = Path(__file__).resolve()

# Each setting: overrides of ActorConfig (a dict merged into the base config).
SETTINGS = {
    "fp32": {},
    "fused": {"optim": {"implementation": "fused"}},
    "bf16": {"fsdp": {"param_dtype": "bfloat16"}, "optim": {"implementation": "fused"}},
}
PHASES = ("trunk_forward", "head_forward", "head_backward", "trunk_backward", "optimizer", "other")


def smollm2_shape(directory: str) -> str:
    """A random-weight model of SmolLM2-135M's shape (Llama, tied embeddings)."""
    from transformers import LlamaConfig

    from ascent.models.loading import causal_lm_from_config

    config = LlamaConfig(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        rope_theta=100000.0,
    )
    torch.manual_seed(0)
    causal_lm_from_config(config).save_pretrained(directory)
    return directory


def measure_peaks() -> dict:
    """The machine's peaks on the CPU (``machine``): matmuls of 2048³ in float32 and
    bfloat16, and a 256 MiB copy."""
    return {
        "matmul_fp32_flops": matmul_peak("cpu", 2048, torch.float32, repeats=5),
        "matmul_bf16_flops": matmul_peak("cpu", 2048, torch.bfloat16, repeats=5),
        "copy_bytes_per_s": copy_bandwidth("cpu", 2**28, repeats=5),
    }


def model_flops(config, row_lengths: list[int], responses: int) -> dict:
    """Forward FLOPs of the trunk and of the head (see the module's docstring)."""
    hidden, layers = config.hidden_size, config.num_hidden_layers
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    per_layer = (
        hidden * head_dim * (2 * heads + 2 * kv_heads) + 3 * hidden * config.intermediate_size
    )
    tokens = sum(row_lengths)
    attention = 4 * heads * head_dim * sum(t * (t + 1) // 2 for t in row_lengths)
    return {
        "trunk_forward": layers * (2 * tokens * per_layer + attention),
        "head_forward": 2 * responses * config.vocab_size * hidden,
    }


class PhaseClock:
    """Hooks on one ActorWorker that time the phases of ``update`` (see the docstring)."""

    def __init__(self, worker) -> None:
        from ascent.engine.modules import unwrap

        self.engine = worker.engine
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self._marks: dict[str, float] = {}
        root = self.engine.module
        trunk = unwrap(root.model).base_model
        root.register_forward_pre_hook(lambda *_: self._mark("root"))
        root.register_forward_hook(lambda *_: self._add("head_forward", "root"))
        trunk.register_forward_pre_hook(lambda *_: self._mark("trunk"))
        trunk.register_forward_hook(self._trunk_done)
        backward, step = self.engine.backward, self.engine.step
        self.engine.backward = lambda loss: self._timed_backward(backward, loss)
        self.engine.step = lambda: self._timed("optimizer", step)

    def _mark(self, name: str) -> None:
        self._marks[name] = time.perf_counter()

    def _add(self, phase: str, since: str) -> None:
        self.seconds[phase] += time.perf_counter() - self._marks[since]

    def _trunk_done(self, module, args, output) -> None:
        elapsed = time.perf_counter() - self._marks["trunk"]
        self.seconds["trunk_forward"] += elapsed
        self.seconds["head_forward"] -= elapsed  # the root's forward holds the trunk's
        hidden = output.last_hidden_state
        if hidden.requires_grad:
            hidden.register_hook(lambda grad: self._mark("hidden_grad"))

    def _timed_backward(self, backward, loss) -> None:
        self._mark("backward")
        backward(loss)
        end = time.perf_counter()
        self.seconds["head_backward"] += self._marks["hidden_grad"] - self._marks["backward"]
        self.seconds["trunk_backward"] += end - self._marks["hidden_grad"]

    def _timed(self, phase: str, run):
        self._mark(phase)
        result = run()
        self._add(phase, phase)
        return result

    def reset(self) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)


def make_batch(rows: int, prompt: int, response: int, vocab: int):
    """``train_step.py``'s random batch, with old log-probs (one optimiser step: on-policy
    would make them the update's own; any values exercise the same work)."""
    shape = argparse.Namespace(rows=rows, prompt=prompt, response=response, vocab=vocab)
    batch = train_step_batch(shape)
    generator = torch.Generator().manual_seed(1)
    old = -torch.rand(rows, response, generator=generator) * 5
    return batch.union(Batch.from_dict({"old_log_probs": old}))


def merged(base: dict, overrides: dict) -> dict:
    out = dict(base)
    for key, value in overrides.items():
        out[key] = merged(out.get(key, {}), value) if isinstance(value, dict) else value
    return out


def run_setting(args) -> dict:
    """One setting in this process: the median phase seconds of ``--repeats`` updates."""
    from ascent.controller import ResourcePool, spawn_group
    from ascent.workers import ActorConfig, ActorWorker

    torch.set_num_threads(args.threads)
    base = {
        "model": {"path": args.model_dir},
        "optim": {"lr": 1e-6},
        "tokens_per_micro_batch": args.rows * (args.prompt + args.response),
    }
    config = ActorConfig.model_validate(merged(base, SETTINGS[args.setting]))
    with spawn_group(ActorWorker, ResourcePool(), args=(config,), backend="in-process") as actor:
        (worker,) = actor.hosts.host.workers.values()
        model_config = worker.engine.module.model.config
        clock = PhaseClock(worker)
        batch = make_batch(args.rows, args.prompt, args.response, model_config.vocab_size)
        actor.update(batch)  # untimed: allocator and kernel warm-up
        runs = []
        for _ in range(args.repeats):
            clock.reset()
            start = time.perf_counter()
            actor.update(batch)
            total = time.perf_counter() - start
            phases = dict(clock.seconds)
            phases["other"] = total - sum(phases.values())
            runs.append({**phases, "total": total})
        parameters = sum(p.numel() for p in worker.engine.trainable)
    medians = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    rows = [args.prompt + args.response] * args.rows
    flops = model_flops(model_config, rows, args.rows * args.response)
    return {"seconds": medians, "runs": runs, "flops": flops, "parameters": parameters}


def achieved(result: dict) -> dict:
    """FLOP/s per phase (backward phases at twice their forward's FLOPs) and the
    optimiser's bytes/s."""
    s, f = result["seconds"], result["flops"]
    out = {
        "trunk_forward": f["trunk_forward"] / s["trunk_forward"],
        "head_forward": f["head_forward"] / s["head_forward"],
        "trunk_backward": 2 * f["trunk_forward"] / s["trunk_backward"],
        "head_backward": 2 * f["head_forward"] / s["head_backward"],
    }
    model_total = 3 * (f["trunk_forward"] + f["head_forward"])
    out["update"] = model_total / s["total"]
    out["optimizer_bytes_per_s"] = 28 * result["parameters"] / s["optimizer"]
    return out


def print_table(results: dict, peaks: dict) -> None:
    fp32, bf16 = peaks["matmul_fp32_flops"], peaks["matmul_bf16_flops"]
    print(
        f"\nmeasured peaks: matmul fp32 {fp32 / 1e9:.0f} GFLOP/s, bf16 {bf16 / 1e9:.0f} GFLOP/s; "
        f"copy {peaks['copy_bytes_per_s'] / 1e9:.1f} GB/s\n"
    )
    print("| setting | phase | s | GFLOP/s | of fp32 peak | of bf16 peak |")
    print("|---|---|---:|---:|---:|---:|")
    for name, result in results.items():
        rates = achieved(result)
        for phase in (*PHASES, "total"):
            seconds = result["seconds"][phase]
            label = "update (all)" if phase == "total" else phase
            rate = rates.get("update" if phase == "total" else phase)
            if rate is None:
                cells = "|||"
                if phase == "optimizer":
                    share = rates["optimizer_bytes_per_s"] / peaks["copy_bytes_per_s"]
                    cells = (
                        f"{rates['optimizer_bytes_per_s'] / 1e9:.1f} GB/s | {share:.0%} of copy ||"
                    )
                print(f"| {name} | {label} | {seconds:.2f} | {cells}")
                continue
            print(
                f"| {name} | {label} | {seconds:.2f} | {rate / 1e9:.0f} | {rate / fp32:.0%} "
                f"| {rate / bf16:.0%} |"
            )
    base = next(iter(results.values()))["seconds"]["total"]
    print("\n| setting | update s | vs first |")
    print("|---|---:|---:|")
    for name, result in results.items():
        total = result["seconds"]["total"]
        print(f"| {name} | {total:.2f} | {base / total:.2f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument(
        "--model", default=None, help="a checkpoint directory (default: SmolLM2's shape, random)"
    )
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--prompt", type=int, default=48)
    parser.add_argument("--response", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--json", default=None)
    parser.add_argument("--setting", default=None, help=argparse.SUPPRESS)  # the child's
    parser.add_argument("--model-dir", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.setting:
        print(json.dumps(run_setting(args)))
        return
    torch.set_num_threads(args.threads)
    peaks = measure_peaks()
    with tempfile.TemporaryDirectory() as scratch:
        model_dir = args.model or smollm2_shape(scratch)
        results = {}
        for name in args.settings:
            command = [
                sys.executable, str(HERE), "--setting", name, "--model-dir", model_dir,
                "--rows", str(args.rows), "--prompt", str(args.prompt),
                "--response", str(args.response), "--repeats", str(args.repeats),
                "--threads", str(args.threads),
            ]  # fmt: skip
            env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
            done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
            if done.returncode:
                raise SystemExit(f"setting {name} failed:\n{done.stderr[-3000:]}")
            results[name] = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"{name}: update {results[name]['seconds']['total']:.2f} s", flush=True)
    print_table(results, peaks)
    if args.json:
        payload = {"peaks": peaks, "results": results, "args": vars(args)}
        Path(args.json).write_text(json.dumps(payload, indent=1))


if __name__ == "__main__":
    main()
