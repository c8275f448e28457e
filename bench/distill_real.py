"""On-policy distillation on the real SmolLM2-135M-Instruct (``make real-model``): the
real-model quickstart's task (sums through the chat template), a teacher trained by its
GRPO recipe (``ascent.quickstart.real``, 30 steps), then a fresh SmolLM2 taught by that
teacher alone (``teacher.task_advantage=0``) for fewer steps. The GRPO curve to compare
with is the teacher's own run from the same checkpoint (the recipe's learning rate is
constant after its warmup, so its first N steps are a GRPO run of N steps).

    .venv/bin/python bench/distill_real.py [--seeds 0] [--steps 10] [--json PATH]

Prints held-out greedy accuracy of both every 5 steps. A learning claim (in steps), on a
CPU about 40 minutes per seed.
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

from ascent.config import load_config
from ascent.models.gguf import packaged_checkpoint
from ascent.quickstart.distill_run import DISTILL
from ascent.quickstart.real import STEPS, real_overrides
from ascent.quickstart.real_task import write_task
from ascent.trainer.rl.config import RLConfig
from ascent.trainer.rl.loop import train_rl

ACCURACY = "val/arithmetic/acc"


def run(model: str, data: dict, run_dir: Path, seed: int, steps: int, extra: list) -> dict:
    began = time.perf_counter()
    config = load_config(
        RLConfig,
        None,
        [
            f"model.path={model}",
            f"data.train_files=[{data['train']}]",
            f"data.val_files=[{data['held_out']}]",
            f"trainer.run_dir={run_dir}",
            *real_overrides(seed, steps),
            "trainer.val_every=5",
            "trainer.progress_bar=false",
            *extra,
        ],
    )
    result = train_rl(config)
    curve = [(step, metrics[ACCURACY]) for step, metrics in result["validation"]]
    return {"curve": curve, "seconds": time.perf_counter() - began, "export": result["export_dir"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--out", default=None, help="Keep the runs here (default: a temp dir).")
    parser.add_argument("--json", default=None, help="Also write the figures here.")
    args = parser.parse_args()
    root = Path(args.out or tempfile.mkdtemp(prefix="ascent-distill-real-"))
    model = packaged_checkpoint("smollm2")
    results = []
    for seed in args.seeds:
        out = root / f"seed_{seed}"
        data = write_task(out / "data", seed)
        teacher = run(model, data, out / "teacher", seed, STEPS, ["trainer.export=true"])
        student = run(
            model,
            data,
            out / "distill",
            seed,
            args.steps,
            ["trainer.export=false", f"teacher.model.path={teacher['export']}", *DISTILL],
        )
        results.append({"seed": seed, "teacher": teacher, "distill": student})
        print(json.dumps(results[-1]), flush=True)
    print("\nSmolLM2-135M-Instruct, sums; held-out accuracy (%) by step")
    print(
        f"{'seed':>5} {'run':>9} " + " ".join(f"{s:>6}" for s, _ in results[0]["teacher"]["curve"])
    )
    for result in results:
        for name in ("teacher", "distill"):
            cells = " ".join(f"{100 * a:>6.1f}" for _, a in result[name]["curve"])
            label = "grpo" if name == "teacher" else name
            print(f"{result['seed']:>5} {label:>9} {cells}  ({result[name]['seconds']:.0f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
