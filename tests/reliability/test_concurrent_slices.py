"""Two slices of one run at once (a retry overlapping a slow attempt): fencing keeps one writer.

Slice ``A`` and slice ``B`` run the same run concurrently, each with its own adapter objects (as
two Lambda invocations would). Deterministic sweep: ``A`` is held just before its ``k``-th port
call until ``B`` (started only then) has loaded the run (both saw the same checkpoint) or has
claimed it and opened the log (``B`` fences ``A`` out right there), for every ``k``; then both go
on freely. Free races: both start together, on one event loop (``asyncio.gather``) and on two
threads with an event loop each (the SQLite and file adapters have their own locks for that).

Whatever the interleaving: one slice raises ``FencedError`` and the other finishes the run (or,
when the second one arrives after the terminal checkpoint, both return ``finished``: the second
only completes the log's tail if it must); every checkpoint is committed once; the log is
contiguous with one ``finish`` and assembles to the uninterrupted message; the slice that claimed
first committed no checkpoint after the other's claim and appended no chunk after the other's
fence (its appends all lie in the log as it was when the other opened it, and that prefix is
unchanged at the end); and no slice ran a tool whose result was in the checkpoint it claimed.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from durable_harness.errors import FencedError
from durable_harness.ports import CheckpointStore, ChunkLog, StoredRun
from durable_harness.runner import Runner
from durable_harness.runner.state import RunState

from tests.aws.conftest import atomic_requests
from tests.reliability.backends import BACKENDS, Backend, aws_backend, aws_clients, backend_named
from tests.reliability.conftest import Report
from tests.reliability.scenario import (
    PROMPT,
    SLICE,
    Timeline,
    check_log,
    check_reference,
    make_agent,
    recorded_results,
)
from tests.support import message_of

HOLD_SECONDS = 10.0  # a held call waits at most this long for the other slice (bounded, never hit when green)


@dataclass
class Op:
    """A port call that took effect."""

    slice: str
    name: str
    version: int = 0
    epoch: int = 0
    start: int = 0
    end: int = 0
    state: str = ""


@dataclass
class Hold:
    """Holds ``slice`` before its ``at``-th port call until the other slice, which starts only
    then, has done its ``until`` call."""

    slice: str
    at: int
    until: str
    reached: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)
    timed_out: bool = False


class Tracer:
    """Records what each slice's port calls did, and applies an optional :class:`Hold`."""

    def __init__(self, timeline: Timeline, hold: Hold | None = None) -> None:
        self.timeline = timeline
        self.ops: list[Op] = []
        self.calls: dict[str, int] = {}
        self.loaded: dict[str, str] = {}
        self.claimed: dict[str, list[str]] = {}
        """The states each slice claimed (the checkpoints it went on from)."""
        self.snapshots: dict[tuple[str, int], list[str]] = {}
        """The log right when a slice opened it at some count (the fence point)."""
        self.hold = hold
        self._lock = threading.Lock()

    def before(self, slice_name: str) -> None:
        with self._lock:
            index = self.calls.get(slice_name, 0)
            self.calls[slice_name] = index + 1
        hold = self.hold
        if hold is not None and hold.slice == slice_name and hold.at == index:
            hold.reached.set()
            if not hold.released.wait(HOLD_SECONDS):
                hold.timed_out = True

    def after(self, slice_name: str, name: str) -> None:
        hold = self.hold
        if hold is not None and hold.slice != slice_name and hold.until == name:
            hold.released.set()

    def record(self, op: Op) -> None:
        with self._lock:
            self.ops.append(op)


