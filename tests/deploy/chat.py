"""Driving the chat function's ASGI app with Function URL events, as the Lambda Web Adapter does.

The adapter turns a Function URL request (payload format 2.0, as in ``events/chat-*.json``)
into an HTTP request to the app on ``AWS_LWA_PORT`` and streams the response back. Here the
request goes to the ASGI app directly: same method, path, query string, headers and body.
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from durable_harness.protocol.sse import SSEParser

from .cfn import ROOT
from .iam import ACTOR

EVENTS = ROOT / "events"


def sample_event(name: str) -> dict[str, Any]:
    """One of the sample events in ``events/`` (shared with ``sam local invoke -e``)."""
    event: dict[str, Any] = json.loads((EVENTS / name).read_text())
    return event


@dataclass
class Response:
    """What the client got."""

    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    disconnect_seen: bool = False
    """The app has received ``http.disconnect`` (what it sends after that, a gone client never gets)."""

    def chunks(self) -> list[dict[str, Any]]:
        """The UI message chunks of an SSE body ([DONE] and comments skipped)."""
        return [json.loads(data) for data in SSEParser().feed(self.body) if data != "[DONE]"]

    def json(self) -> Any:
        """The body as JSON."""
        return json.loads(self.body)


def with_path(event: dict[str, Any], path: str, query: str = "") -> dict[str, Any]:
    """The event with another path (and query string)."""
    event = json.loads(json.dumps(event))
    event["rawPath"] = event["requestContext"]["http"]["path"] = path
    event["rawQueryString"] = query
    if query:
        event["queryStringParameters"] = dict(kv.split("=", 1) for kv in query.split("&"))
    else:
        event.pop("queryStringParameters", None)
    return event


async def call(
    app: Any,
    event: dict[str, Any],
    *,
    response: Response | None = None,
    disconnect: asyncio.Event | None = None,
    timeout: float = 30,
) -> Response:
    """Serve one Function URL event with the ASGI ``app``; the whole (streamed) response.

    ``response`` is filled as the response streams (a test watches it while the call runs);
    setting ``disconnect`` makes the client go away (the app receives ``http.disconnect``).
    """
    http = event["requestContext"]["http"]
    raw = event.get("body") or ""
    body = base64.b64decode(raw) if event.get("isBase64Encoded") else raw.encode()
    headers = [(k.lower().encode(), str(v).encode()) for k, v in event.get("headers", {}).items()]
    context = json.dumps(event["requestContext"]).encode()
    headers.append((b"x-amzn-request-context", context))  # as the adapter forwards it
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": http["method"],
        "scheme": "https",
        "path": event["rawPath"],
        "raw_path": event["rawPath"].encode(),
        "query_string": event.get("rawQueryString", "").encode(),
        "root_path": "",
        "headers": headers,
        "client": (http.get("sourceIp", "127.0.0.1"), 0),
        "server": ("127.0.0.1", 8000),
    }
    response = response if response is not None else Response()
    sent = False
    gone = disconnect if disconnect is not None else asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()  # the client stays connected until the test says otherwise
        response.disconnect_seen = True
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            response.status = message["status"]
            response.headers = {k.decode().lower(): v.decode() for k, v in message.get("headers", [])}
        elif message["type"] == "http.response.body":
            response.body += message.get("body", b"")

    # The app's AWS calls are the chat function's (for the IAM check).
    ctx = contextvars.copy_context()
    ctx.run(ACTOR.set, "ChatFunction")
    await asyncio.wait_for(asyncio.get_running_loop().create_task(app(scope, receive, send), context=ctx), timeout)
    return response


def load_chat_app(path: Path = ROOT / "functions" / "chat" / "app.py") -> Any:
    """The chat function's ``app`` module object, imported fresh (it builds the app at import)."""
    import importlib.util
    import uuid

    spec = importlib.util.spec_from_file_location(f"deployfn_chat_{uuid.uuid4().hex}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.app
