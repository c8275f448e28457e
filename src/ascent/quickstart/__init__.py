"""``make quickstart``: a tiny model learns 2-digit addition, first a little by SFT, then by
GRPO, on a CPU in a few minutes, with nothing downloaded."""

from ascent.quickstart.run import run_quickstart

__all__ = ["run_quickstart"]
