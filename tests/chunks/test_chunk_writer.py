"""ChunkWriter: group commit in front of a chunk log (D4), checked without timing guesses."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from durable_harness.chunks.writer import MAX_BACKOFF, ChunkWriter
from durable_harness.errors import FencedError, StorageError
from durable_harness.ports import ChunkLog
from durable_harness.storage import FileChunkLog, MemoryChunkLog

RUN = "run-1"


class GatedLog:
    """A ChunkLog wrapper that records every append and holds it until the test opens the gate."""

    def __init__(self, inner: ChunkLog | None = None, *, open_gate: bool = False) -> None:
        self.inner = inner or MemoryChunkLog()
        self.calls: list[tuple[int, list[str]]] = []
        self.began: list[float] = []
        self.entered = threading.Semaphore(0)
        self.gate = threading.Event()
        if open_gate:
            self.gate.set()
        self.fail_at: int | None = None  # index of the append call that raises

    def append(self, run_id: str, start: int, chunks: Sequence[str], epoch: int) -> int:
        self.began.append(time.monotonic())
        self.calls.append((start, list(chunks)))
        self.entered.release()
        assert self.gate.wait(timeout=5), "test never opened the gate"
        if self.fail_at == len(self.calls) - 1:
            raise StorageError("injected append failure")
        return self.inner.append(run_id, start, chunks, epoch)

    def open(self, run_id: str, epoch: int) -> int:
        return self.inner.open(run_id, epoch)

    def read(self, run_id: str, start: int, limit: int | None = None) -> list[str]:
        return self.inner.read(run_id, start, limit)

    def count(self, run_id: str) -> int:
        return self.inner.count(run_id)

    async def wait_entered(self) -> None:
        assert await asyncio.to_thread(self.entered.acquire, timeout=5), "no append started"

    @property
    def batches(self) -> list[list[str]]:
        return [chunks for _, chunks in self.calls]


class Commits:
    """An on_commit callback that records counts and lets a test await the next commit."""

    def __init__(self) -> None:
        self.counts: list[tuple[str, int]] = []
        self._changed = asyncio.Event()

    def __call__(self, run_id: str, count: int) -> None:
        self.counts.append((run_id, count))
        self._changed.set()

    async def until(self, count: int) -> None:
        async with asyncio.timeout(5):
            while not self.counts or self.counts[-1][1] < count:
                self._changed.clear()
                await self._changed.wait()


async def test_first_chunk_is_flushed_at_once() -> None:
    log, commits = GatedLog(open_gate=True), Commits()
    # An interval far longer than the test: only the first-chunk rule can explain a commit.
    writer = ChunkWriter(log, RUN, epoch=0, start=0, flush_interval=60, on_commit=commits)
    writer.write("a")
    await commits.until(1)
    assert log.batches == [["a"]]
    assert commits.counts == [(RUN, 1)]
    assert (writer.committed, writer.end) == (1, 1)


async def test_a_burst_goes_out_in_one_append_after_the_first() -> None:
    log, commits = GatedLog(), Commits()
    writer = ChunkWriter(log, RUN, epoch=0, start=0, flush_interval=0, on_commit=commits)
    writer.write("c0")
    await log.wait_entered()  # the first append is in flight, blocked
    for i in range(1, 6):
        writer.write(f"c{i}")
    assert (writer.committed, writer.end) == (0, 6)
    log.gate.set()
    assert await writer.flush() == 6
    assert log.calls == [(0, ["c0"]), (1, ["c1", "c2", "c3", "c4", "c5"])]
    assert commits.counts == [(RUN, 1), (RUN, 6)]
    assert log.read(RUN, 0) == [f"c{i}" for i in range(6)]


async def test_background_flushes_keep_the_interval() -> None:
    log, commits = GatedLog(open_gate=True), Commits()
    writer = ChunkWriter(log, RUN, epoch=0, start=0, flush_interval=0.05, on_commit=commits)
    before_first = time.monotonic()  # the loop's clock; the first flush began after this
    writer.write("a")
    await commits.until(1)
    writer.write("b")
    writer.write("c")
    await commits.until(3)  # no flush(): the background task sends them after the interval
    assert log.batches == [["a"], ["b", "c"]]
    assert log.began[1] - before_first >= 0.05


async def test_a_burst_of_two_sends_the_second_flush_at_once_and_then_keeps_the_pace() -> None:
    log, commits = GatedLog(open_gate=True), Commits()
    writer = ChunkWriter(log, RUN, epoch=0, start=0, flush_interval=0.05, flush_burst=2, on_commit=commits)
    before_first = time.monotonic()
    writer.write("start")  # the slice's opening chunk
    await commits.until(1)
    writer.write("a")  # the model's first output, a moment later: not held back by the interval
    await commits.until(2)
    writer.write("b")
    writer.write("c")
    await commits.until(4)  # no flush(): the background task sends them once a flush is earned
    assert log.batches == [["start"], ["a"], ["b", "c"]]
    # Two flushes at once, then one per interval: the third began an interval after the first.
    assert log.began[2] - before_first >= 0.05


def test_a_burst_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="flush_burst"):
        ChunkWriter(MemoryChunkLog(), RUN, epoch=0, start=0, flush_burst=0)


async def test_flush_does_not_wait_out_the_interval() -> None:
    log = GatedLog(open_gate=True)
    writer = ChunkWriter(log, RUN, epoch=0, start=0, flush_interval=60)
    writer.write("a")
    assert await writer.flush() == 1
    writer.write("b")
    async with asyncio.timeout(5):
        assert await writer.flush() == 2
    assert log.batches == [["a"], ["b"]]


async def test_order_and_indexes_across_many_bursts(tmp_path: Path) -> None:
    files = FileChunkLog(tmp_path)
    files.open(RUN, 3)
    files.append(RUN, 0, ["earlier"], 3)
    log, commits = GatedLog(files, open_gate=True), Commits()
    writer = ChunkWriter(log, RUN, epoch=3, start=1, flush_interval=0, on_commit=commits)
    written = ["earlier"]
    for burst in range(10):
        for i in range(burst + 1):
            chunk = f'{{"burst":{burst},"i":{i}}}'
            writer.write(chunk)
            written.append(chunk)
            assert writer.end == len(written)
        if burst % 3 == 0:
            await writer.flush()
        await asyncio.sleep(0)  # let the flusher run between bursts, as a streaming model would
    assert await writer.close() == len(written)
    assert files.read(RUN, 0) == written
    # Every append started where the previous one ended: one segment per append, in order.
    ends = [start + len(chunks) for start, chunks in log.calls]
    assert [start for start, _ in log.calls] == [1, *ends[:-1]]
    assert [count for _, count in commits.counts] == ends
    assert len(list((tmp_path / RUN).glob("*.jsonl"))) == 1 + len(log.calls)


async def test_flush_makes_everything_written_durable() -> None:
    log = GatedLog(open_gate=True)
    writer = ChunkWriter(log, RUN, epoch=0, start=0, flush_interval=60)
    for i in range(20):
        writer.write(f"c{i}")
        if i % 4 == 0:
            await asyncio.sleep(0)
    assert await writer.flush() == 20
    assert log.inner.read(RUN, 0) == [f"c{i}" for i in range(20)]
    assert (writer.committed, writer.end) == (20, 20)


async def test_flush_with_nothing_buffered_returns_at_once() -> None:
    log = GatedLog()  # gate closed: any append would hang
    writer = ChunkWriter(log, RUN, epoch=0, start=7)
    assert await writer.flush() == 7
    assert await writer.close() == 7
    assert log.calls == []


async def test_flush_waits_for_the_append_in_flight_and_the_buffer() -> None:
    log = GatedLog()
    writer = ChunkWriter(log, RUN, epoch=0, start=0, flush_interval=60)
    writer.write("a")
    await log.wait_entered()
    writer.write("b")
    flushing = asyncio.ensure_future(writer.flush())
    await asyncio.sleep(0)
    assert not flushing.done()
    log.gate.set()
    assert await flushing == 2
    assert log.batches == [["a"], ["b"]]


async def test_a_failed_append_breaks_the_writer() -> None:
    log, commits = GatedLog(), Commits()
    log.fail_at = 1
    writer = ChunkWriter(log, RUN, epoch=0, start=0, flush_interval=0, on_commit=commits)
    writer.write("a")
    await log.wait_entered()
    log.gate.set()
    await commits.until(1)
    log.gate.clear()
    writer.write("b")
    await log.wait_entered()  # the failing append is in flight
    writer.write("c")
    log.gate.set()
    with pytest.raises(StorageError, match="injected"):
        await writer.flush()
    assert isinstance(writer.error, StorageError)
    with pytest.raises(StorageError, match="injected"):
        writer.write("d")
    with pytest.raises(StorageError, match="injected"):
        await writer.close()
    assert log.batches == [["a"], ["b"]]  # "c" was never attempted
    assert log.inner.read(RUN, 0) == ["a"]
    assert commits.counts == [(RUN, 1)]


async def test_flush_then_runs_the_call_after_the_append_in_the_same_worker_trip() -> None:
    log = GatedLog(open_gate=True)
    writer = ChunkWriter(log, RUN, epoch=0, start=0, flush_interval=60)
    writer.write("a")
    assert await writer.flush() == 1  # the pace's credit is spent: the next flush is urged, not earned
    writer.write("b")
    writer.write("c")
    seen: list[tuple[list[str], str]] = []

    def call() -> str:
        seen.append((log.inner.read(RUN, 0), threading.current_thread().name))
        return "saved"

    async with asyncio.timeout(5):
        assert await writer.flush_then(call) == "saved"
    appended_in = log.calls[-1]
    assert appended_in == (1, ["b", "c"])
    assert seen[0][0] == ["a", "b", "c"]  # the call saw every chunk durable
    assert seen[0][1] != threading.current_thread().name  # in the worker thread, not the loop's


async def test_flush_then_with_nothing_buffered_still_runs_the_call() -> None:
    writer = ChunkWriter(GatedLog(open_gate=True), RUN, epoch=0, start=0)
    assert await writer.flush_then(lambda: 7) == 7


async def test_a_failed_append_fails_flush_then_and_its_call_never_runs() -> None:
    log = GatedLog(open_gate=True)
    log.fail_at = 0
    writer = ChunkWriter(log, RUN, epoch=0, start=0, flush_interval=60)
    writer.write("a")
    ran: list[int] = []
    async with asyncio.timeout(5):
        with pytest.raises(StorageError, match="injected"):
            await writer.flush_then(lambda: ran.append(1))
    assert ran == []
    assert isinstance(writer.error, StorageError)


async def test_the_calls_own_error_reaches_its_caller_and_the_writer_goes_on() -> None:
    log = GatedLog(open_gate=True)
    writer = ChunkWriter(log, RUN, epoch=0, start=0, flush_interval=0)
    writer.write("a")

    def fenced() -> None:
        raise FencedError("the run moved on")

    with pytest.raises(FencedError):
        await writer.flush_then(fenced)
    assert writer.error is None
    writer.write("b")
    assert await writer.flush() == 2
    assert log.inner.read(RUN, 0) == ["a", "b"]


class Crash(BaseException):
    """An abrupt death that no ``except Exception`` handles."""


class CrashingLog(MemoryChunkLog):
    def append(self, run_id: str, start: int, chunks: Sequence[str], epoch: int) -> int:
        raise Crash("died mid-append")


async def test_a_base_exception_from_the_log_still_reaches_flush() -> None:
    writer = ChunkWriter(CrashingLog(), RUN, epoch=0, start=0)
    writer.write("a")
    async with asyncio.timeout(5):
        with pytest.raises(Crash):
            await writer.flush()
    with pytest.raises(Crash):
        writer.write("b")


async def test_a_superseded_writer_is_fenced_on_flush() -> None:
    log = MemoryChunkLog()
    assert log.open(RUN, 1) == 0
    writer = ChunkWriter(log, RUN, epoch=1, start=0, flush_interval=0)
    writer.write("old-0")
    assert await writer.flush() == 1
    assert log.open(RUN, 2) == 1  # a newer slice claims the run
    writer.write("old-1")
    with pytest.raises(FencedError) as info:
        await writer.flush()
    assert type(info.value) is FencedError
    with pytest.raises(FencedError):
        writer.write("old-2")
    assert log.read(RUN, 0) == ["old-0"]
    newer = ChunkWriter(log, RUN, epoch=2, start=1)
    newer.write("new-1")
    assert await newer.close() == 2
    assert log.read(RUN, 0) == ["old-0", "new-1"]


async def test_close_is_idempotent_and_final() -> None:
    writer = ChunkWriter(MemoryChunkLog(), RUN, epoch=0, start=0)
    writer.write("a")
    assert await writer.close() == 1
    assert await writer.close() == 1
    with pytest.raises(RuntimeError):
        writer.write("b")


async def test_bad_chunk_is_refused_without_breaking_the_writer() -> None:
    writer = ChunkWriter(MemoryChunkLog(), RUN, epoch=0, start=0)
    with pytest.raises(ValueError):
        writer.write('{"a":\n1}')
    writer.write("ok")
    assert await writer.close() == 1
    assert writer.error is None


async def test_a_failing_listener_does_not_break_the_writer() -> None:
    loop = asyncio.get_running_loop()
    reported: list[BaseException] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context["exception"]))

    def listener(run_id: str, count: int) -> None:
        raise RuntimeError("listener bug")

    writer = ChunkWriter(MemoryChunkLog(), RUN, epoch=0, start=0, on_commit=listener)
    writer.write("a")
    assert await writer.flush() == 1
    writer.write("b")
    assert await writer.close() == 2
    assert [str(e) for e in reported] == ["listener bug", "listener bug"]


def test_write_outside_an_event_loop_is_an_error() -> None:
    writer = ChunkWriter(MemoryChunkLog(), RUN, epoch=0, start=0)
    with pytest.raises(RuntimeError):
        writer.write("a")
    assert writer.end == 0


class StrainedLog(MemoryChunkLog):
    """A memory log that reports, per append, whether the store had to retry it (scripted), as
    DynamoChunkLog.retried does for a throttled PutItem."""

    def __init__(self, strained: list[bool]) -> None:
        super().__init__()
        self.script = list(strained)
        self.last = False

    def append(self, run_id: str, start: int, chunks: Sequence[str], epoch: int) -> int:
        self.last = self.script.pop(0)
        return super().append(run_id, start, chunks, epoch)

    def retried(self, run_id: str) -> bool:
        return self.last


async def test_the_pace_backs_off_while_appends_are_retried_and_comes_back() -> None:
    script = [True] * 6 + [False] * 6
    log = StrainedLog(script)
    writer = ChunkWriter(log, RUN, epoch=0, start=0, flush_interval=0.1)
    paces = []
    for i in range(len(script)):
        writer.write(f'{{"i":{i}}}')
        await writer.flush()  # an explicit flush skips the interval: no waiting in this test
        paces.append(round(writer.flush_interval, 3))
    # Doubles after each throttled append up to MAX_BACKOFF times the base, halves back after each
    # clean one; the chunks are all there, in order.
    assert paces == [0.2, 0.4, 0.8, 1.6, 1.6, 1.6, 0.8, 0.4, 0.2, 0.1, 0.1, 0.1]
    assert max(paces) == 0.1 * MAX_BACKOFF
    assert log.read(RUN, 0) == [f'{{"i":{i}}}' for i in range(len(script))]
    await writer.close()


async def test_a_log_that_reports_no_strain_keeps_the_pace() -> None:
    writer = ChunkWriter(MemoryChunkLog(), RUN, epoch=0, start=0, flush_interval=0.1)
    writer.write('{"i":0}')
    await writer.flush()
    assert writer.flush_interval == 0.1
    await writer.close()
