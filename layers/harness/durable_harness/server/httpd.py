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
import logging
import signal
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote

import h11

__all__ = ["KEEP_ALIVE_SECONDS", "SHUTDOWN_GRACE_SECONDS", "run", "serve"]

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]

KEEP_ALIVE_SECONDS = 75.0
"""Idle time after which a keep-alive connection is closed (the adapter retires its own after 4 s)."""

SHUTDOWN_GRACE_SECONDS = 2.0
"""How long a stop waits for open responses before cancelling them."""

MAX_HEAD_BYTES = 64 * 1024
"""Largest request line plus headers (the adapter forwards the Function URL's request context)."""

BODY_BUFFER_BYTES = 64 * 1024
"""Request body received but not yet taken by the app above which reading pauses."""

_ASGI = {"version": "3.0", "spec_version": "2.3"}


def _reason(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


class _Cycle:
    """One request and its response: the ``receive`` and ``send`` of one ASGI call."""

    def __init__(self, connection: _Connection, scope: Scope) -> None:
        self.connection = connection
        self.scope = scope
        self.body = bytearray()
        self.more_body = True  # the request body has not ended yet
        self.body_ended_sent = False  # the app got the message with more_body False
        self.continue_expected = connection.h11.they_are_waiting_for_100_continue
        self.response_started = False
        self.response_complete = False
        self.wakeup = asyncio.Event()  # body data, end of body, disconnect or response complete

    async def run(self, app: ASGIApp) -> None:
        """Call the app; answer for it if it fails or returns without a complete response."""
        try:
            await app(self.scope, self.receive, self.send)
        except Exception:
            logger.exception("unhandled error in the app serving %s %s", self.scope["method"], self.scope["path"])
            await self._fail()
        else:
            if not self.response_complete and not self.connection.lost:  # (once lost, there is no one to answer)
                logger.error("the app returned without completing its response to %s %s",
                             self.scope["method"], self.scope["path"])  # fmt: skip
                await self._fail()

    async def _fail(self) -> None:
        if self.connection.lost:
            return
        if self.response_started:  # no way to say so in HTTP: end the connection mid-body
            self.connection.close()
            return
        body = b"Internal Server Error"
        headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()),
                   (b"connection", b"close")]  # fmt: skip
        await self.send({"type": "http.response.start", "status": 500, "headers": headers})
        await self.send({"type": "http.response.body", "body": body})

    async def receive(self) -> Message:
        """The request body as it arrives; then ``http.disconnect`` once the connection is lost
        (or the response is complete)."""
        connection = self.connection
        if self.continue_expected and not connection.lost and not self.response_started:
            self.continue_expected = False
            event = h11.InformationalResponse(status_code=100, headers=[], reason=b"Continue")
            connection.write(connection.h11.send(event))
        while True:
            if connection.lost or self.response_complete:
                return {"type": "http.disconnect"}
            if self.body or (not self.more_body and not self.body_ended_sent):
                message = {"type": "http.request", "body": bytes(self.body), "more_body": self.more_body}
                self.body.clear()
                self.body_ended_sent = not self.more_body
                connection.resume_reading()
                return message
            self.wakeup.clear()
            connection.resume_reading()
            await self.wakeup.wait()

    async def send(self, message: Message) -> None:
        """Write the response as the app sends it (waiting while the peer does not read)."""
        connection = self.connection
        await connection.writable()
        if connection.lost:
            return
        kind = message["type"]
        if not self.response_started:
            if kind != "http.response.start":
                raise RuntimeError(f"expected http.response.start, got {kind}")
            status = int(message["status"])
            self.response_started = True
            self.continue_expected = False
            event = h11.Response(status_code=status, headers=list(message.get("headers", [])), reason=_reason(status))
            connection.write(connection.h11.send(event))
        elif not self.response_complete:
            if kind != "http.response.body":
                raise RuntimeError(f"expected http.response.body, got {kind}")
            body = message.get("body", b"")
            if body and self.scope["method"] != "HEAD":
                connection.write(connection.h11.send(h11.Data(data=body)))
            if not message.get("more_body", False):
                self.response_complete = True
                self.wakeup.set()
                connection.write(connection.h11.send(h11.EndOfMessage()))
                connection.response_complete()
        else:
            raise RuntimeError(f"{kind} after the response was complete")


