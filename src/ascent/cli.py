"""The ``ascent`` command line: ``quickstart``, ``sft CONFIG key=value ...``,
``rm CONFIG key=value ...``,
``train CONFIG key=value ...``, ``export CHECKPOINT OUT_DIR``, ``convert-gguf SOURCE OUT_DIR``,
``serve MODEL_DIR``, ``report RUN_DIR`` and ``doctor [CONFIG]``.

An error in what the user gave (``ascent.errors.UserError``: a config key, a data row, a
missing file, an import path) prints its message alone and exits 2; ``--debug`` (or
``ASCENT_DEBUG=1``) adds the traceback. Anything else keeps its traceback.
"""

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ascent`` console script; returns the process exit code."""
    parser = argparse.ArgumentParser(prog="ascent", description=__doc__)
    parser.add_argument(
        "--debug", action="store_true", help="show tracebacks of user errors too (ASCENT_DEBUG=1)"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    quickstart = commands.add_parser("quickstart", help="SFT then GRPO on a tiny model, on a CPU")
    quickstart.add_argument("--seed", type=int, default=0)
    quickstart.add_argument(
        "--task",
        choices=["addition", "moe", "tools", "vision", "smollm2", "distill"],
        default="addition",
        help="addition: single-turn a+b; moe: the same on a tiny mixture of experts "
        "(Qwen3-MoE); tools: multi-turn a*b with a multiply tool; vision: a tiny Qwen2.5-VL "
        "names the colour in a picture; smollm2: GRPO on the real SmolLM2-135M-Instruct "
        "(make real-model); distill: the addition task taught by a teacher (on-policy "
        "distillation) beside GRPO alone",
    )
    quickstart.add_argument("--out", help="output directory (runs/quickstart[-TASK])")
    quickstart.add_argument(
        "--steps",
        type=int,
        help="GRPO steps (400 addition and moe, 100 tools, 200 vision, 30 smollm2, 100 distill)",
    )
    quickstart.add_argument(
        "overrides", nargs="*", help="dotted overrides of the GRPO run, e.g. rollout.engine=vllm"
    )
    sft = commands.add_parser("sft", help="supervised fine-tuning")
    sft.add_argument("config", help="YAML config file")
    sft.add_argument("overrides", nargs="*", help="dotted overrides, e.g. optim.lr=3e-4")
    rm = commands.add_parser("rm", help="reward-model training on preference pairs")
    rm.add_argument("config", help="YAML config file")
    rm.add_argument("overrides", nargs="*", help="dotted overrides, e.g. optim.lr=1e-5")
    train = commands.add_parser("train", help="reinforcement learning (PPO, GRPO, ...)")
    train.add_argument("config", help="YAML config file")
    train.add_argument("overrides", nargs="*", help="dotted overrides, e.g. algorithm.name=dapo")
    train.add_argument("--dump-rollouts", metavar="DIR", help="save each step's scored batch")
    train.add_argument("--replay-rollouts", metavar="DIR", help="train on saved batches")
    export = commands.add_parser("export", help="a transformers model from a checkpoint")
    export.add_argument("checkpoint", help="a checkpoint directory, or a run directory")
    export.add_argument("out_dir", help="where to write safetensors, config and tokenizer")
    export.add_argument(
        "--lora",
        choices=["merge", "adapter"],
        default="merge",
        help="LoRA runs: merge the adapters into the weights, or save the adapter alone",
    )
    convert = commands.add_parser(
        "convert-gguf", help="a transformers checkpoint directory from a GGUF file"
    )
    convert.add_argument(
        "source",
        help="a .gguf file, or a packaged model's name (smollm2: SmolLM2-135M-Instruct; "
        "gemma3-270m: Gemma 3 270M, base)",
    )
    convert.add_argument("out_dir", help="a new directory for config, safetensors and tokenizer")
    serve = commands.add_parser("serve", help="an OpenAI-compatible server over the native engine")
    if _command(sys.argv[1:] if argv is None else argv) == "serve":
        # The engine's flags come from its settings, which import torch (about 3 s): only
        # ``serve`` pays for them, not ``report`` or ``--help``.
        from ascent.rollout.serve_args import ADMIN_TOKEN_ENV, API_KEY_ENV, add_engine_arguments

        add_engine_arguments(serve)
        serve.add_argument(
            "--api-key",
            help="require `Authorization: Bearer KEY` on the /v1 routes, as vLLM's --api-key "
            f"(default: ${API_KEY_ENV})",
        )
        serve.add_argument(
            "--admin-token",
            help="require `Authorization: Bearer TOKEN` on the control routes (/update_weights, "
            "/pause, /sleep, ...); required unless --host is loopback (default: "
            f"${ADMIN_TOKEN_ENV}, which keeps it out of the process list)",
        )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument(
        "--served-model-name", help="the model name clients send (default: the path)"
    )
    serve.add_argument("--device", help="cpu, cuda, cuda:1 (default: cuda if available)")
    serve.add_argument("--seed", type=int, help="seed of requests that bring none")
    serve.add_argument("--request-timeout", type=float, default=600.0, help="seconds per request")
    service = commands.add_parser(
        "service", help="the Tinker API (training and its clients) over a base checkpoint"
    )
    service.add_argument(
        "source", help="a YAML config (ServiceConfig), or the base model's checkpoint directory"
    )
    service.add_argument(
        "overrides", nargs="*", help="dotted overrides, e.g. resources.devices_per_node=2"
    )
    service.add_argument("--name", help="the base model's name for clients (config: name)")
    service.add_argument("--root", help="where checkpoints go (config: root)")
    service.add_argument("--host", help="address to listen on (config: host)")
    service.add_argument("--port", type=int, help="port to listen on (config: port)")
    report = commands.add_parser(
        "report", help="an HTML page of a run's curves, sample generations and config"
    )
    report.add_argument("run_dir", help="the run's directory (trainer.run_dir)")
    report.add_argument("--out", help="where to write index.html and the PNGs (RUN_DIR/report)")
    doctor = commands.add_parser("doctor", help="check the machine, Ray, disk and the model")
    doctor.add_argument("config", nargs="?", help="a train or sft config to check")
    doctor.add_argument("overrides", nargs="*", help="dotted overrides")
    args = parser.parse_args(argv)
    from ascent.errors import UserError

    try:
        return _run(args)
    except UserError as error:
        if args.debug or os.environ.get("ASCENT_DEBUG", "") not in ("", "0"):
            raise
        _stop_ray_output()
        print(f"ascent {args.command}: {error}", file=sys.stderr)
        return 2


def _command(argv: list[str]) -> str | None:
    """The subcommand ``argv`` names: its first word that is not an option."""
    return next((word for word in argv if not word.startswith("-")), None)


def _run(args: argparse.Namespace) -> int:
    if args.command == "quickstart":
        return _quickstart(args)
    if args.command in ("sft", "rm"):
        return _supervised(args)
    if args.command == "export":
        return _export(args)
    if args.command == "convert-gguf":
        from ascent.models.gguf import convert_gguf

        print(f"converted {args.source} to {convert_gguf(args.source, args.out_dir)}")
        return 0
    if args.command == "serve":
        from ascent.rollout.serve_args import settings_from_args
        from ascent.serve import serve

        return serve(
            settings_from_args(args),
            host=args.host,
            port=args.port,
            served_model_name=args.served_model_name,
            device=args.device,
            seed=args.seed,
            request_timeout_s=args.request_timeout,
            api_key=args.api_key,
            admin_token=args.admin_token,
        )
    if args.command == "service":
        from ascent.service.config import load_service_config
        from ascent.service.main import run_service

        config = load_service_config(args.source, args.overrides)
        flags = {key: getattr(args, key) for key in ("name", "root", "host", "port")}
        return run_service(
            config.model_copy(update={k: v for k, v in flags.items() if v is not None})
        )
    if args.command == "report":
        from ascent.report import write_report

        print(write_report(args.run_dir, args.out))
        return 0
    if args.command == "doctor":
        from ascent.doctor import run_doctor

        return run_doctor(args.config, args.overrides)
    return _train(args)


def _export(args: argparse.Namespace) -> int:
    from ascent.trainer.checkpoints import CheckpointError
    from ascent.trainer.export import export_checkpoint

    try:
        used = export_checkpoint(args.checkpoint, args.out_dir, lora=args.lora)
    except (CheckpointError, ValueError) as error:
        print(f"ascent export: {error}", file=sys.stderr)
        return 2
    print(f"exported {used} to {args.out_dir}")
    return 0


def _supervised(args: argparse.Namespace) -> int:
    """``ascent sft`` or ``ascent rm``: the same loop, each with its config and report."""
    from ascent.config import load_config
    from ascent.trainer.rm import RMConfig, train_rm
    from ascent.trainer.sft import SFTConfig, train_sft

    kind, run = {"sft": (SFTConfig, train_sft), "rm": (RMConfig, train_rm)}[args.command]
    config = load_config(kind, args.config, args.overrides)
    try:
        result = run(config)
    except _run_failures() as error:
        return _failed(args.command, error, config.trainer.run_dir)
    for step, metrics in result["validation"][-1:]:
        print(f"validation after step {step}: {metrics}")
    return _stopped(result)


def _quickstart(args: argparse.Namespace) -> int:
    if args.task == "tools":
        from ascent.quickstart.tools_run import run_tools_quickstart as run

        out, steps = args.out or "runs/quickstart-tools", args.steps or 100
    elif args.task == "vision":
        from ascent.quickstart.vision_run import STEPS
        from ascent.quickstart.vision_run import run_vision_quickstart as run

        out, steps = args.out or "runs/quickstart-vision", args.steps or STEPS
    elif args.task == "smollm2":
        from ascent.quickstart.real import STEPS
        from ascent.quickstart.real import run_real_quickstart as run

        out, steps = args.out or "runs/quickstart-smollm2", args.steps or STEPS
    elif args.task == "distill":
        from ascent.quickstart.distill_run import STEPS
        from ascent.quickstart.distill_run import run_distill_quickstart as run

        out, steps = args.out or "runs/quickstart-distill", args.steps or STEPS
    elif args.task == "moe":
        from functools import partial

        from ascent.quickstart import run_quickstart

        run = partial(run_quickstart, model="moe")
        out, steps = args.out or "runs/quickstart-moe", args.steps or 400
    else:
        from ascent.quickstart import run_quickstart as run

        out, steps = args.out or "runs/quickstart", args.steps or 400
    return run(seed=args.seed, out_dir=out, steps=steps, overrides=tuple(args.overrides))


def _train(args: argparse.Namespace) -> int:
    from ascent.config import load_config
    from ascent.trainer.rl.config import RLConfig
    from ascent.trainer.rl.loop import train_rl
    from ascent.trainer.rl.plan import make_plan

    overrides = list(args.overrides)
    if args.dump_rollouts:
        overrides.append(f"trainer.dump_rollouts={args.dump_rollouts}")
    if args.replay_rollouts:
        overrides.append(f"trainer.replay_rollouts={args.replay_rollouts}")
    config = load_config(RLConfig, args.config, overrides)
    make_plan(config)  # batch sizes and names, checked before anything starts
    try:
        result = train_rl(config)
    except _run_failures() as error:
        return _failed(args.command, error, config.trainer.run_dir)
    for step, metrics in result["validation"][-1:]:
        print(f"validation after step {step}: {metrics}")
    return _stopped(result)


def _run_failures() -> tuple[type[BaseException], ...]:
    """What ends a run with a message instead of a traceback: the fault is named (role and
    rank, step, file) and the run can be resumed from its last checkpoint."""
    from ascent.controller import WorkerDied, WorkerError, WorkerTimeout
    from ascent.rewards.manager import RewardFailure
    from ascent.trainer.checkpoints import CheckpointError
    from ascent.trainer.faults import NonFiniteUpdates

    return (
        WorkerDied,
        WorkerError,
        WorkerTimeout,
        CheckpointError,
        NonFiniteUpdates,
        RewardFailure,
    )


def _failed(command: str, error: BaseException, run_dir: str) -> int:
    """The error, then always the same last line (where to resume), whatever failed: a
    worker that dies while a checkpoint is written fails the save, and says so above it."""
    from ascent.errors import UserError
    from ascent.trainer.checkpoints import Checkpoints

    if isinstance(error, UserError):  # a checkpoint the user named and that is not there
        raise error
    latest = Checkpoints(run_dir).latest()
    _stop_ray_output()
    print(f"ascent {command}: {error}", file=sys.stderr)
    if latest is not None:
        print(
            f"ascent {command}: the last checkpoint is {latest}; rerun the same command "
            "(trainer.resume=auto) to continue from it",
            file=sys.stderr,
        )
    return 1


def _stop_ray_output() -> None:
    """Shut down this process's Ray, so that its workers' last output (a dead rank's
    traceback, relayed by Ray's log monitor) comes before the message, not after it."""
    if "ray" not in sys.modules:  # never imported: no Ray to stop
        return
    import ray

    if ray.is_initialized():
        ray.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()


def _stopped(result: dict) -> int:
    """128 + the signal's number when a signal stopped the run (after saving), 3 when it
    stopped on a collapse (trainer.stop_on_collapse), else 0."""
    import signal

    if result.get("collapsed"):
        print(f"stopped on a collapse, checkpoint saved: {result['collapsed']}", file=sys.stderr)
        return 3
    if result.get("stopped"):
        print(f"stopped by {result['stopped']} after step {result['steps']}, checkpoint saved")
        return 128 + int(signal.Signals[result["stopped"]])
    return 0
