"""``python -m durable_harness``: the command line."""

from .cli import main

main()