class _Connection(asyncio.Protocol):
    """One client connection: h11 fed from the socket, one request cycle at a time."""

    def __init__(self, server: _Server) -> None:
        self.server = server
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        self.transport: asyncio.Transport | None = None
        self.cycle: _Cycle | None = None
        self.lost = False
        self.stopping = False  # close once the current response is complete
        self._idle: asyncio.TimerHandle | None = None
        self._writable = asyncio.Event()
        self._writable.set()
        self._reading_paused = False

    # --- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # a chunk goes out when sent
        self.server.connections.add(self)
        self._arm_idle()

    def data_received(self, data: bytes) -> None:
        self._disarm_idle()
        self.h11.receive_data(data)
        self._handle_events()
        if self.cycle is None and not self.lost:  # still waiting for a whole request line and headers
            self._arm_idle()

    def eof_received(self) -> bool | None:
        return None  # the peer is gone (the adapter never half-closes): close, which loses the connection

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._disarm_idle()
        self.server.connections.discard(self)
        self._writable.set()  # a send waiting on flow control returns (and does nothing)
        if self.cycle is not None:
            self.cycle.wakeup.set()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # --- used by the cycle ---------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        """Write bytes h11 produced."""
        if self.transport is not None and not self.lost:
            self.transport.write(data)

    async def writable(self) -> None:
        """Return when the transport takes more data (or the connection is lost)."""
        await self._writable.wait()

    def resume_reading(self) -> None:
        """Read again, if reading was paused on a full body buffer."""
        if self._reading_paused and self.transport is not None and not self.lost:
            self._reading_paused = False
            self.transport.resume_reading()

    def close(self) -> None:
        """Close the connection (what was written is still flushed)."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def response_complete(self) -> None:
        """The response ended: close, or get ready for the next request on this connection."""
        if self.h11.our_state is h11.MUST_CLOSE or self.stopping:
            self.close()
            return
        if self.h11.their_state is h11.DONE:
            self._next_cycle()
        else:  # the rest of the request body is read and dropped first
            self.resume_reading()

    # --- internals -----------------------------------------------------------------------------

    def _next_cycle(self) -> None:
        self.h11.start_next_cycle()
        self.cycle = None
        self._arm_idle()
        self.resume_reading()
        self._handle_events()  # a pipelined request may be buffered already

    def _handle_events(self) -> None:
        while not self.lost:
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError as exc:
                self._bad_request(exc)
                return
            if event is h11.NEED_DATA:
                return
            if event is h11.PAUSED:  # a pipelined request: after the current response
                self._pause_reading()
                return
            if isinstance(event, h11.Request):
                self._disarm_idle()
                self._start(event)
            elif isinstance(event, h11.Data):
                cycle = self.cycle
                if cycle is not None and not cycle.response_complete:
                    cycle.body += event.data
                    cycle.wakeup.set()
                    if len(cycle.body) > BODY_BUFFER_BYTES:
                        self._pause_reading()
            elif isinstance(event, h11.EndOfMessage):
                cycle = self.cycle
                if cycle is not None and cycle.response_complete:
                    self._next_cycle()  # the body of an answered request, now read to its end
                    return
                if cycle is not None:
                    cycle.more_body = False
                    cycle.wakeup.set()
            elif isinstance(event, h11.ConnectionClosed):
                self.close()
                return

    def _start(self, request: h11.Request) -> None:
        assert self.transport is not None
        raw_path, _, query = request.target.partition(b"?")
        try:
            path = unquote(raw_path.decode("ascii"))
        except UnicodeDecodeError:
            self._bad_request(ValueError("the request target is not ASCII"))
            return
        scope: Scope = {
            "type": "http",
            "asgi": _ASGI,
            "http_version": request.http_version.decode("ascii"),
            "server": self.server.address,
            "client": tuple(self.transport.get_extra_info("peername") or ("", 0))[:2],
            "scheme": "http",
            "method": request.method.decode("ascii"),
            "root_path": "",
            "path": path,
            "raw_path": raw_path,
            "query_string": query,
            "headers": list(request.headers),  # h11 gives lower-case names
            "state": dict(self.server.state),
        }
        self.cycle = _Cycle(self, scope)
        self.server.spawn(self.cycle.run(self.server.app))

    def _bad_request(self, exc: Exception) -> None:
        logger.warning("invalid HTTP request: %s", exc)
        started = self.cycle is not None and self.cycle.response_started
        if self.h11.our_state in (h11.IDLE, h11.SEND_RESPONSE) and not started:
            body = b"Invalid HTTP request."
            headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()),
                       (b"connection", b"close")]  # fmt: skip
            try:
                self.write(self.h11.send(h11.Response(status_code=400, headers=headers, reason=b"Bad Request")))
                self.write(self.h11.send(h11.Data(data=body)) + self.h11.send(h11.EndOfMessage()))
            except h11.LocalProtocolError:
                pass
        self.close()

    def _pause_reading(self) -> None:
        if not self._reading_paused and self.transport is not None and not self.lost:
            self._reading_paused = True
            self.transport.pause_reading()

    def _arm_idle(self) -> None:
        self._disarm_idle()
        self._idle = asyncio.get_running_loop().call_later(self.server.keep_alive, self._idle_expired)

    def _disarm_idle(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    def _idle_expired(self) -> None:
        if self.cycle is None:
            self.close()

    def shutdown(self) -> None:
        """Stop: close now if idle, else after the current response."""
        self.stopping = True
        if self.cycle is None:
            self.close()


class _Server:
    """The listening socket, its connections and the tasks of their requests."""

    def __init__(self, app: ASGIApp, address: tuple[str, int], keep_alive: float) -> None:
        self.app = app
        self.address = address
        self.keep_alive = keep_alive
        self.state: dict[str, Any] = {}  # the lifespan's state, copied into each request's scope
        self.connections: set[_Connection] = set()
        self.tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


class _Lifespan:
    """The ASGI lifespan protocol around the server's life."""

    def __init__(self, app: ASGIApp, state: dict[str, Any]) -> None:
        self.app = app
        self.state = state
        self.inbox: asyncio.Queue[Message] = asyncio.Queue()
        self.outbox: asyncio.Queue[Message] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        scope = {"type": "lifespan", "asgi": _ASGI, "state": self.state}
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
    server = _Server(app, (host, port), keep_alive)
    lifespan = _Lifespan(app, server.state)
    await lifespan.startup()
    listener = await loop.create_server(lambda: _Connection(server), host, port, reuse_address=True)
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
