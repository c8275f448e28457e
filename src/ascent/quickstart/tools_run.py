"""``ascent quickstart --task tools``: a tiny model learns to use a calculator tool.

An SFT warm start on demonstrations (``tools_warm_start``) that runs until the model can
call the tool and copy its answer, measured, with a fresh initialisation when an attempt
stalls; then multi-turn GRPO (``rollout.agent``) with the tool. After the warm start the
model, decoding greedily, mostly answers directly (and wrong: it cannot multiply): RL has to
find that the tool pays. Reports held-out accuracy and the share of answers that used the
tool, before and after RL; a run with no learning signal for 25 steps stops and says so.
"""

import time
from pathlib import Path

from ascent.quickstart.run import fresh_models, fresh_output, rl_config
from ascent.quickstart.stages import (
    announce_warm_start,
    held_out_change,
    keep_summary,
    write_splits,
)
from ascent.quickstart.tools_task import SOURCE, split_pairs, write_rl_rows
from ascent.quickstart.tools_warm_start import COMPETENCE, TOOLS_WARM_START
from ascent.quickstart.warm_start import warm_start
from ascent.trainer.rl.config import RLConfig
from ascent.trainer.rl.loop import train_rl

TOOL = "ascent.quickstart.tools_task:multiply"
ACCURACY, USED_TOOLS = f"val/{SOURCE}/acc", "val/agent/used_tools"
RESPONSE_TOKENS = 112


def tools_rl_config(
    model_dir: str,
    data: dict,
    out: Path,
    seed: int,
    steps: int,
    lr: float,
    overrides: tuple[str, ...] = (),
) -> RLConfig:
    """The addition quickstart's GRPO settings, with episodes: chat prompts, the tool, the
    final answer scored."""
    episodes = (
        "data.prompts_per_step=16",
        "data.chat_template=true",
        f"rollout.max_response_length={RESPONSE_TOKENS}",
        f"rollout.agent.tools=[{TOOL}]",
        "rollout.agent.tools_in_prompt=false",
        "rollout.agent.max_turns=2",
        "reward.function=ascent.quickstart.tools_task:compute_score",
        "tracking.console_keys=[critic/score/mean, agent/used_tools, val/, timing_s/step]",
        # A run whose samples all score alike for 25 steps has collapsed: stop and say so.
        "trainer.collapse_steps=25",
        "trainer.stop_on_collapse=true",
    )
    return rl_config(model_dir, data, out, seed, steps, lr, (*episodes, *overrides))


def run_tools_quickstart(
    seed: int = 0,
    out_dir: str = "runs/quickstart-tools",
    steps: int = 100,
    lr: float = 4e-4,
    sft_lr: float = 1e-3,
    overrides: tuple[str, ...] = (),
    held_out_problems: int = 500,
) -> int:
    """Runs everything; returns 0 when RL raised held-out accuracy by at least 30 points, 1
    when it did not or the run collapsed. ``held_out_problems`` and ``steps`` shorten it."""
    began = time.perf_counter()
    out = fresh_output(out_dir)
    train, dev, held_out = split_pairs(seed, held_out=held_out_problems)
    print(f"task: a*b (3 x 2 digits) with a multiply tool; {len(held_out)} held-out problems")
    warm = warm_start(
        fresh_models(out, seed),
        out / "sft",
        train,
        dev,
        seed=seed,
        target=COMPETENCE,
        plateau_steps=600,
        max_steps=1000,
        check_every=50,
        lr=sft_lr,
        task=TOOLS_WARM_START,
    )
    announce_warm_start(warm, "forced call and copy accuracy")
    data = write_splits(out, write_rl_rows, {"train": train, "held_out": held_out}, ".jsonl")
    result = train_rl(tools_rl_config(str(out / "sft"), data, out, seed, steps, lr, overrides))
    history = result["validation"]
    summary = {
        **held_out_change(history, ACCURACY, USED_TOOLS),
        "tool_use_before": history[0][1][USED_TOOLS],
        "tool_use_after": history[-1][1][USED_TOOLS],
        "held_out_problems": len(held_out),
        "seed": seed,
        "sft": warm,
        "collapsed": result["collapsed"],
        "seconds": time.perf_counter() - began,
    }
    keep_summary(summary, out)
    print(
        f"\nheld-out accuracy ({len(held_out)} problems, greedy, the tool available): before RL "
        f"{summary['accuracy_before']:.1%}, after RL {summary['accuracy_after']:.1%} "
        f"({summary['gain_points']:+.1f} points); answers that used the tool: "
        f"{summary['tool_use_before']:.0%} -> {summary['tool_use_after']:.0%}; "
        f"{summary['seconds']:.0f} s in all"
    )
    if result["collapsed"]:
        print(f"the run stopped learning: {result['collapsed']}")
        return 1
    return 0 if summary["gain_points"] >= 30 else 1
