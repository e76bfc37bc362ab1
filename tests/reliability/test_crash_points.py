"""A crash at every port call of every slice: the run still ends with the uninterrupted message.

For each backend the scenario of :mod:`tests.reliability.scenario` first runs uninterrupted, sliced
at every step boundary, and every checkpoint-store and chunk-log call it makes is numbered. Then,
one point per run, a :class:`~tests.support.SimulatedCrash` (a slice dying like a Lambda timeout)
is injected before or after each of those calls, and the run is driven on as the state machine
would: the crashed slice is run again, by a fresh process for the SQLite/files and AWS backends.
The read and count calls that only recovery makes are covered by a second crash inside the
recovering slice (``test_a_second_crash_...``), and the finalizer's calls by a cancelled run.

Every point must give: the same assembled message as the uninterrupted run, no tool executed again
after its result was checkpointed, a contiguous log with exactly one ``finish``, last, that
extends whatever the crashed slice had written, and the uninterrupted run's final status.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from durable_harness.runner import Runner

from tests.reliability.backends import BACKENDS, Backend, backend_named
from tests.reliability.conftest import Report
from tests.reliability.scenario import (
    CALLS,
    PROMPT,
    CrashPlan,
    Outcome,
    PlannedLog,
    PlannedStore,
    Timeline,
    check_log,
    check_reference,
    drive,
    make_agent,
    recorded_results,
)
from tests.support import message_of

CONCURRENCY = [pytest.param(1, id="one-at-a-time"), pytest.param(None, id="unlimited")]

# Moto answers a request in a few milliseconds and a run makes ~100 of them, so on DynamoDB + S3
# only every k-th point is tried: k odd, so that "before" and "after" points are both sampled,
# and a different offset per concurrency, so that the two variants cover different calls.
STRIDE = {"memory": 1, "sqlite+files": 1, "dynamodb+s3": 3}
SECOND_STRIDE = {"memory": 3, "sqlite+files": 13}
"""Second crashes (inside the recovering slice): every k-th pair; none on DynamoDB + S3."""
CANCEL_STRIDE = {"memory": 1, "sqlite+files": 1, "dynamodb+s3": 5}
KINDS = {"store.load", "store.claim", "store.save", "store.version", "log.open", "log.append"}
"""The kinds of port call every slice makes: each gets crash points before and after it."""


@dataclass
class Trial:
    """One run of the scenario on a backend, with a crash plan."""

    plan: CrashPlan
    timeline: Timeline
    outcome: Outcome
    run_id: str
    chunks: list[dict[str, Any]]
    final_state: dict[str, Any]


async def trial(
    backend: Backend,
    concurrency: int | None,
    points: set[int],
    *,
    cancel_after_step: int | None = None,
    give_up_after: int | None = None,
) -> Trial:
    try:
        return await _trial(backend, concurrency, points, cancel_after_step, give_up_after)
    finally:
        backend.close()  # every adapter object this trial made (connections, reader threads)


async def _trial(
    backend: Backend,
    concurrency: int | None,
    points: set[int],
    cancel_after_step: int | None,
    give_up_after: int | None,
) -> Trial:
    plan, timeline = CrashPlan(points), Timeline()
    agent = make_agent(timeline, concurrency)
    store, log = backend.adapters()  # unwrapped: how the test itself looks at the storage

    def make_runner() -> Runner:
        s, lg = backend.adapters() if backend.cold_restart else (store, log)
        return Runner(agent, PlannedStore(s, plan, timeline), PlannedLog(lg, plan), flush_interval=0)

    run_id = Runner(agent, store, log).create_run(PROMPT, message_id="msg_1").run_id
    cancel_when: Callable[[], bool] | None = None
    if cancel_after_step is not None:

        def cancel_when() -> bool:
            turn = json.loads(store.load(run_id).state)["turn"]
            return turn is not None and turn["step"] > cancel_after_step

    def snapshot() -> tuple[list[str], int]:
        state = json.loads(store.load(run_id).state)
        terminal = state["status"] in ("finished", "failed", "cancelled", "awaiting_tool_approval")
        return log.read(run_id, 0), -1 if terminal else state["stream"]["chunk_count"]

    outcome = await drive(
        make_runner,
        run_id,
        plan,
        snapshot,
        cold_restart=backend.cold_restart,
        cancel_when=cancel_when,
        give_up_after=give_up_after,
    )
    chunks = check_log(log, store, run_id, every_index=backend.cheap_reads)
    final_log = log.read(run_id, 0)
    for prefix, covered, resumed_by in zip(outcome.prefixes, outcome.covered, outcome.resumed_by, strict=True):
        assert final_log[: len(prefix)] == prefix  # append-only: nothing written is ever rewritten
        if 0 <= covered < len(prefix) and resumed_by == "slice":
            # the crashed slice had written past its checkpoint: the next slice resets the step
            assert chunks[len(prefix)] == {"type": "reset-step"}, (len(prefix), covered)
    return Trial(plan, timeline, outcome, run_id, chunks, json.loads(store.load(run_id).state))


def check_trial(t: Trial, reference: Trial, context: str) -> None:
    assert sorted(t.plan.fired) == sorted(t.plan.points), (context, "a crash point was never reached")
    assert t.outcome.status == reference.outcome.status, context
    assert not t.outcome.finalized, (context, "the run could not go on and was finalized as failed")
    assert t.outcome.crashes == len(t.plan.points), context
    assert message_of(t.chunks) == message_of(reference.chunks), context
    assert t.timeline.reexecuted_after_checkpoint() == [], (context, t.timeline.events)
    executions = t.timeline.executions
    assert set(executions) == set(reference.timeline.executions), (context, executions)
    assert all(n <= 1 + t.outcome.crashes for n in executions.values()), (context, executions)
    assert recorded_results(json.dumps(t.final_state)) == recorded_results(json.dumps(reference.final_state)), context
    assert t.final_state["final_result"] == reference.final_state["final_result"], context


async def reference_trial(backend: Backend, concurrency: int | None, **options: Any) -> Trial:
    reference = await trial(backend, concurrency, set(), **options)
    assert reference.outcome.crashes == 0 and not reference.outcome.finalized
    expected = ("c1", "c2") if options.get("cancel_after_step") == 0 else tuple(CALLS)
    assert reference.timeline.executions == dict.fromkeys(expected, 1)
    return reference


@pytest.mark.parametrize("concurrency", CONCURRENCY)
@pytest.mark.parametrize("backend_name", BACKENDS)
async def test_a_crash_at_any_port_call_of_any_slice_recovers_the_same_message(
    backend_name: str, concurrency: int | None, tmp_path: Path, reliability_report: Report
) -> None:
    began = time.monotonic()
    with backend_named(backend_name, tmp_path) as backend:
        reference = await reference_trial(backend, concurrency)
        assert reference.outcome.status == "finished" and reference.outcome.slices == 3
        check_reference(reference.chunks)
        existing = 2 * len(reference.plan.calls)
        stride = STRIDE[backend_name]
        offset = 0 if concurrency == 1 or stride == 1 else stride // 2
        points = range(offset, existing, stride)
        kinds: set[str] = set()
        pairs: list[tuple[int, int]] = []
        pair_kinds: dict[tuple[int, int], str] = {}  # what the second point crashes (as describe says)
        for point in points:
            t = await trial(backend, concurrency, {point})
            check_trial(t, reference, f"{backend_name}: {t.plan.describe(point)}")
            kinds.add(t.plan.describe(point).split(" #")[0])
            assert t.outcome.slices >= reference.outcome.slices
            # The slice that recovered from this crash: if it had to repair something (reset a
            # partial step, append lost terminal chunks) it read or counted the log; a second
            # crash at each of its port calls is tried below.
            recovering = next(i for i, span in enumerate(t.outcome.spans) if span[0] <= point // 2 < span[1]) + 1
            start, end, _ = t.outcome.spans[recovering]
            if {"log.read", "log.count"} & set(t.plan.calls[start:end]):
                for second in range(2 * start, 2 * end):
                    pairs.append((point, second))
                    pair_kinds[(point, second)] = t.plan.describe(second).split(" #")[0]
        tried = len(points)
        print(f"crash points tried: {tried} of {existing}")
        reliability_report("crash_points_tried", f"{tried} of {existing} ({time.monotonic() - began:.1f} s)")
        assert set(reference.plan.calls) >= KINDS and tried >= existing // stride
        if stride == 1:  # every kind of call the slices make was crashed before and after it took effect
            for name in KINDS:
                assert {f"before {name}", f"after {name}"} <= kinds, kinds

        if backend_name not in SECOND_STRIDE:
            return
        began = time.monotonic()
        second_stride = SECOND_STRIDE[backend_name]
        sample = pairs[::second_stride]
        # ... and at least one pair for each kind of call a recovering slice makes.
        for kind in sorted(set(pair_kinds.values()) - {pair_kinds[p] for p in sample}):
            sample.append(next(p for p in pairs if pair_kinds[p] == kind))
        kinds.clear()
        for first, second in sample:
            t = await trial(backend, concurrency, {first, second})
            check_trial(t, reference, f"{backend_name}: {t.plan.describe(first)}, then {t.plan.describe(second)}")
            kinds.add(t.plan.describe(second).split(" #")[0])
    print(f"double crash points tried: {len(sample)} of {len(pairs)}")
    reliability_report("double_crash_points_tried", f"{len(sample)} of {len(pairs)} ({time.monotonic() - began:.1f} s)")
    assert pairs and len(sample) >= len(pairs) // second_stride  # recoveries that repaired something
    if backend_name == "memory":  # the repair paths' own calls were crashed too
        for kind in ("before log.read", "after log.read", "before log.count", "after log.count"):
            assert kind in kinds, kinds


@pytest.mark.parametrize("backend_name", BACKENDS)
async def test_a_crash_at_any_point_of_a_cancelled_run_still_ends_it_cancelled_with_one_finish(
    backend_name: str, tmp_path: Path, reliability_report: Report
) -> None:
    """The cancel (``finalize``) claims, checkpoints and appends too: crash at each of those."""
    began = time.monotonic()
    with backend_named(backend_name, tmp_path) as backend:
        reference = await reference_trial(backend, 1, cancel_after_step=0)
        assert reference.outcome.status == "cancelled"
        assert reference.chunks[-1] == {"type": "finish", "finishReason": "other"}
        assert [s[2] for s in reference.outcome.spans] == ["slice", "cancel"]
        existing = 2 * len(reference.plan.calls)
        stride = CANCEL_STRIDE[backend_name]
        points = range(0, existing, stride)
        for point in points:
            t = await trial(backend, 1, {point}, cancel_after_step=0)
            context = f"{backend_name}: {t.plan.describe(point)}"
            assert sorted(t.plan.fired) == [point], context
            assert t.outcome.status == "cancelled", context
            assert message_of(t.chunks) == message_of(reference.chunks), context
            assert t.timeline.reexecuted_after_checkpoint() == [], (context, t.timeline.events)
            assert t.chunks[-1] == {"type": "finish", "finishReason": "other"}, context
    print(f"crash points tried (cancelled run): {len(points)} of {existing}")
    reliability_report("cancel_crash_points_tried", f"{len(points)} of {existing} ({time.monotonic() - began:.1f} s)")
    assert set(reference.plan.calls) >= KINDS and len(points) >= existing // stride


FINALIZER_STRIDE = {"memory": 1, "sqlite+files": 3, "dynamodb+s3": 9}
FINALIZER_SECOND_STRIDE = 5  # memory: a second crash at every 5th point of the finalizer's calls


@pytest.mark.parametrize("backend_name", BACKENDS)
async def test_the_failure_finalizer_after_a_crash_at_any_point_ends_the_run_with_one_finish(
    backend_name: str, tmp_path: Path, reliability_report: Report
) -> None:
    """A slice crashed past its retries: the finalizer ends the run ``failed`` with ``error`` and
    ``finish`` after whatever the slice wrote, or only repairs a run that had already ended. On
    the memory backend the finalizer itself also crashes, at each of its port calls."""
    began = time.monotonic()
    with backend_named(backend_name, tmp_path) as backend:
        reference = await reference_trial(backend, 1)
        existing = 2 * len(reference.plan.calls)
        plans: list[set[int]] = []
        pairs: list[set[int]] = []
        for first in range(0, existing, FINALIZER_STRIDE[backend_name]):
            plans.append({first})
            if backend_name == "memory":
                t = await trial(backend, 1, {first}, give_up_after=1)
                start, end, kind = t.outcome.spans[-1]
                assert kind == "finalize"
                pairs += [{first, second} for second in range(2 * start, 2 * end)]
        plans += pairs[::FINALIZER_SECOND_STRIDE]
        for points in plans:
            t = await trial(backend, 1, points, give_up_after=1)
            first = min(points)
            context = f"{backend_name}: {' then '.join(t.plan.describe(p) for p in sorted(points))}"
            assert sorted(t.plan.fired) == sorted(points), context
            assert t.outcome.finalized, context
            crashed_log = t.outcome.prefixes[0]
            if t.outcome.status == "finished":  # the crash came after the terminal checkpoint
                assert first >= 2 * (len(reference.plan.calls) - 2), context
                assert message_of(t.chunks) == message_of(reference.chunks), context
                continue
            assert t.outcome.status == "failed", context
            assert t.chunks[-2:] == [
                {"type": "error", "errorText": "The run failed."},
                {"type": "finish", "finishReason": "error"},
            ], context
            # the client keeps what it saw of the crashed slice; the finalizer adds no content
            seen = message_of([json.loads(c) for c in crashed_log]) if crashed_log else None
            assert message_of(t.chunks)["parts"] == (seen["parts"] if seen else []), context
            assert t.timeline.reexecuted_after_checkpoint() == [], (context, t.timeline.events)
    print(f"crash points tried (failure finalizer): {len(plans)}")
    reliability_report("finalizer_crash_points_tried", f"{len(plans)} ({time.monotonic() - began:.1f} s)")
    assert len(plans) >= existing // FINALIZER_STRIDE[backend_name]
