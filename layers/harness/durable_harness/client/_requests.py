"""Requests, responses and stream state shared by the sync and async clients (httpx, no I/O here)."""

from __future__ import annotations

from typing import Any, Generic, Protocol, Self, TypeVar

import httpx

from ._common import ConversationState, stream_path
from ._cursor import RUN_ID_HEADER, RetryPolicy, StreamCursor
from .errors import ChatClientError, NetworkError, ResponseError, StreamError, describe_transport_error

CHAT_PATH = "/api/chat"


def run_id_of(response: httpx.Response) -> str:
    """The run id of a POST's response (``x-workflow-run-id``)."""
    run_id: str | None = response.headers.get(RUN_ID_HEADER)
    if not run_id:
        raise StreamError(
            f"the response of POST {response.request.url} has no {RUN_ID_HEADER} header "
            "(is this a durable-harness chat server?)"
        )
    return run_id


def decode_json(response: httpx.Response) -> dict[str, Any]:
    """The JSON object of a run API response (a non-2xx one raises its :class:`ResponseError`)."""
    if not response.is_success:
        raise ResponseError.from_response(response, response.content)
    try:
        data = response.json()
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise ChatClientError(f"{response.request.method} {response.request.url}: the response is not a JSON object")
    return data


class _ClientParts(Protocol):
    """What a chunk stream reads from its client (sync or async)."""

    retry: RetryPolicy


class StreamBase:
    """What the sync and async chunk streams share: the POST that starts them, and the cursor that
    tells where they are (the I/O is theirs)."""

    def __init__(
        self, client: _ClientParts, *, post: dict[str, Any] | None = None, run_id: str | None = None,
        start_index: int = 0, drop_orphans: bool = True,
    ) -> None:  # fmt: skip
        """A stream that starts with the POST ``post``, or with ``GET`` of ``run_id`` at ``start_index``."""
        self._post = post
        self.cursor = StreamCursor(client.retry, run_id=run_id, start_index=start_index, drop_orphans=drop_orphans)
        """Position and reconnect state."""

    def _request(self, http: httpx.Client | httpx.AsyncClient, url: str, headers: dict[str, str], *,
                 initial: bool) -> httpx.Request:  # fmt: skip
        """The POST that starts the turn (the first request, given a POST), else the GET of the
        cursor's next position."""
        if initial and self._post is not None:
            return http.build_request("POST", url + CHAT_PATH, json=self._post, headers=headers)
        cursor = self.cursor
        if cursor.run_id is None:
            raise StreamError("no run to resume")
        # `?startIndex=` appended literally, as the transport does.
        return http.build_request("GET", f"{url}{stream_path(cursor.run_id)}?startIndex={cursor.next_start()}",
                                  headers=headers)  # fmt: skip

    @staticmethod
    def _transport_failure(exc: httpx.RequestError, request: httpx.Request, *, initial: bool) -> str:
        """Why a request failed in transit, as the reason to reconnect; the first request's failure
        is the caller's: :class:`NetworkError`."""
        reason = describe_transport_error(exc, str(request.url))
        if initial:
            raise NetworkError(reason) from None
        return reason

    def _status_failure(self, response: httpx.Response, body: bytes, *, initial: bool) -> str:
        """A non-2xx response of ``body``: the reason to reconnect when the retry policy retries its
        status after the first request, else raised as its :class:`ResponseError`."""
        failure = ResponseError.from_response(response, body)
        if initial or response.status_code not in self.cursor.policy.retry_statuses:
            raise failure
        return str(failure)

    def _opened(self, response: httpx.Response, *, initial: bool) -> None:
        """A 2xx stream response arrived: the run id of the POST that started the turn, and the
        position its headers tell."""
        if initial and self._post is not None:
            self.cursor.run_id = run_id_of(response)
        self.cursor.opened(response.headers)

    @property
    def run_id(self) -> str | None:
        """The run id (``x-workflow-run-id`` of the POST); None before the response."""
        return self.cursor.run_id

    @property
    def index(self) -> int:
        """Chunks received, as an absolute index into the run's log."""
        return self.cursor.index

    @property
    def finished(self) -> bool:
        """Whether ``finish`` arrived."""
        return self.cursor.finished

    @property
    def finish_reason(self) -> str | None:
        """The ``finishReason`` of ``finish``."""
        return self.cursor.finish_reason

    @property
    def reconnects(self) -> int:
        """How many times the stream was resumed."""
        return self.cursor.reconnects


StreamT = TypeVar("StreamT", bound=StreamBase)
_StreamT_co = TypeVar("_StreamT_co", bound=StreamBase, covariant=True)


class _Resumes(Protocol[_StreamT_co]):
    """A client that resumes a run's stream (sync or async)."""

    def resume(self, run_id: str, start_index: int = 0, *, drop_orphans: bool = True) -> _StreamT_co:
        """Follow a run's stream from ``start_index``."""
        ...


class TurnBase(Generic[StreamT]):
    """What the sync and async turn streams share: the turn they belong to, and resuming it."""

    def __init__(self, client: _Resumes[StreamT], state: ConversationState, stream: StreamT | None) -> None:
        """A turn of ``state`` reading ``stream`` (None: nothing to send)."""
        self._client = client
        self._state = state
        self._turn = state.turn
        self.stream = stream
        """The underlying chunk stream (None when nothing was sent)."""

    @property
    def run_id(self) -> str | None:
        """The turn's run id, once known."""
        return self.stream.run_id if self.stream is not None else None

    def resume(self) -> Self:
        """After an error or an interruption (Ctrl-C) cut the stream, go on reading the run from the
        first chunk not yet received (``GET …?startIndex=N``), into the same assistant message."""
        stream = self.stream
        if stream is None or stream.run_id is None:
            raise StreamError("nothing to resume: the turn's run is not known")
        if self._state.turn != self._turn:
            raise StreamError("nothing to resume: another turn has started since")
        if not stream.finished:
            self.stream = self._client.resume(stream.run_id, stream.index)
        return self
