"""StreamCursor without I/O: what counts as a received chunk, explicit starts, the bound."""

from __future__ import annotations

import pytest
from durable_harness.client import ReconnectLimitError, RetryPolicy, StreamCursor, StreamError
from durable_harness.client._cursor import ChunkError


def feed(cursor: StreamCursor, body: bytes) -> list[str]:
    return [raw["type"] for raw, _ in [*cursor.feed(body), *cursor.eof()]]


def test_only_complete_valid_chunks_count() -> None:
    cursor = StreamCursor(RetryPolicy(), run_id="wrun_x")
    cursor.opened({})
    body = b': stream-open\n\ndata: {"type":"start"}\r\n\r\n: keep-alive\n\ndata: [DONE]\n\ndata: {"type":"start-st'
    assert feed(cursor, body) == ["start"] and cursor.index == 1
    event = cursor.ended(None, initial=True)
    assert (event.start_index, event.delay, event.attempt) == (1, 0.0, 0)
    cursor.opened({})
    with pytest.raises(ChunkError, match="invalid chunk at index 1"):
        feed(cursor, b'data: {"type":"nope"}\n\n')
    cursor.opened({})
    with pytest.raises(ChunkError):
        feed(cursor, b"data: NaN\n\n")
    assert cursor.index == 1


def test_nothing_after_finish_is_read() -> None:
    cursor = StreamCursor(RetryPolicy(), run_id="wrun_x")
    cursor.opened({})
    chunks = b'data: {"type":"finish","finishReason":"stop"}\n\ndata: {"type":"start"}\n\n'
    assert feed(cursor, chunks) == ["finish"] and cursor.finished and cursor.finish_reason == "stop"


def test_explicit_starts() -> None:
    positive = StreamCursor(RetryPolicy(), run_id="wrun_x", start_index=5)
    assert positive.next_start() == 5
    positive.opened({})
    assert positive.index == 5 and positive.next_start() == 5
    tail = StreamCursor(RetryPolicy(), run_id="wrun_x", start_index=-5)
    tail.opened({"x-workflow-stream-tail-index": "99"})
    assert feed(tail, b'data: {"type":"start-step"}\n\n') == ["start-step"]
    assert tail.ended(None, initial=True).start_index == 96  # tail 99, -5 -> 95, then one chunk
    blind = StreamCursor(RetryPolicy(), run_id="wrun_x", start_index=-5)
    blind.opened({})
    with pytest.raises(StreamError, match="no x-workflow-stream-tail-index header"):
        blind.ended(None, initial=True)


def test_orphans_of_a_tail_window_are_dropped() -> None:
    cursor = StreamCursor(RetryPolicy(), run_id="wrun_x", start_index=-10)
    cursor.opened({"x-workflow-stream-tail-index": "20"})
    body = b"".join(
        b"data: " + line + b"\n\n"
        for line in [
            b'{"type":"text-delta","id":"t0","delta":"x"}',
            b'{"type":"tool-output-available","toolCallId":"c0","output":1}',
            b'{"type":"tool-input-available","toolCallId":"c1","toolName":"t","input":{}}',
            b'{"type":"tool-output-available","toolCallId":"c1","output":1}',
            b'{"type":"text-start","id":"t1"}',
            b'{"type":"text-delta","id":"t1","delta":"y"}',
        ]
    )
    kept = feed(cursor, body)
    assert kept == ["tool-input-available", "tool-output-available", "text-start", "text-delta"]
    assert cursor.index == 11 + 6  # dropped chunks still count as received


def test_the_bound_counts_reconnects_that_deliver_nothing() -> None:
    cursor = StreamCursor(RetryPolicy(max_attempts=2, initial_delay=1, max_delay=10), run_id="wrun_x")
    assert cursor.ended("boom", initial=True).delay == 1  # the first request is not a reconnect
    assert cursor.ended(None, initial=False).delay == 2
    with pytest.raises(ReconnectLimitError) as caught:
        cursor.ended("still nothing", initial=False)
    assert caught.value.last_error == "still nothing" and caught.value.attempts == 2
    nameless = StreamCursor(RetryPolicy())
    with pytest.raises(StreamError, match="no run id"):
        nameless.ended(None, initial=True)
