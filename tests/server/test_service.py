"""ChatService's stream start (resume) and its follower's polling, over the in-memory adapters."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from durable_harness.demo import build_demo_agent
from durable_harness.errors import InvalidRequestError, RunNotFoundError
from durable_harness.messages import TextPart, UserMessage
from durable_harness.ports import StoredRun
from durable_harness.runner.runner import Runner
from durable_harness.runner.state import RunState, StreamContext
from durable_harness.server import service as service_module
from durable_harness.server.resume import RESUME_TAIL, StreamStart, stream_start
from durable_harness.server.service import ChatService, ServiceConfig
from durable_harness.storage.memory import MemoryCheckpointStore, MemoryChunkLog

FINISH = '{"type":"finish","finishReason":"stop"}'


class LoadCountingStore(MemoryCheckpointStore):
    """Counts full loads (the run's whole state): a resume must not need one."""

    loads = 0

    def load(self, run_id: str) -> StoredRun:
        self.loads += 1
        return super().load(run_id)


class NoOrchestrator:
    def start(self, run_id: str) -> None:
        raise AssertionError("not used")

    def cancel(self, run_id: str) -> None:
        raise AssertionError("not used")


def delta(i: int) -> str:
    return f'{{"type":"text-delta","id":"t","delta":"{i}"}}'


def make_service(chunks: int) -> tuple[ChatService, LoadCountingStore, MemoryChunkLog, str]:
    store, log = LoadCountingStore(), MemoryChunkLog()
    runner = Runner(build_demo_agent(delay=0), store, log)
    run_id = runner.create_run([UserMessage(content=[TextPart(text="hi")])], principal="alice").run_id
    log.append(run_id, 0, [delta(i) for i in range(chunks)], 1)
    store.loads = 0
    return ChatService(runner, NoOrchestrator()), store, log, run_id


def end_run(store: MemoryCheckpointStore, run_id: str, total: int) -> None:
    """Checkpoint the run as finished with ``total`` chunks (the log may not hold them all yet)."""
    cp = store.load(run_id)
    state = RunState.model_validate_json(cp.state)
    state.status, state.stream = "finished", StreamContext(chunk_count=total)
    store.save(StoredRun(run_id, state.model_dump_json(), state.status, principal=cp.principal), cp.version)


async def test_a_live_run_resumes_from_the_tail_or_any_index_without_loading_its_state() -> None:
    service, store, log, run_id = make_service(100)
    expected = log.read(run_id, 0)
    assert await stream_start(service, run_id, -5, "alice") == StreamStart(95, 100, expected[95:])
    assert await stream_start(service, run_id, -1000, "alice") == StreamStart(0, 100, expected)
    service.config = ServiceConfig(read_batch=50)  # a tail read takes at most a batch
    assert await stream_start(service, run_id, -80, "alice") == StreamStart(20, 100, None)
    assert await stream_start(service, run_id, 100 - RESUME_TAIL, "alice") == StreamStart(36, 100, expected[36:])
    assert await stream_start(service, run_id, 10, "alice") == StreamStart(10, 100, None)  # follow reads from 10
    assert await stream_start(service, run_id, 100, "alice") == StreamStart(100, 100, [])  # the end: wait for more
    with pytest.raises(InvalidRequestError, match="past the end"):
        await stream_start(service, run_id, 101, "alice")
    with pytest.raises(RunNotFoundError):
        await stream_start(service, run_id, -5, "mallory")
    assert store.loads == 0


async def test_a_finished_run_ends_where_its_finish_is() -> None:
    service, store, log, run_id = make_service(10)
    log.append(run_id, 10, [FINISH], 1)
    end_run(store, run_id, 11)
    store.loads = 0
    assert await stream_start(service, run_id, -2, "alice") == StreamStart(9, 11, [delta(9), FINISH])
    # From its length: what is left is nothing (the seeds' handlers skip N chunks), not an error.
    assert await stream_start(service, run_id, 11, "alice") == StreamStart(11, 11, [], complete=True)
    with pytest.raises(InvalidRequestError, match="ended with 'finish'"):
        await stream_start(service, run_id, 12, "alice")
    assert store.loads == 0  # the log's last chunk told where the run ends


async def test_a_finished_run_whose_last_chunks_are_still_coming_is_followed_to_them() -> None:
    service, store, _, run_id = make_service(10)
    end_run(store, run_id, 12)  # checkpointed as finished; `finish` and one more not appended yet
    assert await stream_start(service, run_id, 11, "alice") == StreamStart(11, 10, None)
    assert (await stream_start(service, run_id, 12, "alice")).complete
    with pytest.raises(InvalidRequestError, match="12 chunks"):
        await stream_start(service, run_id, 13, "alice")


class FakeClock:
    """time.monotonic and asyncio.sleep for the service module: sleeping moves the clock."""

    def __init__(self, log: MemoryChunkLog, run_id: str, arrivals: dict[float, list[str]]) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self.log, self.run_id, self.arrivals = log, run_id, dict(arrivals)

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 6))
        self.now += seconds
        for at in sorted(t for t in self.arrivals if t <= self.now):
            chunks = self.arrivals.pop(at)
            self.log.append(self.run_id, self.log.count(self.run_id), chunks, 1)


