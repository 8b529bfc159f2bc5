"""``python -m attnlib.distributed``: the check of ring attention against dense attention."""

import sys

from .cli import main

sys.exit(main())
