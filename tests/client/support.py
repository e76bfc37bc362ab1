"""Helpers of the client tests: httpx transports that cut response bodies, and a server that
always answers with an empty stream."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

CutMode = Literal["eof", "mid", "error", "interrupt"]
"""How a body is cut after k events: a clean EOF at an event boundary, a clean EOF halfway
through the next event, a network error halfway through it, or a Ctrl-C (KeyboardInterrupt)
while reading it."""


class _Cutter:
    """Splits a byte stream into SSE events and stops after ``after`` data events."""

    def __init__(self, after: int, mode: CutMode) -> None:
        self.after = after
        self.mode = mode
        self.buffer = b""
        self.events = 0
        self.cut = False

    def feed(self, data: bytes) -> list[bytes]:
        out = []
        self.buffer += data
        while not self.cut:
            end = self.buffer.find(b"\n\n")
            if end < 0:
                break
            event, self.buffer = self.buffer[: end + 2], self.buffer[end + 2 :]
            is_chunk = event.startswith(b"data: ") and event != b"data: [DONE]\n\n"
            if is_chunk and self.events == self.after:
                self.cut = True
                if self.mode != "eof":
                    out.append(event[: len(event) // 2])
                break
            out.append(event)
            self.events += is_chunk
        return out

    def check(self) -> None:
        if self.cut and self.mode == "error":
            raise httpx.ReadError("connection reset by the test")
        if self.cut and self.mode == "interrupt":
            raise KeyboardInterrupt


class _CutStream(httpx.SyncByteStream):
    def __init__(self, inner: httpx.SyncByteStream, cutter: _Cutter) -> None:
        self.inner = inner
        self.cutter = cutter

    def __iter__(self) -> Iterator[bytes]:
        for data in self.inner:
            yield from self.cutter.feed(data)
            if self.cutter.cut:
                self.cutter.check()
                return
        if self.cutter.buffer:
            yield self.cutter.buffer

    def close(self) -> None:
        self.inner.close()


class _AsyncCutStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, cutter: _Cutter) -> None:
        self.inner = inner
        self.cutter = cutter

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for data in self.inner:
            for piece in self.cutter.feed(data):
                yield piece
            if self.cutter.cut:
                self.cutter.check()
                return
        if self.cutter.buffer:
            yield self.cutter.buffer

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclass
class _Cuts:
    cuts: list[tuple[int, CutMode]]
    requests: list[httpx.Request] = field(default_factory=list)

    def plan(self, request: httpx.Request, response: httpx.Response) -> _Cutter | None:
        self.requests.append(request)
        if self.cuts and response.status_code == 200:
            after, mode = self.cuts.pop(0)
            return _Cutter(after, mode)
        return None

    def start_indexes(self) -> list[str]:
        """The ``startIndex`` of every GET made, in order."""
        return [r.url.params["startIndex"] for r in self.requests if r.method == "GET"]


class CuttingTransport(httpx.BaseTransport):
    """The real HTTP transport, except that the n-th 200 response's body is cut as ``cuts[n]`` says
    (``(k, mode)``: after k chunk events). Records every request."""

    def __init__(self, cuts: list[tuple[int, CutMode]]) -> None:
        self.inner = httpx.HTTPTransport()
        self.log = _Cuts(list(cuts))

    @property
    def requests(self) -> list[httpx.Request]:
        return self.log.requests

    def start_indexes(self) -> list[str]:
        return self.log.start_indexes()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        cutter = self.log.plan(request, response)
        if cutter is None:
            return response
        assert isinstance(response.stream, httpx.SyncByteStream)
        return httpx.Response(
            response.status_code, headers=response.headers, stream=_CutStream(response.stream, cutter),
            extensions=response.extensions,
        )  # fmt: skip

    def close(self) -> None:
        self.inner.close()


class AsyncCuttingTransport(httpx.AsyncBaseTransport):
    """The asynchronous :class:`CuttingTransport`."""

    def __init__(self, cuts: list[tuple[int, CutMode]]) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.log = _Cuts(list(cuts))

    @property
    def requests(self) -> list[httpx.Request]:
        return self.log.requests

    def start_indexes(self) -> list[str]:
        return self.log.start_indexes()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        cutter = self.log.plan(request, response)
        if cutter is None:
            return response
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(
            response.status_code, headers=response.headers, stream=_AsyncCutStream(response.stream, cutter),
            extensions=response.extensions,
        )  # fmt: skip

    async def aclose(self) -> None:
        await self.inner.aclose()


class EmptyStreamApp:
    """An ASGI app whose chat POST and stream GETs all answer ``200`` with an empty SSE body
    (``get_status`` changes the GETs' status). Records ``(method, path, query)`` of each request."""

    RUN_ID = "wrun_" + "e" * 26

    def __init__(self, get_status: int = 200) -> None:
        self.get_status = get_status
        self.requests: list[tuple[str, str, str]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        method, path = scope["method"], scope["path"]
        self.requests.append((method, path, scope["query_string"].decode()))
        if method == "POST":
            while (await receive()).get("more_body"):
                pass
        status = self.get_status if method == "GET" else 200
        headers = [(b"content-type", b"text/event-stream"), (b"x-workflow-run-id", self.RUN_ID.encode()),
                   (b"x-workflow-stream-tail-index", b"-1")]  # fmt: skip
        body = b""
        if status != 200:
            body = json.dumps({"error": {"code": "unavailable", "message": "try again later"}}).encode()
            headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
