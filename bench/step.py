"""One GRPO step, ascent against TRL's GRPOTrainer, on the same model, prompts, samples per
prompt and response length, measured side by side in one run.

Both sides run on this machine's CPU, one process each, float32, no KL term (no reference
model), no gradient checkpointing (TRL's default turns it on), one optimiser step per
generation (on-policy: neither recomputes old log-probs), the loss averaged over all response
tokens of the step (ascent ``token-mean``, TRL ``dapo``), the reward in the same process (the
share of digits in the response). The model is a
Qwen2-shaped transformer with random weights and ascent's byte tokenizer, written once to a
temporary directory; both load it with ``from_pretrained``. TRL runs in its own virtual
environment (``--trl-python``), because it pins its own versions:

    python3.11 -m venv /work/trlvenv
    /work/trlvenv/bin/pip install torch==2.13.0 && /work/trlvenv/bin/pip install trl
    .venv/bin/python bench/step.py --trl-python /work/trlvenv/bin/python [--json PATH]

``--model smollm2`` (or a checkpoint directory) runs both on a real model instead: the
real-model quickstart's chat prompts ("What is a + b? Answer with the number only.", through
the model's chat template), scored by ascent's ``arithmetic`` rule on both sides.

Each repeat runs ascent, then TRL (each in a fresh subprocess): ``--warmup`` steps that are
not timed, then ``--steps`` timed ones. Seconds per step: the wall time of a whole training
step (generate, score, update, and for ascent the weight refresh of the rollout engine).
Generated tokens/s: response tokens of the step / seconds per step. Figures are medians over
all timed steps of all repeats; ratios are TRL / ascent (above 1: ascent is faster).
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
# What a timed run of ``ascent train`` leaves out: validation, the export, the progress bar,
# logged generations, resuming, console lines (the metrics go to metrics.jsonl only).
TIMED_RUN = (
    "trainer.val_every=0",
    "trainer.val_at_start=false",
    "trainer.export=false",
    "trainer.progress_bar=false",
    "trainer.log_generations=0",
    "trainer.resume=off",
    "tracking.sinks=[jsonl]",
    "tracking.console_every=1000",
)


def last_number_is(solution_str, ground_truth):
    """The real-model task's reward (ascent's built-in ``arithmetic``): the response's last
    number equals the ground truth."""
    from ascent.rewards.builtin import arithmetic

    return arithmetic(solution_str, ground_truth)["score"]


def digit_share(data_source, solution_str, ground_truth, extra_info):
    """verl's reward signature: the share of the response's characters that are digits."""
    if not solution_str:
        return 0.0
    return sum(c.isdigit() for c in solution_str) / len(solution_str)


def write_prompts(path: Path, count: int) -> list[str]:
    r = random.Random(0)
    prompts = ["say " + "".join(r.choice("abcdefgh") for _ in range(8)) for _ in range(count)]
    with open(path, "w") as out:
        for prompt in prompts:
            row = {"data_source": "digits", "prompt": prompt, "reward_model": {"ground_truth": ""}}
            out.write(json.dumps(row) + "\n")
    return prompts


# -- the two sides, each run in its own subprocess --------------------------------------------


def run_ascent(args: argparse.Namespace) -> list[dict]:
    from ascent.config import load_config
    from ascent.trainer.rl.config import RLConfig
    from ascent.trainer.rl.loop import train_rl

    work = Path(args.work)
    run_dir = work / f"ascent-run-{time.time_ns()}"
    if args.model:  # the real model on the real-model quickstart's chat prompts
        task = [f"model.path={args.model}", f"data.train_files=[{work / 'train.jsonl'}]"]
    else:
        task = [
            f"model.path={work / 'model'}",
            f"data.train_files=[{work / 'prompts.jsonl'}]",
            "data.chat_template=false",
            f"reward.function={HERE}:digit_share",
        ]
    config = load_config(
        RLConfig,
        None,
        [
            *task,
            f"data.prompts_per_step={args.prompts}",
            f"rollout.samples_per_prompt={args.samples}",
            f"rollout.max_response_length={args.response_length}",
            "algorithm.name=grpo",
            "algorithm.kl.mode=none",
            "actor.optim.lr=1e-6",
            "reward.workers=0",
            f"trainer.run_dir={run_dir}",
            f"trainer.total_steps={args.warmup + args.steps}",
            *TIMED_RUN,
            *(["actor.fsdp.param_dtype=bfloat16"] if args.precision == "bf16" else []),
        ],
    )
    train_rl(config)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    samples = args.prompts * args.samples
    return [
        {
            "seconds": r["timing_s/step"],
            "tokens": r["response_length/mean"] * samples,
            "score": r["critic/score/mean"],
            # rollout against trainer log-probs, k3 per token (0: the same numbers)
            "mismatch_kl": r.get("rollout/mismatch_kl"),
            "mismatch_max_abs": r.get("actor/rollout_mismatch_max_abs"),
        }
        for r in records
        if "timing_s/step" in r
    ][args.warmup :]


def run_trl(args: argparse.Namespace) -> list[dict]:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    work = Path(args.work)
    model_dir = args.model or work / "model"
    if args.model:
        rows = [json.loads(line) for line in (work / "train.jsonl").read_text().splitlines()]
        dataset = [
            {"prompt": r["prompt"], "ground_truth": r["reward_model"]["ground_truth"]} for r in rows
        ]
    else:
        lines = (work / "prompts.jsonl").read_text().splitlines()
        dataset = [{"prompt": json.loads(line)["prompt"]} for line in lines]
    steps: list[dict] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *_, **__):
            self.began = time.perf_counter()

        def on_step_end(self, *_, **__):
            steps.append({"seconds": time.perf_counter() - self.began})

        def on_log(self, _args, _state, _control, logs=None, **__):
            if logs and "completions/mean_length" in logs and steps:
                steps[-1]["tokens"] = logs["completions/mean_length"] * args.prompts * args.samples
                steps[-1]["score"] = logs.get("reward")

    def reward(completions, ground_truth=None, **_):
        if not args.model:
            return [digit_share(None, text, None, None) for text in completions]
        texts = [c[-1]["content"] for c in completions]  # conversational: message lists
        return [last_number_is(t, g) for t, g in zip(texts, ground_truth, strict=True)]

    config = GRPOConfig(
        output_dir=str(work / f"trl-run-{time.time_ns()}"),
        per_device_train_batch_size=args.prompts * args.samples,
        gradient_accumulation_steps=1,
        num_generations=args.samples,
        max_completion_length=args.response_length,
        temperature=1.0,
        learning_rate=1e-6,
        beta=0.0,
        loss_type="dapo",
        gradient_checkpointing=False,  # TRL's default is on; ascent's is off
        max_steps=args.warmup + args.steps,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=args.precision == "bf16",  # autocast; float32 weights and optimiser
        seed=0,
        disable_tqdm=True,
    )
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir),
        reward_funcs=reward,
        args=config,
        train_dataset=Dataset.from_list(dataset),
        processing_class=tokenizer,
        callbacks=[StepTimer()],
    )
    trainer.train()
    return steps[args.warmup :]


# -- the driver ------------------------------------------------------------------------------


def side(
    python: str, name: str, precision: str, args: argparse.Namespace, work: Path
) -> list[dict]:
    out = work / f"{name}-{time.time_ns()}.json"
    command = [python, str(HERE), f"--worker={name}", f"--work={work}", f"--out={out}"]
    command += [f"--{k.replace('_', '-')}={getattr(args, k)}" for k in SHARED]
    command.append(f"--precision={precision}")
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "TOKENIZERS_PARALLELISM": "false"}
    # TRL's venv has no ascent installed: the real task's reward is ascent's own rule, read
    # from this checkout's sources (it needs nothing beyond the standard library).
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(HERE.parent.parent / "src"), env.get("PYTHONPATH")])
    )
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


SHARED = ["prompts", "samples", "response_length", "warmup", "steps", "model"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trl-python", help="python of a venv with trl (default: skip TRL)")
    parser.add_argument(
        "--model",
        default="",
        help="a checkpoint directory, or smollm2 (the packaged real model): train it on the "
        "real-model quickstart's chat prompts (default: a tiny model with random weights)",
    )
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--response-length", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument(
        "--precisions",
        nargs="+",
        default=["fp32"],
        choices=["fp32", "bf16"],
        help="run each trainer in each: fp32, or bf16 compute over float32 weights (ascent: "
        "actor.fsdp.param_dtype=bfloat16, its rollout following; TRL: bf16=True, autocast)",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    parser.add_argument("--precision", default="fp32", help=argparse.SUPPRESS)  # a worker's
    parser.add_argument("--worker", choices=["ascent", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        steps = (run_ascent if args.worker == "ascent" else run_trl)(args)
        Path(args.out).write_text(json.dumps(steps))
        return

    from ascent.models import build_tiny_model

    if args.model == "smollm2":
        from ascent.models.gguf import packaged_checkpoint

        args.model = str(packaged_checkpoint("smollm2"))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.model:
            from ascent.quickstart.real_task import write_task

            write_task(work, seed=0)
        else:
            build_tiny_model(
                work / "model",
                hidden_size=args.hidden,
                layers=args.layers,
                intermediate_size=4 * args.hidden,
                seed=0,
            )
        write_prompts(work / "prompts.jsonl", args.prompts * (args.warmup + args.steps))
        trainers = {"ascent": ("ascent", sys.executable)}
        if args.trl_python:
            trainers["TRL GRPOTrainer"] = ("trl", args.trl_python)
        sides = {
            f"{name} {precision}": (worker, python, precision)
            for precision in args.precisions
            for name, (worker, python) in trainers.items()
        }
        measured: dict[str, list[dict]] = {name: [] for name in sides}
        for _ in range(args.repeats):  # interleaved, so machine noise hits all alike
            for name, (worker, python, precision) in sides.items():
                measured[name] += side(python, worker, precision, args, work)
    figures = {}
    for name, steps in measured.items():
        seconds = statistics.median(s["seconds"] for s in steps)
        figures[name] = {
            "seconds_per_step": seconds,
            "tokens_per_s": statistics.median(s["tokens"] / s["seconds"] for s in steps),
            "mean_response_tokens": statistics.mean(s["tokens"] for s in steps)
            / (args.prompts * args.samples),
            "timed_steps": len(steps),
        }
        mismatch = [s["mismatch_kl"] for s in steps if s.get("mismatch_kl") is not None]
        if mismatch:
            figures[name]["mismatch_kl"] = statistics.median(mismatch)
            figures[name]["mismatch_max_abs"] = max(s["mismatch_max_abs"] for s in steps)
    base = next(iter(figures.values()))
    shape = f"Qwen2-shaped model hidden {args.hidden} x {args.layers} layers"
    print(
        f"{args.prompts} prompts x {args.samples} samples, up to {args.response_length} tokens, "
        f"{args.model or shape}, {args.threads} threads, "
        f"medians of {args.repeats} x {args.steps} steps\n"
    )
    print(f"(speed-up and tokens/s against {next(iter(figures))})\n")
    print("| trainer | s/step | ascent speed-up | generated tokens/s | vs ascent | mean length |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, f in figures.items():
        f["speedup_of_ascent"] = f["seconds_per_step"] / base["seconds_per_step"]
        f["tokens_per_s_vs_ascent"] = f["tokens_per_s"] / base["tokens_per_s"]
        print(
            f"| {name} | {f['seconds_per_step']:.2f} | {f['speedup_of_ascent']:.2f}x | "
            f"{f['tokens_per_s']:.0f} | {f['tokens_per_s_vs_ascent']:.2f}x | "
            f"{f['mean_response_tokens']:.1f} |"
        )
    if args.trl_python:
        print("\n| precision | ascent s / TRL s |")
        print("|---|---:|")
        for precision in args.precisions:
            ours = figures[f"ascent {precision}"]["seconds_per_step"]
            theirs = figures[f"TRL GRPOTrainer {precision}"]["seconds_per_step"]
            print(f"| {precision} | {ours / theirs:.2f}x |")
    ours = [name for name in figures if "mismatch_kl" in figures[name]]
    if ours:
        print("\n| ascent | rollout/mismatch_kl (median) | largest abs log-ratio |")
        print("|---|---:|---:|")
        for name in ours:
            f = figures[name]
            print(f"| {name} | {f['mismatch_kl']:.2e} | {f['mismatch_max_abs']:.3f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "figures": figures}, indent=1))


if __name__ == "__main__":
    main()
