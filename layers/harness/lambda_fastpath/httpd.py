"""A small HTTP/1.1 server for an ASGI app: what the chat function runs behind the Lambda Web Adapter.

The adapter needs little of a server: HTTP/1.1 on loopback with keep-alive, request bodies (with
``Content-Length`` or chunked), responses streamed as they are sent (chunked), and a connection
the adapter drops (its client went away) reaching the app as ``http.disconnect``. uvicorn does
all that and more, at a price in the function's cold start: its package imports click, its
reloader and worker supervisors and its logging configuration whatever is used, about 25 ms of
CPU (``bench/cold_start.py``). This module is the part the function needs, on h11, the HTTP/1.1
state machine uvicorn itself uses, so parsing and framing are h11's, not ours:

* a request's body reaches the app as it arrives (reading pauses above 64 KiB not yet received
  by the app), and an ``Expect: 100-continue`` is answered when the app first asks for the body;
* responses go out as the app sends them, chunked unless the app gives a ``content-length``
  (close-delimited for an HTTP/1.0 client), with the transport's flow control: ``send`` waits
  while the peer is not reading;
* once the connection is lost, ``receive`` returns ``http.disconnect`` at once and ``send``
  does nothing (as in uvicorn);
* an app error before the response starts is a 500 and the connection closes; after it started,
  the connection closes (the client sees an unterminated body, which the chat client resumes);
* a malformed request is a 400, then the connection closes;
* a keep-alive connection closes after :data:`KEEP_ALIVE_SECONDS` idle: longer than the
  adapter's pool keeps an idle connection (4 s), so that the adapter, never the server, retires
  one (a server closing first races the adapter's next request on it);
* the ASGI lifespan protocol (startup must succeed); SIGTERM or SIGINT stop accepting, close
  idle connections, give open responses :data:`SHUTDOWN_GRACE_SECONDS`, then the lifespan's
  shutdown.

Locally, ``durable-harness serve`` (``make dev``) still runs uvicorn.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from typing import Any

from ._connection import ASGI, ASGIApp, Connection, Message, Server

__all__ = ["KEEP_ALIVE_SECONDS", "SHUTDOWN_GRACE_SECONDS", "ASGIApp", "run", "serve"]

KEEP_ALIVE_SECONDS = 75.0
"""Idle time after which a keep-alive connection is closed (the adapter retires its own after 4 s)."""

SHUTDOWN_GRACE_SECONDS = 2.0
"""How long a stop waits for open responses before cancelling them."""


class _Lifespan:
    """The ASGI lifespan protocol around the server's life."""

    def __init__(self, app: ASGIApp, state: dict[str, Any]) -> None:
        self.app = app
        self.state = state
        self.inbox: asyncio.Queue[Message] = asyncio.Queue()
        self.outbox: asyncio.Queue[Message] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        scope = {"type": "lifespan", "asgi": ASGI, "state": self.state}
        try:
            await self.app(scope, self.inbox.get, self.outbox.put)
        finally:
            await self.outbox.put({"type": "lifespan.returned"})

    async def _exchange(self, phase: str) -> None:
        await self.inbox.put({"type": f"lifespan.{phase}"})
        reply = await self.outbox.get()
        if reply["type"] == f"lifespan.{phase}.complete":
            return
        if self.task is not None and self.task.done() and self.task.exception() is not None:
            raise RuntimeError(f"the app's lifespan {phase} raised") from self.task.exception()
        raise RuntimeError(f"the app's lifespan {phase} failed: {reply.get('message') or reply['type']}")

    async def startup(self) -> None:
        """Run the app's startup; raises if it fails."""
        self.task = asyncio.ensure_future(self._run())
        await self._exchange("startup")

    async def shutdown(self) -> None:
        """Run the app's shutdown (unless its lifespan has returned already)."""
        if self.task is None or self.task.done():
            return
        try:
            await self._exchange("shutdown")
        finally:
            await asyncio.gather(self.task, return_exceptions=True)


async def serve(
    app: ASGIApp,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    stop: asyncio.Event | None = None,
    ready: Callable[[tuple[str, int]], None] | None = None,
    keep_alive: float = KEEP_ALIVE_SECONDS,
    shutdown_grace: float = SHUTDOWN_GRACE_SECONDS,
) -> None:
    """Serve ``app`` on ``host:port`` until ``stop`` is set (port 0: any free port; ``ready`` is
    called with the address once listening)."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    server = Server(app, (host, port), keep_alive)
    lifespan = _Lifespan(app, server.state)
    await lifespan.startup()
    listener = await loop.create_server(lambda: Connection(server), host, port, reuse_address=True)
    server.address = listener.sockets[0].getsockname()[:2]
    if ready is not None:
        ready(server.address)
    try:
        await stop.wait()
    finally:
        listener.close()
        for connection in list(server.connections):
            connection.shutdown()
        if server.tasks:
            _, pending = await asyncio.wait(set(server.tasks), timeout=shutdown_grace)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        for connection in list(server.connections):
            connection.close()
        await listener.wait_closed()
        await lifespan.shutdown()


def run(app: ASGIApp, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve ``app`` until SIGTERM or SIGINT (the chat function's process)."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(app, host, port, stop=stop)

    asyncio.run(main())