class TracedStore:
    def __init__(self, inner: CheckpointStore, slice_name: str, tracer: Tracer) -> None:
        self.inner, self.name, self.tracer = inner, slice_name, tracer

    def create(self, checkpoint: StoredRun) -> StoredRun:
        return self.inner.create(checkpoint)

    def load(self, run_id: str) -> StoredRun:
        self.tracer.before(self.name)
        try:
            cp = self.inner.load(run_id)
            self.tracer.loaded[self.name] = cp.state
            return cp
        finally:
            self.tracer.after(self.name, "load")

    def claim(self, run_id: str, expected_version: int) -> StoredRun:
        self.tracer.before(self.name)
        try:
            cp = self.inner.claim(run_id, expected_version)
            self.tracer.record(Op(self.name, "claim", version=cp.version, epoch=cp.epoch))
            self.tracer.claimed.setdefault(self.name, []).append(self.tracer.loaded[self.name])
            return cp
        finally:
            self.tracer.after(self.name, "claim")

    def version(self, run_id: str) -> int:
        self.tracer.before(self.name)
        try:
            return self.inner.version(run_id)
        finally:
            self.tracer.after(self.name, "version")

    def save(self, checkpoint: StoredRun, expected_version: int) -> StoredRun:
        self.tracer.before(self.name)
        try:
            cp = self.inner.save(checkpoint, expected_version)
            self.tracer.record(Op(self.name, "save", version=cp.version, state=checkpoint.state))
            self.tracer.timeline.checkpointed(checkpoint.state)  # opens the gates of unlimited concurrency
            return cp
        finally:
            self.tracer.after(self.name, "save")


class TracedLog:
    def __init__(self, inner: ChunkLog, slice_name: str, tracer: Tracer) -> None:
        self.inner, self.name, self.tracer = inner, slice_name, tracer

    def open(self, run_id: str, epoch: int) -> int:
        self.tracer.before(self.name)
        try:
            count = self.inner.open(run_id, epoch)
            # the fence point: the log as it is now must still be the log's prefix at the end
            self.tracer.snapshots[(self.name, count)] = self.inner.read(run_id, 0, count)
            self.tracer.record(Op(self.name, "open", epoch=epoch, end=count))
            return count
        finally:
            self.tracer.after(self.name, "open")

    def append(self, run_id: str, start: int, chunks: Sequence[str], epoch: int) -> int:
        self.tracer.before(self.name)
        try:
            end = self.inner.append(run_id, start, chunks, epoch)
            self.tracer.record(Op(self.name, "append", epoch=epoch, start=start, end=end))
            return end
        finally:
            self.tracer.after(self.name, "append")

    def read(self, run_id: str, start: int, limit: int | None = None) -> list[str]:
        self.tracer.before(self.name)
        try:
            return self.inner.read(run_id, start, limit)
        finally:
            self.tracer.after(self.name, "read")

    def count(self, run_id: str) -> int:
        self.tracer.before(self.name)
        try:
            return self.inner.count(run_id)
        finally:
            self.tracer.after(self.name, "count")


Adapters = Callable[[], tuple[CheckpointStore, ChunkLog]]


@dataclass
class Contest:
    run_id: str
    tracer: Tracer
    timeline: Timeline
    results: dict[str, RunState | BaseException]
    store: CheckpointStore
    log: ChunkLog


def runner_for(name: str, adapters: Adapters, tracer: Tracer, timeline: Timeline, concurrency: int | None) -> Runner:
    store, log = adapters()
    agent = make_agent(timeline, concurrency)
    return Runner(agent, TracedStore(store, name, tracer), TracedLog(log, name, tracer), flush_interval=0)


async def one_slice(name: str, runner: Runner, run_id: str, tracer: Tracer) -> RunState:
    SLICE.set(name)  # this task's context: tool executions in it are tagged with the slice
    hold = tracer.hold
    if hold is not None and name != hold.slice and not await asyncio.to_thread(hold.reached.wait, HOLD_SECONDS):
        hold.timed_out = True
    try:
        return await runner.run_slice(run_id, budget_seconds=None)
    finally:
        if hold is not None:
            # whichever ended first must not keep the other waiting
            (hold.released if name != hold.slice else hold.reached).set()


def new_run(adapters: Adapters, timeline: Timeline, concurrency: int | None) -> tuple[str, CheckpointStore, ChunkLog]:
    store, log = adapters()
    run_id = Runner(make_agent(timeline, concurrency), store, log).create_run(PROMPT, message_id="msg_1").run_id
    return run_id, store, log


async def contest_on_one_loop(
    adapters_a: Adapters, adapters_b: Adapters, concurrency: int | None, hold: Hold | None = None
) -> Contest:
    timeline = Timeline()
    tracer = Tracer(timeline, hold)
    run_id, store, log = new_run(adapters_a, timeline, concurrency)
    a = runner_for("A", adapters_a, tracer, timeline, concurrency)
    b = runner_for("B", adapters_b, tracer, timeline, concurrency)
    results = await asyncio.gather(
        one_slice("A", a, run_id, tracer), one_slice("B", b, run_id, tracer), return_exceptions=True
    )
    return Contest(run_id, tracer, timeline, dict(zip("AB", results, strict=True)), store, log)


