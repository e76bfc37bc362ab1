"""The local orchestrator is durable (D13): leases in the SQLite store, recovery at start-up, a
watchdog for runs whose driver died, several orchestrators on one data folder, closing retried
until it lands, and storage errors that stall a run instead of failing it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import pytest
from durable_harness.errors import StorageError
from durable_harness.ports import ChunkLog
from durable_harness.runner import LocalOrchestrator, Runner
from durable_harness.runner.lease import new_owner, owner_is_dead
from durable_harness.runner.state import RunState
from durable_harness.storage.files import FileChunkLog
from durable_harness.storage.health import StorageHealth
from durable_harness.storage.sqlite import SqliteCheckpointStore

from tests.reliability.scenario import PROMPT, Timeline, check_log, check_reference, make_agent
from tests.support import message_of


class BreakableLog:
    """A chunk log whose writes fail with ``StorageError`` while ``broken`` (a full disk, say)."""

    def __init__(self, inner: ChunkLog) -> None:
        self.inner = inner
        self.broken = False
        self.failures = 0

    def _check(self) -> None:
        if self.broken:
            self.failures += 1
            raise StorageError("injected: No space left on device")

    def open(self, run_id: str, epoch: int) -> int:
        self._check()
        return self.inner.open(run_id, epoch)

    def append(self, run_id: str, start: int, chunks: Sequence[str], epoch: int) -> int:
        self._check()
        return self.inner.append(run_id, start, chunks, epoch)

    def read(self, run_id: str, start: int, limit: int | None = None) -> list[str]:
        return self.inner.read(run_id, start, limit)

    def count(self, run_id: str) -> int:
        return self.inner.count(run_id)


async def until(condition: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Wait (polling the event loop) until ``condition()`` holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


class Folder:
    """One data folder; ``process()`` gives what a new server process on it would have."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.timeline = Timeline()
        self.stores: list[SqliteCheckpointStore] = []

    def process(self, **options: float) -> tuple[Runner, LocalOrchestrator, SqliteCheckpointStore]:
        store = SqliteCheckpointStore(self.root / "runs.sqlite3")
        self.stores.append(store)
        runner = Runner(make_agent(self.timeline, 1), store, FileChunkLog(self.root / "chunks"), flush_interval=0)
        orchestrator = LocalOrchestrator(runner, slice_seconds=0, retry_delay=0.01, leases=store, **options)
        return runner, orchestrator, store


@pytest.fixture
async def folder(tmp_path: Path) -> AsyncIterator[Folder]:
    f = Folder(tmp_path)
    yield f
    for store in f.stores:
        store.close()


async def test_start_up_drives_every_run_that_is_neither_terminal_nor_paused(folder: Folder) -> None:
    runner, _, store = folder.process()
    fresh = runner.create_run(PROMPT, message_id="msg_1").run_id  # the server died before a slice
    halfway = runner.create_run(PROMPT, message_id="msg_1").run_id
    await runner.run_slice(halfway, budget_seconds=0)  # ... or between two slices
    done = runner.create_run(PROMPT, message_id="msg_1").run_id
    await runner.run(done)
    assert [runner.load(r).status for r in (fresh, halfway, done)] == ["not_started", "ready_for_next_step", "finished"]
    done_version = store.load(done).version

    runner2, restarted, store2 = folder.process()
    await restarted.open()
    try:
        states = await asyncio.gather(*(restarted.wait(r) for r in (fresh, halfway)))
        assert [s.status if s else None for s in states] == ["finished", "finished"]
        for run_id in (fresh, halfway, done):
            assert runner2.load(run_id).status == "finished"
            check_reference(check_log(runner2.log, store2, run_id))
        assert store2.load(done).version == done_version  # an ended run is left alone
        assert store2.lease_candidates() == []  # every lease dropped once its run ended
        assert folder.timeline.reexecuted_after_checkpoint() == []
    finally:
        await restarted.aclose()


async def test_a_run_whose_driver_died_is_driven_again_once_its_lease_lapses(folder: Folder) -> None:
    runner, orchestrator, store = folder.process(lease_seconds=0.3)
    real_drive, calls = orchestrator.drive, []

    async def drive(run_id: str) -> RunState | None:
        calls.append(run_id)
        if len(calls) == 1:
            await runner.run_slice(run_id, budget_seconds=0)
            raise RuntimeError("the driving task died")  # a bug, say: nothing ends the run
        return await real_drive(run_id)

    orchestrator.drive = drive  # type: ignore[method-assign]
    await orchestrator.open()
    try:
        run_id = runner.create_run(PROMPT, message_id="msg_1").run_id
        orchestrator.start(run_id)
        assert await orchestrator.wait(run_id) is None and runner.load(run_id).status == "ready_for_next_step"
        [lease] = store.lease_candidates()
        assert lease.owner == orchestrator.keeper.owner  # type: ignore[union-attr]  # kept, not renewed
        await until(lambda: len(calls) == 2, what="the watchdog to drive the run again")
        assert time.time() >= lease.expires_at  # not before the lease lapsed
        state = await orchestrator.wait(run_id)
        assert state is not None and state.status == "finished"
        check_reference(check_log(runner.log, store, run_id))
    finally:
        await orchestrator.aclose()


