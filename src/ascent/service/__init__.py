"""The Tinker API over ascent: training clients of the official ``tinker`` SDK (and the
``tinker-cookbook`` loops written against it) run on ascent's engine (``ascent service``)."""
