"""The distillation quickstart: on the addition task, a teacher that knows it (the
quickstart's SFT warm start after GRPO) teaches the same warm start by on-policy
distillation, side by side with GRPO on the reward alone from that start, for the same
steps; held-out accuracy of both at every validation.

The student is trained on the teacher's per-token signal only (``teacher.task_advantage=0``:
the reward is computed and logged but trains nothing): the reverse KL of each sampled token
in its advantage, and the forward KL over the teacher's top-k tokens as a loss term
(``ascent.algos.distill``). A dense, per-token signal where GRPO gets one number per answer.
"""

import time
from pathlib import Path

from ascent.quickstart.run import ACCURACY, fresh_output, prepare, rl_config
from ascent.quickstart.stages import held_out_change, keep_summary
from ascent.trainer.rl.loop import train_rl

STEPS = 100
TEACHER_STEPS = 400
VAL_EVERY = 10
DISTILL = (
    "teacher.task_advantage=0",
    "teacher.reverse_kl_advantage=1",
    "teacher.forward_kl_top_k=1",
    "teacher.top_k=8",
)


def run_distill_quickstart(
    seed: int = 0,
    out_dir: str = "runs/quickstart-distill",
    steps: int = STEPS,
    overrides: tuple[str, ...] = (),
    teacher_steps: int = TEACHER_STEPS,
    lr: float = 3e-4,
) -> int:
    """Runs the teacher, then the two students; returns 0 when the distilled student's
    held-out accuracy rose by at least 30 points. ``overrides`` apply to the distilled
    student's run."""
    began = time.perf_counter()
    out = fresh_output(out_dir)
    model_dir, data, warm, held_out_problems = prepare(seed, out)
    every = (f"trainer.val_every={VAL_EVERY}",)

    def student(name: str, run_steps: int, extra: tuple[str, ...]) -> tuple[dict, float]:
        print(f"\n{name}: {run_steps} steps from the SFT warm start")
        started = time.perf_counter()
        result = train_rl(rl_config(model_dir, data, out / name, seed, run_steps, lr, extra))
        return result, time.perf_counter() - started

    teacher, teacher_seconds = student("teacher (GRPO)", teacher_steps, ())
    grpo, grpo_seconds = student("grpo", steps, every)
    distilled, distill_seconds = student(
        "distill",
        steps,
        (*every, f"teacher.model.path={teacher['export_dir']}", *DISTILL, *overrides),
    )
    summary = {
        "seed": seed,
        "held_out_problems": held_out_problems,
        "sft": warm,
        "teacher": {**held_out_change(teacher["validation"], ACCURACY), "seconds": teacher_seconds},
        "grpo": {**held_out_change(grpo["validation"], ACCURACY), "seconds": grpo_seconds},
        "distill": {
            **held_out_change(distilled["validation"], ACCURACY),
            "seconds": distill_seconds,
        },
        "steps": steps,
        "seconds": time.perf_counter() - began,
    }
    report(summary, out)
    return 0 if summary["distill"]["gain_points"] >= 30 else 1


def first_step_at(curve: list, accuracy: float) -> int | None:
    """The first validated step whose held-out accuracy reached ``accuracy`` (None: never)."""
    return next((step for step, value in curve if value >= accuracy), None)


def report(summary: dict, out: Path) -> None:
    keep_summary(summary, out)
    teacher = summary["teacher"]["accuracy_after"]
    print(
        f"\nheld-out accuracy (greedy, {summary['held_out_problems']} problems); "
        f"teacher {teacher:.1%}"
    )
    print(f"{'step':>6} {'grpo':>8} {'distill':>8}")
    for (step, rl), (_, distilled) in zip(
        summary["grpo"]["held_out_accuracy"], summary["distill"]["held_out_accuracy"], strict=True
    ):
        print(f"{step:>6} {rl:>8.1%} {distilled:>8.1%}")
    target = summary["grpo"]["accuracy_after"]
    reached = first_step_at(summary["distill"]["held_out_accuracy"], target)
    print(
        f"distill reached GRPO's accuracy after {summary['steps']} steps ({target:.1%}) at "
        f"step {reached}"
    )
    print(f"summary: {out / 'summary.json'}  ({summary['seconds']:.0f} s)")
