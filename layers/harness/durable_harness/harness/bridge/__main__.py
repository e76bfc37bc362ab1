"""``python -m durable_harness.harness.bridge``: see :mod:`.cli`."""

import sys

from .cli import main

sys.exit(main())
