"""Entry point of the chat function: the ASGI app served by uvicorn (behind the Lambda Web Adapter).

Locally (and until the AWS adapters are configured) it serves the local kit: embedded storage in
``DATA_DIR`` and the agent named by ``AGENT``.
"""

from __future__ import annotations

import os

from durable_harness.cli import DEFAULT_AGENT, load_agent
from durable_harness.server.local import build_local_kit

app = build_local_kit(
    load_agent(os.environ.get("AGENT", DEFAULT_AGENT)),
    os.environ.get("DATA_DIR", "/tmp/durable-harness"),
    slice_seconds=float(os.environ.get("SLICE_SECONDS", "600")),
).app
