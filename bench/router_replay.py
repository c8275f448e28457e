"""Router replay on the MoE quickstart (2-digit addition, a tiny Qwen3-MoE routing each
token to 2 of 4 experts): the same warm start per seed trained with GRPO three ways, in one
run, and how far the rollout's and the trainer's routing and log-probs are apart.

- ``f32 rollout``: engine and trainer both in float32 (the CPU default): next to no mismatch.
- ``bf16 rollout``: the engine generates in bfloat16 (as on a GPU), the trainer trains in
  float32: near ties between experts break differently.
- ``bf16 rollout + replay``: the same, with ``actor.router_replay=rollout``.

Per variant, means over the run's steps of: the share of tokens whose experts (as a set, in
any sparse layer) differ between the rollout and the trainer's forward
(``actor/moe/routing_mismatch``), the same for what the trainer's own routers would have
chosen (``..._natural``, with replay), and the rollout/trainer ratio's spread
(``actor/rollout_ratio_std``, and ``rollout_mismatch_k3``, the KL(rollout || trainer)
estimate); and the held-out accuracy gain.

    .venv/bin/python bench/router_replay.py [--seeds 0 1] [--steps 100] [--json PATH]
"""

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from quickstart_variants import gain_table, metric_records, run_variants

BF16 = "rollout.dtype=bfloat16"
VARIANTS = {
    "f32 rollout": (),
    "bf16 rollout": (BF16,),
    "bf16 rollout + replay": (BF16, "actor.router_replay=rollout"),
}
FIGURES = {
    "routing_mismatch": "actor/moe/routing_mismatch",
    "natural_mismatch": "actor/moe/routing_mismatch_natural",
    "ratio_std": "actor/rollout_ratio_std",
    "mismatch_k3": "actor/rollout_mismatch_k3",
    "max_abs_log_ratio": "actor/rollout_mismatch_max_abs",
}


def mismatch_figures(run_dir: Path) -> dict:
    records = metric_records(run_dir)
    figures = {}
    for name, key in FIGURES.items():
        values = [r[key] for r in records if key in r]
        figures[name] = statistics.mean(values) if values else None
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--json", type=str, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = run_variants(
            VARIANTS,
            args.seeds,
            args.steps,
            Path(tmp),
            lr=3e-4,
            extra=mismatch_figures,
            model="moe",
        )
    print()
    gain_table(rows, args.seeds, "bf16 rollout")
    print("\n| variant | seed | routing mismatch | natural mismatch | ratio std | k3 | max abs |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        cells = [
            "-"
            if row[name] is None
            else f"{row[name]:.2e}"
            if name != "routing_mismatch" and name != "natural_mismatch"
            else f"{100 * row[name]:.2f}%"
            for name in FIGURES
        ]
        print(f"| {row['variant']} | {row['seed']} | " + " | ".join(cells) + " |")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
