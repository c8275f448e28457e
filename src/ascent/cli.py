"""The ``ascent`` command line. Subcommands grow with the library."""

import argparse


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ascent`` console script; returns the process exit code."""
    parser = argparse.ArgumentParser(prog="ascent", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("quickstart", help="run the quickstart demo")
    args = parser.parse_args(argv)
    if args.command == "quickstart":
        from ascent.quickstart import run_quickstart

        return run_quickstart()
    return 2
