"""The ``ascent`` command line: ``quickstart``, ``sft CONFIG key=value ...`` and
``train CONFIG key=value ...``."""

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ascent`` console script; returns the process exit code."""
    parser = argparse.ArgumentParser(prog="ascent", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    quickstart = commands.add_parser("quickstart", help="SFT then GRPO on a tiny model, on a CPU")
    quickstart.add_argument("--seed", type=int, default=0)
    quickstart.add_argument("--out", default="runs/quickstart", help="output directory")
    quickstart.add_argument("--steps", type=int, default=300, help="GRPO steps")
    sft = commands.add_parser("sft", help="supervised fine-tuning")
    sft.add_argument("config", help="YAML config file")
    sft.add_argument("overrides", nargs="*", help="dotted overrides, e.g. optim.lr=3e-4")
    train = commands.add_parser("train", help="reinforcement learning (PPO, GRPO, ...)")
    train.add_argument("config", help="YAML config file")
    train.add_argument("overrides", nargs="*", help="dotted overrides, e.g. algorithm.name=dapo")
    train.add_argument("--dump-rollouts", metavar="DIR", help="save each step's scored batch")
    train.add_argument("--replay-rollouts", metavar="DIR", help="train on saved batches")
    args = parser.parse_args(argv)
    if args.command == "quickstart":
        from ascent.quickstart import run_quickstart

        return run_quickstart(seed=args.seed, out_dir=args.out, steps=args.steps)
    if args.command == "sft":
        return _sft(args)
    return _train(args)


def _config(kind: type, args: argparse.Namespace, overrides: list[str]) -> object | None:
    from ascent.config import ConfigError, load_config

    try:
        return load_config(kind, args.config, overrides)
    except ConfigError as error:
        print(f"ascent {args.command}: {error}", file=sys.stderr)
        return None


def _sft(args: argparse.Namespace) -> int:
    from ascent.trainer.sft import SFTConfig, train_sft

    config = _config(SFTConfig, args, args.overrides)
    if config is None:
        return 2
    result = train_sft(config)
    print(f"validation loss: {[round(loss, 4) for _, loss in result['val_loss']]}")
    return 0


def _train(args: argparse.Namespace) -> int:
    from ascent.trainer.rl.config import RLConfig, make_plan
    from ascent.trainer.rl.loop import train_rl

    overrides = list(args.overrides)
    if args.dump_rollouts:
        overrides.append(f"trainer.dump_rollouts={args.dump_rollouts}")
    if args.replay_rollouts:
        overrides.append(f"trainer.replay_rollouts={args.replay_rollouts}")
    config = _config(RLConfig, args, overrides)
    if config is None:
        return 2
    try:
        make_plan(config)  # batch sizes and names, checked before anything starts
    except ValueError as error:
        print(f"ascent train: {error}", file=sys.stderr)
        return 2
    result = train_rl(config)
    for step, metrics in result["validation"][-1:]:
        print(f"validation after step {step}: {metrics}")
    return 0