def contest_on_two_threads(adapters: Adapters, concurrency: int | None) -> Contest:
    """Each slice on its own thread and event loop, with its own adapter objects; started together."""
    timeline = Timeline()
    tracer = Tracer(timeline)
    run_id, store, log = new_run(adapters, timeline, concurrency)
    barrier = threading.Barrier(2, timeout=HOLD_SECONDS)
    results: dict[str, RunState | BaseException] = {}

    def work(name: str) -> None:
        runner = runner_for(name, adapters, tracer, timeline, concurrency)

        async def go() -> RunState:
            barrier.wait()
            return await one_slice(name, runner, run_id, tracer)

        try:
            results[name] = asyncio.run(go())
        except BaseException as exc:
            results[name] = exc

    threads = [threading.Thread(target=work, args=(name,)) for name in "AB"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(t.is_alive() for t in threads)
    return Contest(run_id, tracer, timeline, results, store, log)


def check_contest(c: Contest, reference: dict[str, Any], context: str, *, every_index: bool = True) -> str:
    """All the invariants of the module docstring; returns the fenced-off slice (``-``: none was)."""
    assert c.tracer.hold is None or not c.tracer.hold.timed_out, (context, "the held slice waited in vain")
    losers = [n for n, r in c.results.items() if isinstance(r, FencedError)]
    ended = [n for n, r in c.results.items() if isinstance(r, RunState) and r.status == "finished"]
    # Both may return when one came after the terminal checkpoint: it only completes the tail.
    assert len(losers) <= 1 and len(losers) + len(ended) == 2, (context, c.results)

    chunks = check_log(c.log, c.store, c.run_id, every_index=every_index)
    assert message_of(chunks) == reference, context

    ops = c.tracer.ops
    versions = sorted(op.version for op in ops if op.name in ("save", "claim"))
    assert len(versions) == len(set(versions)), (context, "two writes committed the same version")
    keys = [_boundary(op.state) for op in ops if op.name == "save"]
    assert len(keys) == len(set(keys)), (context, "a checkpoint was committed twice", keys)

    # Whoever claimed later fenced the other off: at its claim for checkpoints, at its open for the
    # log. The older slice committed nothing after either, and the log as it was at the fence is
    # still the log's prefix at the end.
    final_log = c.log.read(c.run_id, 0)
    for newer in "AB":
        for claim in (op for op in ops if op.slice == newer and op.name == "claim"):
            older = [op for op in ops if op.slice != newer and op.version < claim.version and op.name == "claim"]
            if not older:
                continue
            stale = [op for op in ops if op.slice != newer and op.name == "save"]
            assert all(op.version < claim.version for op in stale), (context, stale, claim)
        for opened in (op for op in ops if op.slice == newer and op.name == "open"):
            stale = [op for op in ops if op.slice != newer and op.name == "append" and op.epoch < opened.epoch]
            assert all(op.end <= opened.end for op in stale), (context, stale, opened)
            assert final_log[: opened.end] == c.tracer.snapshots[(newer, opened.end)], context
    if losers:  # the fenced-off slice is the one that claimed first
        loser = losers[0]
        epochs = {n: max((op.epoch for op in ops if op.slice == n and op.name == "claim"), default=-1) for n in "AB"}
        assert epochs[loser] < max(epochs.values()), (context, epochs)

    # No slice ran a tool whose result was in the checkpoint it went on from.
    for name, states in c.tracer.claimed.items():
        done = set().union(*(recorded_results(s) for s in states))
        ran = {call for slice_name, call in c.timeline.by_slice if slice_name == name}
        assert not ran & done, (context, name, ran & done)
    assert set(c.timeline.executions) == {"c1", "c2", "c3", "c4"}, (context, c.timeline.executions)
    return losers[0] if losers else "-"


def _boundary(state_json: str) -> tuple[Any, ...]:
    state = json.loads(state_json)
    turn = state["turn"] or {}
    outcomes = tuple(sorted(o["tool_call_id"] for o in turn.get("step_outcomes", [])))
    return (state["status"], turn.get("step"), turn.get("phase"), outcomes, len(turn.get("messages", [])))


async def reference_message(adapters: Adapters, concurrency: int | None) -> tuple[dict[str, Any], int]:
    """The uninterrupted run's message, and how many port calls its one slice makes."""
    timeline = Timeline()
    tracer = Tracer(timeline)
    run_id, store, log = new_run(adapters, timeline, concurrency)
    state = await one_slice("A", runner_for("A", adapters, tracer, timeline, concurrency), run_id, tracer)
    assert state.status == "finished"
    chunks = check_log(log, store, run_id)
    check_reference(chunks)
    # Every kind of write the slice makes, so that holding it before each call tries them all.
    assert {op.name for op in tracer.ops} >= {"claim", "open", "append", "save"}, tracer.ops
    return message_of(chunks), tracer.calls["A"]


def another_process(backend: Backend) -> Backend:
    """The backend's storage as another process sees it (each ``adapters()`` call: new objects)."""
    if backend.clients is None:
        return backend
    # DynamoDB + S3: another process has its own clients too; moto then handles each request
    # atomically, as DynamoDB and S3 do (see tests/aws/conftest.py).
    ddb, s3 = aws_clients()
    atomic_requests(ddb, s3)
    return aws_backend(ddb, s3)


CONCURRENCY = [pytest.param(1, id="one-at-a-time"), pytest.param(None, id="unlimited")]
SWEEP_STRIDE = {"memory": 1, "sqlite+files": 1, "dynamodb+s3": 7}


@pytest.mark.parametrize("concurrency", CONCURRENCY)
@pytest.mark.parametrize("backend_name", BACKENDS)
async def test_a_second_slice_at_any_port_call_of_the_first_leaves_one_writer(
    backend_name: str, concurrency: int | None, tmp_path: Path, reliability_report: Report
) -> None:
    began = time.monotonic()
    with backend_named(backend_name, tmp_path) as backend:
        a, b = another_process(backend), another_process(backend)
        reference, calls = await reference_message(a.adapters, concurrency)
        cases = [(at, until) for at in range(calls) for until in ("load", "open")]
        cases = cases[:: SWEEP_STRIDE[backend_name]]
        losers: dict[str, int] = {"A": 0, "B": 0, "-": 0}
        for at, until in cases:
            hold = Hold("A", at, until)
            contest = await contest_on_one_loop(a.adapters, b.adapters, concurrency, hold)
            context = f"{backend_name}: A held before its call #{at} until B's {until}"
            losers[check_contest(contest, reference, context, every_index=backend.cheap_reads)] += 1
            a.close()
            b.close()
    summary = f"{len(cases)} of {2 * calls}, fenced off: {losers} ({time.monotonic() - began:.1f} s)"
    print(f"overlapping slices tried: {summary}")
    reliability_report("overlapping_slices_tried", summary)
    assert len(cases) >= 2 * calls // SWEEP_STRIDE[backend_name]
    if SWEEP_STRIDE[backend_name] == 1:
        assert losers["A"] > 0 and losers["B"] > 0  # both orders happened


RACES = {"memory": 20, "sqlite+files": 8, "dynamodb+s3": 3}


@pytest.mark.parametrize("concurrency", CONCURRENCY)
@pytest.mark.parametrize("backend_name", BACKENDS)
async def test_two_slices_started_together_on_one_loop_leave_one_writer(
    backend_name: str, concurrency: int | None, tmp_path: Path, reliability_report: Report
) -> None:
    with backend_named(backend_name, tmp_path) as backend:
        a, b = another_process(backend), another_process(backend)
        reference, _ = await reference_message(a.adapters, concurrency)
        for i in range(RACES[backend_name]):
            contest = await contest_on_one_loop(a.adapters, b.adapters, concurrency)
            check_contest(contest, reference, f"{backend_name}: race {i}", every_index=backend.cheap_reads)
            a.close()
            b.close()
    reliability_report("gathered_races", RACES[backend_name])


@pytest.mark.parametrize("concurrency", CONCURRENCY)
def test_two_slices_on_two_threads_over_sqlite_and_files_leave_one_writer(
    concurrency: int | None, tmp_path: Path, reliability_report: Report
) -> None:
    with backend_named("sqlite+files", tmp_path) as backend:
        reference, _ = asyncio.run(reference_message(backend.adapters, concurrency))
        runs = 15
        for i in range(runs):
            contest = contest_on_two_threads(backend.adapters, concurrency)
            check_contest(contest, reference, f"threads: race {i}")
            backend.close()
    reliability_report("threaded_races", runs)
