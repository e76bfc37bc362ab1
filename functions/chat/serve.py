"""The chat function's process: ``app.app`` served over HTTP/1.1 on loopback for the Lambda Web Adapter.

``run.sh`` starts it (``python -m serve``). The adapter waits for ``GET /health`` to answer, then
forwards each Function URL request to ``127.0.0.1:$AWS_LWA_PORT`` and streams the response back;
the server is :mod:`lambda_fastpath.httpd` (what the adapter needs of uvicorn, without the
rest of uvicorn's import).

Loading the app (the library, its pydantic models, its AWS clients) makes a few hundred thousand
objects that live as long as the process. With the garbage collector on, its collections during
the load walk them again and again, for nothing: about a sixth of the load's CPU
(``bench/cold_start.py``). So the collector is off while the app loads; then what was loaded is
frozen (``gc.freeze``: moved where no collection looks, so later collections do not pay for it
either) and the collector is switched back on for the objects of the requests.
"""

from __future__ import annotations

import gc
import os
from typing import Any


def load() -> Any:
    """The chat app and its server, loaded with the garbage collector off, then frozen."""
    gc.disable()
    try:
        from durable_harness.errors import ApprovalSecretError, SecretError, SettingsError

        try:
            from app import app
        except (ApprovalSecretError, SecretError, SettingsError) as exc:  # configuration to fix: one line
            raise SystemExit(f"chat function: {exc}") from None
        from lambda_fastpath import httpd  # noqa: F401  (loaded, and frozen, with the rest)
    finally:
        gc.freeze()
        gc.enable()
    return app


def main() -> None:
    """Serve the chat app until the sandbox stops it (SIGTERM)."""
    app = load()
    from lambda_fastpath.httpd import run

    run(app, host="127.0.0.1", port=int(os.environ.get("AWS_LWA_PORT", "8000")))


if __name__ == "__main__":
    main()
