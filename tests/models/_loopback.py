"""A recorded model stream served over real HTTP on loopback, for what only a real connection
shows (whether the provider's HTTP client keeps its connection from one call to the next)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tests.support import serve


class RecordedSSE:
    """An ASGI app answering every POST with ``body`` as a chunked ``text/event-stream``, in
    pieces, its last (empty) piece written apart; ``clients`` holds each request's client
    ``(host, port)``: one port per TCP connection."""

    def __init__(self, body: bytes, piece: int = 97) -> None:
        self.body = body
        self.piece = piece
        self.clients: list[tuple[str, int]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        self.clients.append(tuple(scope["client"]))  # type: ignore[arg-type]
        while (await receive()).get("more_body"):
            pass
        headers = [(b"content-type", b"text/event-stream; charset=utf-8")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for i in range(0, len(self.body), self.piece):
            await send({"type": "http.response.body", "body": self.body[i : i + self.piece], "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


@contextmanager
def recorded_server(body: bytes) -> Iterator[tuple[str, RecordedSSE]]:
    """Serve :class:`RecordedSSE` of ``body`` (uvicorn, loopback); yields its URL and the app."""
    app = RecordedSSE(body)
    with serve(app) as url:
        yield url, app


async def assert_two_calls_share_a_connection(
    model: Any, server: RecordedSSE, call: Callable[[], Awaitable[list[str]]]
) -> None:
    """Call the model twice through ``call`` (then close it): the two streams are the same and end
    with ``finish``, and their requests came over one TCP connection."""
    try:
        first, second = await call(), await call()
    finally:
        await model.aclose()
    assert first == second and first[-1].startswith('{"type":"finish"')
    assert len(server.clients) == 2 and len(set(server.clients)) == 1, server.clients
