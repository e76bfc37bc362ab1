"""Dropped streams resume to the identical message; reconnecting is bounded and backs off."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from durable_harness.client import (
    AsyncChatClient,
    ChatClient,
    ReconnectEvent,
    ReconnectLimitError,
    ResponseError,
    RetryPolicy,
)
from durable_harness.server.local import LocalKit

from tests.client.support import AsyncCuttingTransport, CutMode, CuttingTransport, EmptyStreamApp
from tests.support import log_chunks, message_of, serve

WEATHER = "What is the weather in Paris?"
POLICY = RetryPolicy(max_attempts=4, initial_delay=0.5, max_delay=1.5)


@pytest.fixture(scope="module")
def whole(url: str, kit: LocalKit) -> list[dict[str, object]]:
    """The chunks of an undisturbed weather turn."""
    with ChatClient(url) as client:
        stream = client.send(WEATHER)
        stream.collect()
    return log_chunks(kit.log, stream.run_id or "")


@pytest.mark.parametrize("mode", ["eof", "mid", "error"])
@pytest.mark.parametrize("k", [1, 4, 13, -1])
def test_a_cut_post_resumes_at_k_to_the_identical_message(
    url: str, kit: LocalKit, whole: list[dict[str, object]], k: int, mode: CutMode
) -> None:
    k = len(whole) - 1 if k == -1 else k
    transport = CuttingTransport([(k, mode)])
    delays: list[float] = []
    events: list[ReconnectEvent] = []
    with ChatClient(url, transport=transport, sleep=delays.append, on_reconnect=events.append) as client:
        chat = client.conversation()
        chat.send(WEATHER).collect()
    run_id = chat.run_id or ""
    assert transport.start_indexes() == [str(k)]
    assert [e.start_index for e in events] == [k] and delays == []  # progress: reconnect at once
    assert ("connection reset" in events[0].reason) is (mode == "error")
    logged = log_chunks(kit.log, run_id)
    assert chat.last_assistant_message == message_of(logged)
    assert message_of(logged)["parts"] == message_of(whole)["parts"]


@pytest.mark.parametrize("mode", ["eof", "mid", "error"])
def test_repeated_drops_resume_each_time_where_they_stopped(
    url: str, kit: LocalKit, whole: list[dict[str, object]], mode: CutMode
) -> None:
    transport = CuttingTransport([(3, mode), (3, mode), (3, mode), (2, mode), (1, mode)])
    with ChatClient(url, transport=transport, sleep=pytest.fail) as client:
        stream = client.send(WEATHER)
        chunks = [c.to_dict() for c in stream]
    assert transport.start_indexes() == ["3", "6", "9", "11", "12"]
    assert stream.reconnects == 5 and stream.finished
    assert chunks == log_chunks(kit.log, stream.run_id or "")
    assert message_of(chunks)["parts"] == message_of(whole)["parts"]


def test_a_post_that_delivers_nothing_resumes_from_0_after_a_backoff(url: str, kit: LocalKit) -> None:
    transport = CuttingTransport([(0, "eof"), (0, "mid")])
    delays: list[float] = []
    with ChatClient(url, transport=transport, sleep=delays.append, retry=POLICY) as client:
        stream = client.send(WEATHER)
        chunks = [c.to_dict() for c in stream]
    assert transport.start_indexes() == ["0", "0"] and delays == [0.5, 1.0]
    assert chunks == log_chunks(kit.log, stream.run_id or "")


def test_a_resumed_stream_that_drops_resumes_too(url: str, kit: LocalKit, whole: list[dict[str, object]]) -> None:
    with ChatClient(url) as client:
        stream = client.send(WEATHER)
        stream.collect()
    run_id = stream.run_id or ""
    logged = log_chunks(kit.log, run_id)
    transport = CuttingTransport([(2, "mid"), (2, "error")])
    with ChatClient(url, transport=transport) as client:
        tail = client.resume(run_id, -10, drop_orphans=False)
        assert [c.to_dict() for c in tail] == logged[-10:]
    start = len(logged) - 10
    assert transport.start_indexes() == ["-10", str(start + 2), str(start + 4)]


@pytest.mark.parametrize("mode", ["eof", "mid", "error"])
async def test_async_drops_resume_to_the_identical_message(
    url: str, kit: LocalKit, whole: list[dict[str, object]], mode: CutMode
) -> None:
    transport = AsyncCuttingTransport([(5, mode), (5, mode), (0, mode)])
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)

    async with AsyncChatClient(url, transport=transport, sleep=sleep) as client:
        chat = client.conversation()
        await chat.send(WEATHER).collect()
    assert transport.start_indexes() == ["5", "10", "10"] and delays == [0.25]
    assert chat.last_assistant_message == message_of(log_chunks(kit.log, chat.run_id or ""))


def test_a_turn_cut_by_an_interrupt_resumes_into_the_same_message(url: str, kit: LocalKit) -> None:
    transport = CuttingTransport([(6, "interrupt")])
    with ChatClient(url, transport=transport) as client:
        chat = client.conversation()
        turn = chat.send(WEATHER)
        received = []
        with pytest.raises(KeyboardInterrupt):
            for chunk in turn:
                received.append(chunk)
        assert len(received) == 6 and chat.last_assistant_message is not None  # the partial message
        received += turn.resume().collect()
        assert turn.resume().collect() == []  # finished: nothing more to read
    logged = log_chunks(kit.log, chat.run_id or "")
    assert [c.to_dict() for c in received] == logged
    assert transport.start_indexes() == ["6"]
    assert chat.last_assistant_message == message_of(logged) and len(chat.messages) == 2


async def test_async_turn_resumes_after_the_client_gave_up(url: str, kit: LocalKit) -> None:
    transport = AsyncCuttingTransport([(5, "eof"), (0, "mid")])

    async def sleep(seconds: float) -> None:
        pass

    async with AsyncChatClient(url, transport=transport, retry=RetryPolicy(max_attempts=1), sleep=sleep) as client:
        chat = client.conversation()
        turn = chat.send(WEATHER)
        with pytest.raises(ReconnectLimitError, match="1 reconnect in a row delivered nothing"):
            await turn.collect()
        await turn.resume().collect()
    assert transport.start_indexes() == ["5", "5"]
    assert chat.last_assistant_message == message_of(log_chunks(kit.log, chat.run_id or ""))


# --- the bound ------------------------------------------------------------------------------------


@pytest.fixture
def empty_server() -> Iterator[tuple[str, EmptyStreamApp]]:
    app = EmptyStreamApp()
    with serve(app) as base:  # type: ignore[arg-type]
        yield base, app


def test_empty_streams_give_up_after_the_bound_with_backoff(empty_server: tuple[str, EmptyStreamApp]) -> None:
    base, app = empty_server
    delays: list[float] = []
    events: list[ReconnectEvent] = []
    with ChatClient(base, retry=POLICY, sleep=delays.append, on_reconnect=events.append) as client:
        stream = client.send("hi")
        with pytest.raises(ReconnectLimitError) as caught:
            stream.collect()
    assert delays == [0.5, 1.0, 1.5, 1.5]  # doubling, capped at max_delay
    assert [e.attempt for e in events] == [0, 1, 2, 3]
    assert (
        app.requests
        == [("POST", "/api/chat", "")] + [("GET", f"/api/chat/{EmptyStreamApp.RUN_ID}/stream", "startIndex=0")] * 4
    )
    error = caught.value
    assert error.attempts == 4 and error.start_index == 0
    assert "gave up on run wrun_eeeeeeeeeeeeeeeeeeeeeeeeee: 4 reconnects in a row delivered nothing" in str(error)


async def test_async_empty_streams_give_up_too(empty_server: tuple[str, EmptyStreamApp]) -> None:
    base, app = empty_server
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)

    async with AsyncChatClient(base, retry=POLICY, sleep=sleep) as client:
        with pytest.raises(ReconnectLimitError):
            await client.resume(EmptyStreamApp.RUN_ID, 7).collect()
    assert delays == [0.5, 1.0, 1.5, 1.5]
    assert [q for _, _, q in app.requests] == ["startIndex=7"] * 5  # the explicit start, then chunks received


def test_retryable_statuses_count_toward_the_bound_and_others_fail_at_once() -> None:
    app = EmptyStreamApp(get_status=503)
    delays: list[float] = []
    with serve(app) as base, ChatClient(base, retry=POLICY, sleep=delays.append) as client:  # type: ignore[arg-type]
        with pytest.raises(ReconnectLimitError, match="HTTP 503 \\(unavailable\\): try again later"):
            client.send("hi").collect()
        assert delays == [0.5, 1.0, 1.5, 1.5]
        app.get_status = 404
        delays.clear()
        with pytest.raises(ResponseError, match="HTTP 404"):
            client.send("hi").collect()
        assert delays == [0.5]  # the POST delivered nothing; the first GET's 404 ends it


def test_retry_policy_validation() -> None:
    assert RetryPolicy().delay(0) == 0
    assert [RetryPolicy(initial_delay=1, max_delay=3).delay(n) for n in (1, 2, 3, 4)] == [1, 2, 3, 3]
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)
