"""The ``ascent`` command line: ``ascent quickstart``, ``ascent sft CONFIG key=value ...``."""

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ascent`` console script; returns the process exit code."""
    parser = argparse.ArgumentParser(prog="ascent", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("quickstart", help="run the quickstart demo")
    sft = commands.add_parser("sft", help="supervised fine-tuning")
    sft.add_argument("config", help="YAML config file")
    sft.add_argument("overrides", nargs="*", help="dotted overrides, e.g. optim.lr=3e-4")
    args = parser.parse_args(argv)
    if args.command == "quickstart":
        from ascent.quickstart import run_quickstart

        return run_quickstart()
    if args.command == "sft":
        from ascent.config import ConfigError, load_config
        from ascent.trainer.sft import SFTConfig, train_sft

        try:
            config = load_config(SFTConfig, args.config, args.overrides)
        except ConfigError as error:
            print(f"ascent sft: {error}", file=sys.stderr)
            return 2
        result = train_sft(config)
        print(f"validation loss: {[round(loss, 4) for _, loss in result['val_loss']]}")
        return 0
    return 2
