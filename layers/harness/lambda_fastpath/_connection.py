"""The connections of :mod:`.httpd`: h11 fed from each socket, one ASGI request cycle at a time.

See :mod:`.httpd` for what the server does; this module is its per-connection half (the request's
``receive`` and ``send``, flow control, keep-alive, errors).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote

import h11

logger = logging.getLogger("lambda_fastpath.httpd")  # one logger for the whole server

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]

MAX_HEAD_BYTES = 64 * 1024
"""Largest request line plus headers (the adapter forwards the Function URL's request context)."""

BODY_BUFFER_BYTES = 64 * 1024
"""Request body received but not yet taken by the app above which reading pauses."""

ASGI = {"version": "3.0", "spec_version": "2.3"}
"""The ``asgi`` key of every scope."""


def _reason(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


class Cycle:
    """One request and its response: the ``receive`` and ``send`` of one ASGI call."""

    def __init__(self, connection: Connection, scope: Scope) -> None:
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


class Connection(asyncio.Protocol):
    """One client connection: h11 fed from the socket, one request cycle at a time."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        self.transport: asyncio.Transport | None = None
        self.cycle: Cycle | None = None
        self.lost = False
        self.stopping = False  # close once the current response is complete
        self._idle: asyncio.TimerHandle | None = None
        self._writable = asyncio.Event()
        self._writable.set()
        self._reading_paused = False

    # --- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """A client connected: Nagle off, registered with the server, idle timer armed."""
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # a chunk goes out when sent
        self.server.connections.add(self)
        self._arm_idle()

    def data_received(self, data: bytes) -> None:
        """Bytes from the client: into h11, then whatever events they complete."""
        self._disarm_idle()
        self.h11.receive_data(data)
        self._handle_events()
        if self.cycle is None and not self.lost:  # still waiting for a whole request line and headers
            self._arm_idle()

    def eof_received(self) -> bool | None:
        """The client closed its side."""
        return None  # the peer is gone (the adapter never half-closes): close, which loses the connection

    def connection_lost(self, exc: Exception | None) -> None:
        """The connection is gone: the current request sees ``http.disconnect``, its sends do nothing."""
        self.lost = True
        self._disarm_idle()
        self.server.connections.discard(self)
        self._writable.set()  # a send waiting on flow control returns (and does nothing)
        if self.cycle is not None:
            self.cycle.wakeup.set()

    def pause_writing(self) -> None:
        """The transport's buffer is full: ``send`` waits."""
        self._writable.clear()

    def resume_writing(self) -> None:
        """The transport takes data again."""
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
            "asgi": ASGI,
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
        self.cycle = Cycle(self, scope)
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


class Server:
    """The listening socket, its connections and the tasks of their requests."""

    def __init__(self, app: ASGIApp, address: tuple[str, int], keep_alive: float) -> None:
        self.app = app
        self.address = address
        self.keep_alive = keep_alive
        self.state: dict[str, Any] = {}  # the lifespan's state, copied into each request's scope
        self.connections: set[Connection] = set()
        self.tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coro: Awaitable[None]) -> None:
        """Run a request's app call as a task the server waits for when it stops."""
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
