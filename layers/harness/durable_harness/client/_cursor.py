"""The client's resume logic without any I/O, shared by the sync and the async client.

A :class:`StreamCursor` follows one run's chunk stream across responses: it parses SSE bytes into
validated chunks and counts them exactly as ``WorkflowChatTransport`` does (every chunk that
parses and validates counts; ``[DONE]``, comments and half-received events don't), so after a
drop the next ``GET ...?startIndex=N`` asks for the first chunk not yet received. Unlike the
transport it never reconnects in a tight loop: a response that delivered nothing counts toward
:attr:`RetryPolicy.max_attempts`, and the wait before the next attempt grows exponentially.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ProtocolError
from ..protocol.sse import SSEParser
from ..protocol.ui_chunks import UIMessageChunk, parse_ui_chunk
from .errors import ReconnectLimitError, StreamError

TAIL_INDEX_HEADER = "x-workflow-stream-tail-index"
RUN_ID_HEADER = "x-workflow-run-id"


@dataclass(frozen=True)
class RetryPolicy:
    """How a stream that ended without ``finish`` is resumed.

    After a response that delivered chunks the client reconnects at once (the server's stream
    window ended, or the connection dropped mid-turn). After a response that delivered nothing
    (an empty stream, a network error, a ``retry_statuses`` answer) it waits
    ``initial_delay * multiplier ** (n - 1)`` seconds, at most ``max_delay``, where ``n`` counts
    such responses in a row; it gives up with :class:`ReconnectLimitError` once ``max_attempts``
    reconnects in a row delivered nothing.
    """

    max_attempts: int = 8
    initial_delay: float = 0.25
    max_delay: float = 5.0
    multiplier: float = 2.0
    retry_statuses: frozenset[int] = frozenset({429, 502, 503, 504})

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.initial_delay < 0 or self.max_delay < 0 or self.multiplier < 1:
            raise ValueError("delays must be >= 0 and multiplier >= 1")

    def delay(self, fruitless: int) -> float:
        """Seconds to wait after ``fruitless`` responses in a row delivered nothing (0 for none)."""
        if fruitless <= 0:
            return 0.0
        return float(min(self.max_delay, self.initial_delay * self.multiplier ** (fruitless - 1)))


@dataclass(frozen=True)
class ReconnectEvent:
    """What the client is about to do after a stream ended without ``finish``."""

    run_id: str
    """The run being resumed."""
    start_index: int
    """The ``startIndex`` of the coming ``GET``: the first chunk not yet received."""
    attempt: int
    """Reconnects in a row that delivered nothing so far (0: the last response made progress)."""
    delay: float
    """Seconds the client waits before reconnecting."""
    reason: str
    """Why: ``"the stream ended without finish"`` or the error that cut it."""


class ChunkError(Exception):
    """A chunk that is not JSON or fails the schema (the transport re-fetches it at the same index)."""


class StreamCursor:
    """Position, parsing and reconnect decisions of one run's stream (no I/O).

    ``start_index`` is the first request's explicit start: ``0`` (the default), a positive index
    (the chunks before it count as received) or a negative one (from the tail: resolved with the
    response's ``x-workflow-stream-tail-index``, and chunks whose part started before the window
    are dropped, like the transport's orphan filter, unless ``drop_orphans`` is false).
    """

    def __init__(
        self, policy: RetryPolicy, *, run_id: str | None = None, start_index: int = 0, drop_orphans: bool = True
    ) -> None:
        """A cursor before the first response."""
        self.policy = policy
        self.run_id = run_id
        self.index = 0
        """Chunks received so far, as an absolute position in the run's log (the next ``startIndex``)."""
        self.finished = False
        """Whether the ``finish`` chunk arrived."""
        self.finish_reason: str | None = None
        """The ``finishReason`` of ``finish``, when it had one."""
        self.reconnects = 0
        """``GET`` requests made to resume after the first response."""
        self.tail_index: int | None = None
        """The ``x-workflow-stream-tail-index`` of the last response that had one."""
        self._explicit = start_index
        self._use_explicit = start_index != 0
        self._position_unknown = False
        self._orphans = _OrphanFilter() if start_index < 0 and drop_orphans else None
        self._parser = SSEParser()
        self._received = 0
        self._fruitless = 0  # responses in a row that delivered nothing
        self._fruitless_reconnects = 0

    # --- one response -----------------------------------------------------------------------------

    def next_start(self) -> int:
        """The ``startIndex`` of the next ``GET``."""
        return self._explicit if self._use_explicit else self.index

    def opened(self, headers: Mapping[str, str]) -> None:
        """A 2xx response arrived with ``headers``; its body is fed next."""
        self._parser = SSEParser()
        tail = _int_or_none(headers.get(TAIL_INDEX_HEADER))
        if tail is not None:
            self.tail_index = tail
        if self._use_explicit:
            if self._explicit > 0:
                self.index = self._explicit
            elif tail is not None:
                self.index = max(0, tail + 1 + self._explicit)
            else:
                self._position_unknown = True  # fine unless this response ends without `finish`
            self._use_explicit = False

    def feed(self, data: bytes) -> Iterator[tuple[dict[str, Any], UIMessageChunk]]:
        """The chunks completed by ``data``, as ``(JSON object, chunk model)``; stops at ``finish``."""
        for text in self._parser.feed(data):
            yield from self._event(text)

    def eof(self) -> Iterator[tuple[dict[str, Any], UIMessageChunk]]:
        """The body ended: any event completed by the last bytes (a half-received one is dropped)."""
        for text in self._parser.close():
            yield from self._event(text)

    def _event(self, text: str) -> Iterator[tuple[dict[str, Any], UIMessageChunk]]:
        if self.finished:
            return  # nothing after `finish` belongs to the run
        try:
            raw = json.loads(text, parse_constant=_reject_constant)
            chunk = parse_ui_chunk(raw)
        except (ValueError, ProtocolError) as exc:
            raise ChunkError(f"invalid chunk at index {self.index}: {exc}") from None
        self.index += 1
        self._received += 1
        if self._orphans is not None and self._orphans.drop(raw):
            return
        if raw["type"] == "finish":
            self.finished = True
            reason = raw.get("finishReason")
            self.finish_reason = reason if isinstance(reason, str) else None
        yield raw, chunk

    # --- between responses ------------------------------------------------------------------------

    def ended(self, reason: str | None, *, initial: bool) -> ReconnectEvent:
        """The response ended without ``finish`` (``reason``: the error, if one cut it).

        Returns how to reconnect, or raises :class:`ReconnectLimitError` (too many fruitless
        attempts) or :class:`StreamError` (the position is unknown, so resuming could duplicate).
        ``initial`` tells whether that response was the first request (the POST, or the first GET
        of a resume) rather than a reconnect.
        """
        why = reason or "the stream ended without a finish chunk"
        if self.run_id is None:
            raise StreamError("the response carried no run id, so the stream cannot be resumed")
        if self._position_unknown:
            raise StreamError(
                f"cannot resume run {self.run_id}: the server sent no {TAIL_INDEX_HEADER} header for the "
                f"negative start index {self._explicit} ({why})"
            )
        if self._received:
            self._fruitless = 0
            self._fruitless_reconnects = 0
        else:
            self._fruitless += 1
            if not initial:
                self._fruitless_reconnects += 1
            if self._fruitless_reconnects >= self.policy.max_attempts:
                raise ReconnectLimitError(
                    f"gave up on run {self.run_id}: {_reconnects(self._fruitless_reconnects)} in a row delivered "
                    f"nothing (at chunk {self.index}); last: {why}",
                    attempts=self._fruitless_reconnects,
                    start_index=self.index,
                    last_error=reason,
                )
        self._received = 0
        self.reconnects += 1
        return ReconnectEvent(
            run_id=self.run_id,
            start_index=self.next_start(),
            attempt=self._fruitless_reconnects,
            delay=self.policy.delay(self._fruitless),
            reason=why,
        )


class _OrphanFilter:
    """``createOrphanFilter`` of ``@ai-sdk/workflow`` 2.0.43: after a start from the tail, drop chunks
    of parts whose start chunk was before the window."""

    def __init__(self) -> None:
        self._ids: set[str] = set()
        self._calls: set[str] = set()

    def drop(self, chunk: dict[str, Any]) -> bool:
        kind = chunk["type"]
        if kind == "reset-step":
            self._ids.clear()
            self._calls.clear()
        elif kind in ("text-start", "reasoning-start"):
            self._ids.add(chunk["id"])
        elif kind in ("tool-input-start", "tool-input-available", "tool-input-error"):
            self._calls.add(chunk["toolCallId"])
        elif kind in ("text-delta", "text-end", "reasoning-delta", "reasoning-end"):
            return chunk["id"] not in self._ids
        elif kind in (
            "tool-input-delta", "tool-approval-request", "tool-output-available", "tool-output-error",
            "tool-output-denied",
        ):  # fmt: skip
            return chunk["toolCallId"] not in self._calls
        return False


def _reconnects(count: int) -> str:
    return f"{count} reconnect" + ("" if count == 1 else "s")


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")
