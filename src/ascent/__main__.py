"""``python -m ascent ...`` is the ``ascent`` command."""

import sys

from ascent.cli import main

sys.exit(main())
