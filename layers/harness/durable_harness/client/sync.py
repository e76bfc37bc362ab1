"""The synchronous chat client (``httpx.Client``): streams, resumes, the run API, conversations."""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
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


class _Chunks(Iterator[UIMessageChunk]):
    """What both sync streams add to iterating: :meth:`collect`, and ``with`` that closes them."""

    def collect(self) -> list[UIMessageChunk]:
        """Every remaining chunk, up to ``finish`` (a turn's: to the turn's end)."""
        return list(self)

    def close(self) -> None:
        """Stop reading."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ChatClient:
    """A client of a durable-harness chat server, with ``WorkflowChatTransport``'s resume logic.

    ``token`` is sent as ``Authorization: Bearer <token>``; ``headers`` are added to every request.
    ``retry`` bounds reconnecting (see :class:`RetryPolicy`); ``sleep`` waits between attempts (a
    test can record the delays instead); ``on_reconnect`` is called before each reconnect.
    ``transport`` (an httpx transport) or ``http_client`` (used as is, not closed) replace the
    default connection pool.
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        token: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        on_reconnect: Callable[[ReconnectEvent], None] | None = None,
        transport: httpx.BaseTransport | None = None,
        http_client: httpx.Client | None = None,
    ) -> None:
        """A client of the server at ``url`` (e.g. ``http://127.0.0.1:8000``)."""
        if transport is not None and http_client is not None:
            raise ValueError("pass either transport or http_client, not both")
        self.url = base_url(url)
        self.headers = request_headers(token, headers)
        self.retry = retry or RetryPolicy()
        self.on_reconnect = on_reconnect
        self._sleep = sleep
        self._owns_http = http_client is None
        self._http = http_client or httpx.Client(timeout=timeout, transport=transport)

    # --- streams ------------------------------------------------------------------------------------

    def send(
        self, messages: Messages, *, chat_id: str | None = None, body: Mapping[str, Any] | None = None
    ) -> ChunkStream:
        """Start a turn: POST ``messages`` (UI messages, or a user's text) and stream the reply.

        Returns a lazy iterator of typed chunks (the request is made on the first ``next()``);
        its :attr:`ChunkStream.run_id` is set once the response arrives. A stream that ends
        without ``finish`` is resumed with ``GET …/stream?startIndex=<chunks received>``.
        ``chat_id`` is sent as ``id``; ``body`` adds fields to the POST body.
        """
        return ChunkStream(self, post=chat_body(messages, chat_id, body))

    def resume(self, run_id: str, start_index: int = 0, *, drop_orphans: bool = True) -> ChunkStream:
        """Follow a run's stream from absolute chunk ``start_index`` (negative: from the tail, like
        the transport's ``initialStartIndex``), reconnecting until ``finish``.

        From the tail, chunks of parts that started before the window are dropped as the
        transport does (``drop_orphans``); pass False to get the log's chunks as they are."""
        return ChunkStream(self, run_id=run_id, start_index=start_index, drop_orphans=drop_orphans)

    def conversation(
        self,
        *,
        chat_id: str | None = None,
        messages: Sequence[Mapping[str, Any]] | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> Conversation:
        """A :class:`Conversation` over this client."""
        return Conversation(self, chat_id=chat_id, messages=messages, body=body)

    # --- the run API --------------------------------------------------------------------------------

    def run_status(self, run_id: str) -> dict[str, Any]:
        """``GET /api/runs/{run_id}``: status, finish reason, usage, pending approvals."""
        return self._json("GET", run_path(run_id))

    def cancel(self, run_id: str) -> dict[str, Any]:
        """``POST /api/runs/{run_id}/cancel``: stop a live run (its stream ends with ``finish``)."""
        return self._json("POST", run_path(run_id, "cancel"))

    def approve_run(self, run_id: str, answers: ApprovalAnswers) -> dict[str, Any]:
        """Answer a paused run's approvals; returns ``{"runId", "status", "stream"}`` of the
        continuation run (follow it with :meth:`resume`)."""
        return self._json("POST", run_path(run_id, "approvals"), approvals_body(answers))

    def health(self) -> dict[str, Any]:
        """``GET /health`` (needs no credentials)."""
        return self._json("GET", "/health")

    def _json(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        url = self.url + path
        try:
            response = self._http.request(method, url, json=body, headers=self.headers)
        except httpx.RequestError as exc:
            raise NetworkError(describe_transport_error(exc, url)) from None
        return decode_json(response)

    # --- lifecycle ----------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection pool (unless it was passed in)."""
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> ChatClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ChunkStream(StreamBase, _Chunks):
    """The chunks of one run, across as many responses as it takes to reach ``finish``.

    Iterating yields every chunk received, in log order, as a typed model (the transport's
    normalization is left to whoever assembles the message, see :class:`UIMessageAssembler`).
    Nothing after ``finish`` is read. Close it (or use ``with``) when you stop early.
    """

    def __init__(
        self, client: ChatClient, *, post: dict[str, Any] | None = None, run_id: str | None = None,
        start_index: int = 0, drop_orphans: bool = True,
    ) -> None:  # fmt: skip
        """A stream that starts with the POST ``post``, or with ``GET`` of ``run_id`` at ``start_index``."""
        super().__init__(client, post=post, run_id=run_id, start_index=start_index, drop_orphans=drop_orphans)
        self._client = client
        self._pairs = self._run()

    def __next__(self) -> UIMessageChunk:
        return next(self._pairs)[1]

    def next_pair(self) -> Pair:
        """The next chunk as ``(JSON object as received, typed chunk)``."""
        return next(self._pairs)

    def close(self) -> None:
        """Stop reading (closes the open response)."""
        self._pairs.close()

    def _run(self) -> Generator[Pair, None, None]:
        client, cursor = self._client, self.cursor
        initial = True
        while True:
            request = self._request(client._http, client.url, client.headers, initial=initial)
            error: str | None = None
            try:
                response = client._http.send(request, stream=True)
            except httpx.RequestError as exc:
                error = self._transport_failure(exc, request, initial=initial)
            else:
                try:
                    if not response.is_success:
                        error = self._status_failure(response, response.read(), initial=initial)
                    else:
                        self._opened(response, initial=initial)
                        for data in response.iter_bytes():
                            yield from cursor.feed(data)  # which stops at `finish`
                            if cursor.finished:
                                return
                        yield from cursor.eof()
                        if cursor.finished:
                            return
                except httpx.RequestError as exc:
                    error = describe_transport_error(exc, str(request.url))
                except ChunkError as exc:
                    error = str(exc)
                finally:
                    response.close()
            event = cursor.ended(error, initial=initial)
            initial = False
            if client.on_reconnect is not None:
                client.on_reconnect(event)
            if event.delay > 0:
                client._sleep(event.delay)


class Conversation(ConversationBase["ChatClient", "TurnStream"]):
    """A conversation over a :class:`ChatClient` (see :class:`ConversationBase`)."""

    def _turn(self, messages: list[dict[str, Any]]) -> TurnStream:
        return TurnStream(self.client, self.state, self.client.send(messages, chat_id=self.chat_id, body=self.body))

    def _empty_turn(self) -> TurnStream:
        return TurnStream(self.client, self.state, None)


class TurnStream(TurnBase[ChunkStream], _Chunks):
    """The chunks of one conversation turn; each is applied to the conversation as it is yielded."""

    def __next__(self) -> UIMessageChunk:
        if self.stream is None:
            raise StopIteration
        try:
            raw, chunk = self.stream.next_pair()
        except StopIteration:
            self._state.end()
            raise
        # Any other error leaves the turn open: resume() continues it into the same message.
        self._state.run_id = self.stream.run_id
        self._state.apply(raw)
        return chunk

    def close(self) -> None:
        """Stop reading; what arrived so far stays in the history."""
        if self.stream is not None:
            self.stream.close()
        self._state.end()
