"""Learning comparisons on the quickstart task (2-digit addition from a short SFT warm start):
each variant (a list of config overrides) trained from the same warm start per seed, with
the same steps and settings, and its held-out greedy accuracy before and after RL.
Shared by ``bench/async_learning.py`` and ``bench/prime_learning.py``."""

import json
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from ascent.quickstart.run import ACCURACY, prepare, rl_config
from ascent.trainer.rl.loop import train_rl


def run_variants(
    variants: dict[str, tuple[str, ...]],
    seeds: list[int],
    steps: int,
    root: Path,
    lr: float = 4e-4,
    extra: Callable[[Path], dict] | None = None,
    model: str = "dense",
) -> list[dict]:
    """One row per (seed, variant): before, after, gain_points, rl_seconds, and what
    ``extra(run_dir)`` reads from the run's outputs; ``model``: the quickstart's dense or
    moe model (``ascent.quickstart.run.fresh_models``)."""
    rows = []
    for seed in seeds:
        out = root / f"seed_{seed}"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        model_dir, data, _, _ = prepare(seed, out, model=model)
        for name, overrides in variants.items():
            run_out = out / name.replace(" ", "_").replace("=", "")
            overrides = (*overrides, "trainer.progress_bar=false", "trainer.export=false")
            began = time.perf_counter()
            result = train_rl(rl_config(model_dir, data, run_out, seed, steps, lr, overrides))
            history = result["validation"]
            before, after = history[0][1][ACCURACY], history[-1][1][ACCURACY]
            row = {
                "seed": seed,
                "variant": name,
                "before": before,
                "after": after,
                "gain_points": 100 * (after - before),
                "rl_seconds": time.perf_counter() - began,
            }
            if extra is not None:
                row |= extra(run_out / "rl")
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def gain_table(rows: list[dict], seeds: list[int], reference: str | None) -> dict[str, dict]:
    """Prints the held-out gains per seed and variant, each variant's mean and its difference
    from ``reference``'s; returns the summary per variant."""
    variants = list(dict.fromkeys(row["variant"] for row in rows))
    summary = {}
    for name in variants:
        gains = [r["gain_points"] for r in rows if r["variant"] == name]
        summary[name] = {"mean_gain": statistics.mean(gains), "min_gain": min(gains)}
    base = summary.get(reference, {}).get("mean_gain")
    print(
        "| variant | " + " | ".join(f"seed {s}" for s in seeds) + " | mean | vs " + f"{reference} |"
    )
    print("| --- |" + " ---: |" * (len(seeds) + 2))
    for name in variants:
        gains = [f"{r['gain_points']:+.1f}" for r in rows if r["variant"] == name]
        mean = summary[name]["mean_gain"]
        versus = f"{mean - base:+.1f}" if base is not None else "-"
        print(f"| {name} | " + " | ".join(gains) + f" | {mean:+.1f} | {versus} |")
    return summary


def metric_records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
