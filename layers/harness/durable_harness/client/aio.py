"""The asynchronous chat client (``httpx.AsyncClient``): the same API as :mod:`.sync`, awaited."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, Self

import httpx

from ..protocol.ui_chunks import UIMessageChunk
from ._common import (
    DEFAULT_TIMEOUT,
    DEFAULT_URL,
    ApprovalAnswers,
    ConversationBase,
    Messages,
    approvals_body,
    base_url,
    chat_body,
    request_headers,
    run_path,
)
from ._cursor import ChunkError, ReconnectEvent, RetryPolicy
from ._requests import StreamBase, TurnBase, decode_json
from .errors import NetworkError, describe_transport_error

Pair = tuple[dict[str, Any], UIMessageChunk]


class _AsyncChunks(AsyncIterator[UIMessageChunk]):
    """What both async streams add to iterating: :meth:`collect`, and ``async with`` that closes them."""

    async def collect(self) -> list[UIMessageChunk]:
        """Every remaining chunk, up to ``finish`` (a turn's: to the turn's end)."""
        return [chunk async for chunk in self]

    async def aclose(self) -> None:
        """Stop reading."""
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncChatClient:
    """The asynchronous :class:`~durable_harness.client.ChatClient`: same arguments, except that
    ``sleep`` is awaited (default :func:`asyncio.sleep`) and ``on_reconnect`` may be async."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        token: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        on_reconnect: Callable[[ReconnectEvent], Awaitable[None] | None] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        """A client of the server at ``url``."""
        if transport is not None and http_client is not None:
            raise ValueError("pass either transport or http_client, not both")
        self.url = base_url(url)
        self.headers = request_headers(token, headers)
        self.retry = retry or RetryPolicy()
        self.on_reconnect = on_reconnect
        self._sleep = sleep
        self._owns_http = http_client is None
        self._http = http_client or httpx.AsyncClient(timeout=timeout, transport=transport)

    def send(
        self, messages: Messages, *, chat_id: str | None = None, body: Mapping[str, Any] | None = None
    ) -> AsyncChunkStream:
        """Start a turn and stream the reply (see :meth:`ChatClient.send`); iterate with ``async for``."""
        return AsyncChunkStream(self, post=chat_body(messages, chat_id, body))

    def resume(self, run_id: str, start_index: int = 0, *, drop_orphans: bool = True) -> AsyncChunkStream:
        """Follow a run's stream from ``start_index`` (negative: from the tail)."""
        return AsyncChunkStream(self, run_id=run_id, start_index=start_index, drop_orphans=drop_orphans)

    def conversation(
        self,
        *,
        chat_id: str | None = None,
        messages: Sequence[Mapping[str, Any]] | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> AsyncConversation:
        """An :class:`AsyncConversation` over this client."""
        return AsyncConversation(self, chat_id=chat_id, messages=messages, body=body)

    async def run_status(self, run_id: str) -> dict[str, Any]:
        """``GET /api/runs/{run_id}``."""
        return await self._json("GET", run_path(run_id))

    async def cancel(self, run_id: str) -> dict[str, Any]:
        """``POST /api/runs/{run_id}/cancel``."""
        return await self._json("POST", run_path(run_id, "cancel"))

    async def approve_run(self, run_id: str, answers: ApprovalAnswers) -> dict[str, Any]:
        """``POST /api/runs/{run_id}/approvals``; returns the continuation run."""
        return await self._json("POST", run_path(run_id, "approvals"), approvals_body(answers))

    async def health(self) -> dict[str, Any]:
        """``GET /health``."""
        return await self._json("GET", "/health")

    async def _json(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        url = self.url + path
        try:
            response = await self._http.request(method, url, json=body, headers=self.headers)
        except httpx.RequestError as exc:
            raise NetworkError(describe_transport_error(exc, url)) from None
        return decode_json(response)

    async def aclose(self) -> None:
        """Close the connection pool (unless it was passed in)."""
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncChatClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncChunkStream(StreamBase, _AsyncChunks):
    """The asynchronous :class:`~durable_harness.client.ChunkStream` (``async for``; ``aclose()``)."""

    def __init__(
        self, client: AsyncChatClient, *, post: dict[str, Any] | None = None, run_id: str | None = None,
        start_index: int = 0, drop_orphans: bool = True,
    ) -> None:  # fmt: skip
        """A stream that starts with the POST ``post``, or with ``GET`` of ``run_id`` at ``start_index``."""
        super().__init__(client, post=post, run_id=run_id, start_index=start_index, drop_orphans=drop_orphans)
        self._client = client
        self._pairs = self._run()

    async def __anext__(self) -> UIMessageChunk:
        return (await self._pairs.__anext__())[1]

    async def next_pair(self) -> Pair:
        """The next chunk as ``(JSON object as received, typed chunk)``; StopAsyncIteration at the end."""
        return await self._pairs.__anext__()

    async def aclose(self) -> None:
        """Stop reading (closes the open response)."""
        await self._pairs.aclose()

    async def _run(self) -> AsyncGenerator[Pair, None]:
        client, cursor = self._client, self.cursor
        initial = True
        while True:
            request = self._request(client._http, client.url, client.headers, initial=initial)
            error: str | None = None
            try:
                response = await client._http.send(request, stream=True)
            except httpx.RequestError as exc:
                error = self._transport_failure(exc, request, initial=initial)
            else:
                try:
                    if not response.is_success:
                        error = self._status_failure(response, await response.aread(), initial=initial)
                    else:
                        self._opened(response, initial=initial)
                        async for data in response.aiter_bytes():
                            for pair in cursor.feed(data):  # which stops at `finish`
                                yield pair
                            if cursor.finished:
                                return
                        for pair in cursor.eof():
                            yield pair
                        if cursor.finished:
                            return
                except httpx.RequestError as exc:
                    error = describe_transport_error(exc, str(request.url))
                except ChunkError as exc:
                    error = str(exc)
                finally:
                    await response.aclose()
            event = cursor.ended(error, initial=initial)
            initial = False
            if client.on_reconnect is not None:
                result = client.on_reconnect(event)
                if result is not None:
                    await result
            if event.delay > 0:
                await client._sleep(event.delay)


class AsyncConversation(ConversationBase["AsyncChatClient", "AsyncTurnStream"]):
    """The asynchronous :class:`~durable_harness.client.Conversation`."""

    def _turn(self, messages: list[dict[str, Any]]) -> AsyncTurnStream:
        return AsyncTurnStream(
            self.client, self.state, self.client.send(messages, chat_id=self.chat_id, body=self.body)
        )

    def _empty_turn(self) -> AsyncTurnStream:
        return AsyncTurnStream(self.client, self.state, None)


class AsyncTurnStream(TurnBase[AsyncChunkStream], _AsyncChunks):
    """The chunks of one conversation turn (``async for``), applied to the conversation as they arrive."""

    async def __anext__(self) -> UIMessageChunk:
        if self.stream is None:
            raise StopAsyncIteration
        try:
            raw, chunk = await self.stream.next_pair()
        except StopAsyncIteration:
            self._state.end()
            raise
        # Any other error leaves the turn open: resume() continues it into the same message.
        self._state.run_id = self.stream.run_id
        self._state.apply(raw)
        return chunk

    async def aclose(self) -> None:
        """Stop reading; what arrived so far stays in the history."""
        if self.stream is not None:
            await self.stream.aclose()
        self._state.end()
