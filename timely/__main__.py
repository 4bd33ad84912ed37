"""``python -m timely``: the command line (see :mod:`timely.cli`)."""

import sys

from timely.cli import main

sys.exit(main())