async def test_two_processes_on_one_data_folder_do_not_both_drive_a_run(folder: Folder) -> None:
    runner_a, a, store = folder.process()
    _, b, _ = folder.process()
    alone = runner_a.create_run(PROMPT, message_id="msg_1").run_id
    a.start(alone)
    slices_alone = (await a.wait(alone)).slices  # type: ignore[union-attr]
    claims_alone = store.load(alone).epoch
    folder.timeline.events.clear()
    # The first driver is held inside its first tool call while the other server is asked, so that
    # the run cannot have finished by then (a finished run is no test of the lease).
    release, executed = threading.Event(), folder.timeline.executed

    def held(call_id: str) -> None:
        executed(call_id)
        if call_id == "c1":
            release.wait(10)  # a tool thread: the driver's loop, and its lease renewals, go on

    folder.timeline.executed = held  # type: ignore[method-assign]
    run_id = runner_a.create_run(PROMPT, message_id="msg_1").run_id
    a.start(run_id)
    await until(lambda: folder.timeline.executions["c1"] == 1, what="the first driver to be at work")
    b.start(run_id)  # another server is asked to drive it meanwhile (a POST retried there, say)
    try:
        assert await b.wait(run_id) is None  # it stands back: without leases it would take the run over
    finally:
        release.set()
    state = await a.wait(run_id)
    assert state is not None and state.status == "finished"
    assert runner_a.load(run_id).slices == slices_alone  # nobody ran a slice twice...
    assert store.load(run_id).epoch == claims_alone  # ...or even claimed the run once more
    assert folder.timeline.executions == {"c1": 1, "c2": 1, "c3": 1, "c4": 1}


async def test_a_lease_is_taken_over_at_once_from_a_dead_process_and_never_from_a_live_one(folder: Folder) -> None:
    runner, orchestrator, store = folder.process()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_owner = new_owner().replace(f":{__import__('os').getpid()}:", f":{dead.stdout.strip()}:")
    live_owner = new_owner()  # this process: alive
    assert owner_is_dead(dead_owner) and not owner_is_dead(live_owner)
    orphaned = runner.create_run(PROMPT, message_id="msg_1").run_id
    busy = runner.create_run(PROMPT, message_id="msg_1").run_id
    hour = time.time() + 3600
    store.acquire_lease(orphaned, dead_owner, hour, now=time.time())
    store.acquire_lease(busy, live_owner, hour, now=time.time())
    assert await orchestrator.recover() == [orphaned]
    state = await orchestrator.wait(orphaned)
    assert state is not None and state.status == "finished"
    assert runner.load(busy).status == "not_started"  # its live driver's lease is respected


async def test_storage_errors_stall_a_run_until_storage_is_back_then_it_goes_on(folder: Folder) -> None:
    runner, orchestrator, store = folder.process(max_retry_delay=0.05)
    log = BreakableLog(runner.log)
    runner.log = log
    health = orchestrator.health = StorageHealth()
    run_id = runner.create_run(PROMPT, message_id="msg_1").run_id
    await runner.run_slice(run_id, budget_seconds=0)  # the first step is in
    before = log.read(run_id, 0)
    log.broken = True
    orchestrator.start(run_id)
    await until(lambda: log.failures >= 5, what="slices failing on storage")
    assert health.unavailable and orchestrator.driving(run_id)  # stalled, not failed
    assert runner.load(run_id).status == "ready_for_next_step"
    log.broken = False
    state = await orchestrator.wait(run_id)
    assert state is not None and state.status == "finished" and not health.unavailable
    chunks = check_log(log, store, run_id)
    assert log.read(run_id, 0, len(before)) == before  # what was committed is served unchanged
    check_reference(chunks)
    assert folder.timeline.reexecuted_after_checkpoint() == []


@pytest.mark.parametrize("status", ["failed", "cancelled"])
async def test_closing_a_run_is_retried_until_it_lands(folder: Folder, status: str) -> None:
    runner, orchestrator, store = folder.process(max_retry_delay=0.05)
    log = BreakableLog(runner.log)
    runner.log = log
    run_id = runner.create_run(PROMPT, message_id="msg_1").run_id
    await runner.run_slice(run_id, budget_seconds=0)
    log.broken = True
    closing = asyncio.create_task(orchestrator.close(run_id, status=status, error="It broke."))  # type: ignore[arg-type]
    await until(lambda: log.failures >= 5, what="the closing writes to fail")
    assert not closing.done()  # still trying: not dropped ("Task exception was never retrieved")
    log.broken = False
    state = await closing
    assert state.status == status
    chunks = check_log(log, store, run_id)
    tail = [{"type": "error", "errorText": "It broke."}] if status == "failed" else []
    reason = "error" if status == "failed" else "other"
    assert chunks[-len(tail) - 1 :] == [*tail, {"type": "finish", "finishReason": reason}]
    assert message_of(chunks)["parts"]  # the first step's parts are kept