async def test_the_follower_polls_fast_while_chunks_come_and_backs_off_while_quiet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service, _, log, run_id = make_service(3)
    service.config = ServiceConfig(poll_seconds=0.05, idle_poll_seconds=0.5, keepalive_seconds=100)
    clock = FakeClock(log, run_id, {0.12: [delta(3)], 6.0: [delta(4), FINISH]})
    monkeypatch.setattr(service_module.time, "monotonic", clock.monotonic)
    monkeypatch.setattr(service_module.asyncio, "sleep", clock.sleep)
    reads: list[int] = []
    read = log.read

    def counted(run: str, start: int, limit: int | None = None) -> list[str]:
        reads.append(start)
        return read(run, start, limit)

    monkeypatch.setattr(log, "read", counted)
    batches = [batch async for batch in service.follow(run_id, 0)]
    assert batches == [[delta(0), delta(1), delta(2)], [delta(3)], [delta(4), FINISH]]
    # After a batch that reached the end, the next read waits one poll interval: never at once.
    assert len(reads) == len(clock.sleeps) + 1
    assert clock.sleeps[:3] == [0.05, 0.05, 0.05]
    quiet = clock.sleeps[3:]  # after the 4th chunk (at 0.15 s), nothing until 6 s
    assert quiet == sorted(quiet) and quiet[-1] == 0.5  # backs off, up to idle_poll_seconds
    assert len(quiet) < 6.0 / 0.05 / 4  # far fewer reads than a fixed 50 ms poll would make


async def test_a_full_batch_is_followed_by_the_next_read_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    service, _, log, run_id = make_service(10)
    log.append(run_id, 10, [FINISH], 1)
    service.config = ServiceConfig(read_batch=4)
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    monkeypatch.setattr(service_module.asyncio, "sleep", sleep)
    batches: list[Any] = [batch async for batch in service.follow(run_id, 0)]
    assert [len(b) for b in batches] == [4, 4, 3] and sleeps == []
    assert asyncio.iscoroutinefunction(stream_start)


class Cadence:
    """A log's idea of when the next append is due (see ports.CommitCadence)."""

    def __init__(self, due: float | None) -> None:
        self.due = due

    def next_commit(self, run_id: str) -> float | None:
        return self.due


def test_the_follower_reads_when_the_next_append_is_due(monkeypatch: pytest.MonkeyPatch) -> None:
    service, _, _, run_id = make_service(1)
    service.config = ServiceConfig(poll_seconds=0.05, idle_poll_seconds=1.0)
    monkeypatch.setattr(service_module.time, "time", lambda: 1000.0)
    delay = service._poll_delay
    assert delay(0.0, None, run_id) == 0.05  # no cadence: the poll interval
    assert delay(8.0, None, run_id) == 1.0  # quiet for long: backed off
    assert delay(0.0, Cadence(None), run_id) == 0.05
    assert delay(0.0, Cadence(1000.02), run_id) == pytest.approx(0.02)  # due sooner than the next poll
    assert delay(0.0, Cadence(1000.3), run_id) == 0.05  # never later than the poll interval
    assert delay(0.0, Cadence(999.99), run_id) == pytest.approx(service_module._LATE_RETRY)  # just late
    assert delay(0.4, Cadence(999.0), run_id) == pytest.approx(0.1)  # long overdue: the writer paused


async def test_a_held_run_is_read_as_signalled_and_looked_at_once_its_writer_here_is_done() -> None:
    from durable_harness.server.notifier import CommitSignal

    service, _, log, run_id = make_service(0)
    signal = service.signal = CommitSignal()
    # Long enough that a held follower never looks at the log on its own during the test.
    service.config = ServiceConfig(poll_seconds=0.01, idle_poll_seconds=30, keepalive_seconds=100)
    reads: list[tuple[int, int | None]] = []
    read = log.read

    def counted(run: str, start: int, limit: int | None = None) -> list[str]:
        reads.append((start, limit))
        return read(run, start, limit)

    log.read = counted  # type: ignore[method-assign]
    signal.hold(run_id)  # the run's writer is in this process
    got: list[str] = []

    async def follow() -> None:
        async for batch in service.follow(run_id, 0):
            got.extend(batch or [])

    follower = asyncio.get_running_loop().create_task(follow())
    await asyncio.sleep(0.05)
    first = reads[:]
    log.append(run_id, 0, [delta(0), delta(1)], 1)
    signal.notify(run_id, 2)  # as the writer's on_commit does
    for _ in range(100):
        if len(got) == 2:
            break
        await asyncio.sleep(0.01)
    assert got == [delta(0), delta(1)]
    assert reads[len(first) :] == [(0, 2)]  # exactly what was committed (a cached read when deployed)
    # Another writer (a slice that took over, or a cancel) appends; nothing tells this process...
    log.append(run_id, 2, [delta(2), FINISH], 2)
    await asyncio.sleep(0.05)
    assert got == [delta(0), delta(1)] and len(reads) == len(first) + 1  # ...while the run is held
    signal.release(run_id)  # the writer here is done: the follower looks at the log itself
    await asyncio.wait_for(follower, 5)
    assert got == [delta(0), delta(1), delta(2), FINISH]
