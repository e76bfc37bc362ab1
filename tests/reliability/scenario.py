"""The scripted run the reliability suites share, fault injection at the ports, and the checks.

The run: three model steps over four tools, sliced at every step boundary (``budget_seconds=0``)::

    step 0  "Let me look." + fetch(alpha) [c1], fetch(beta) [c2]
    step 1  count(gamma) [c3], count(delta) [c4]
    step 2  reasoning + the final text answer

With ``tool_call_concurrency=1`` the tools are sync functions (run one at a time in a worker
thread). With unlimited concurrency they are async and *gated* on checkpoints, so their order is
deterministic and interesting: c2 is still running while c1's result is checkpointed, and c3
finishes only after c4's result was checkpointed (results out of the model's order, reported in
order). A gate opens when the checkpoint store commits a state holding the awaited result.

:class:`CrashPlan` counts every checkpoint-store call (``load``, ``claim``, ``save``, ``version``;
``create`` excluded) and every chunk-log call (``open``, ``append``, ``read``, ``count``) of a run, in the
order they happen. Call ``i`` has two crash points: ``2*i`` (before the call) and ``2*i+1``
(after it took effect, before its caller sees the answer).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import suppress
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

from durable_harness import Agent, tool
from durable_harness.errors import HarnessError
from durable_harness.messages import ModelMessage, TextPart, UserMessage
from durable_harness.models.base import ModelStreamPart
from durable_harness.models.scripted import ScriptedModel, text_step, tool_calls_step
from durable_harness.ports import CheckpointStore, ChunkLog, StoredRun
from durable_harness.protocol import harness_parts as hp
from durable_harness.runner import Runner
from pydantic import BaseModel

from tests.support import SimulatedCrash, message_of

T = TypeVar("T")

CALLS = {"c1": "fetch:alpha", "c2": "fetch:beta", "c3": "count:gamma", "c4": "count:delta"}
GATES = {"c2": "c1", "c3": "c4"}
"""Unlimited concurrency: the call on the left finishes only once the right one's result is checkpointed."""
SLICE: ContextVar[str] = ContextVar("SLICE", default="")
"""Which slice is running (set by tests that run several at once); tool executions are tagged with it."""
FINAL_TEXT = "Alpha and beta are fine; gamma has 5 letters and delta 5."
PROMPT: list[ModelMessage] = [UserMessage(content=[TextPart(text="check the items")])]


class Item(BaseModel):
    name: str


def reasoning_text_step(reasoning: str, text: str) -> list[ModelStreamPart]:
    """A step that reasons, then answers ``text``."""
    words = reasoning.split(" ")
    parts: list[ModelStreamPart] = [hp.ReasoningStartPart(id="r0")]
    parts += [hp.ReasoningDeltaPart(id="r0", delta=w if i == 0 else " " + w) for i, w in enumerate(words)]
    parts.append(hp.ReasoningEndPart(id="r0"))
    return parts + text_step(text)


def script() -> ScriptedModel:
    return ScriptedModel(
        [
            tool_calls_step(("c1", "fetch", {"name": "alpha"}), ("c2", "fetch", {"name": "beta"}), text="Let me look."),
            tool_calls_step(("c3", "count", {"name": "gamma"}), ("c4", "count", {"name": "delta"})),
            reasoning_text_step("All four results are in.", FINAL_TEXT),
        ]
    )


def recorded_results(state_json: str) -> set[str]:
    """Tool call ids whose results a checkpointed run state holds (step outcomes or tool messages)."""
    turn = json.loads(state_json).get("turn")
    if not turn:
        return set()
    ids = {o["tool_call_id"] for o in turn["step_outcomes"]}
    for message in turn["messages"]:
        if message["role"] == "tool":
            ids |= {p["toolCallId"] for p in message["content"] if p["type"] == "tool-result"}
    return ids


class Gate:
    """Opened from any thread; awaited on an event loop (bounded, so a bug cannot hang the suite)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = False
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    def open(self) -> None:
        with self._lock:
            self._open = True
            waiters, self._waiters = self._waiters, []
        for loop, event in waiters:
            if not loop.is_closed():  # a slice that was fenced off and ended waits for nothing
                with suppress(RuntimeError):  # ... and its loop may close between check and call
                    loop.call_soon_threadsafe(event.set)

    async def wait(self, timeout: float = 10.0) -> None:
        with self._lock:
            if self._open:
                return
            event = asyncio.Event()
            self._waiters.append((asyncio.get_running_loop(), event))
        async with asyncio.timeout(timeout):
            await event.wait()


@dataclass
class Timeline:
    """What happened, in order: tool executions and checkpointed tool results (``recorded``)."""

    events: list[tuple[str, str]] = field(default_factory=list)
    by_slice: list[tuple[str, str]] = field(default_factory=list)
    """``(slice, call id)`` of every execution, the slice as :data:`SLICE` named it."""
    gates: dict[str, Gate] = field(default_factory=lambda: {c: Gate() for c in GATES.values()})
    lock: threading.Lock = field(default_factory=threading.Lock)

    def executed(self, call_id: str) -> None:
        with self.lock:
            self.events.append(("exec", call_id))
            self.by_slice.append((SLICE.get(), call_id))

    def checkpointed(self, state_json: str) -> None:
        recorded = recorded_results(state_json)
        with self.lock:
            seen = {c for kind, c in self.events if kind == "recorded"}
            self.events += [("recorded", c) for c in sorted(recorded - seen)]
        for call_id in recorded:
            if call_id in self.gates:
                self.gates[call_id].open()

    @property
    def executions(self) -> Counter[str]:
        return Counter(c for kind, c in self.events if kind == "exec")

    def reexecuted_after_checkpoint(self) -> list[str]:
        """Calls that ran again after their result was checkpointed (must be empty)."""
        recorded: set[str] = set()
        bad = []
        for kind, call_id in self.events:
            if kind == "recorded":
                recorded.add(call_id)
            elif call_id in recorded:
                bad.append(call_id)
        return bad


def make_agent(timeline: Timeline, concurrency: int | None) -> Agent:
    """The scenario's agent; its tools report every execution to ``timeline``."""
    if concurrency == 1:

        @tool
        def fetch(input: Item) -> dict[str, str]:
            """Fetch an item."""
            timeline.executed(_call_of("fetch", input.name))
            return {"item": input.name, "status": "ok"}

        @tool
        def count(input: Item) -> int:
            """Count letters."""
            timeline.executed(_call_of("count", input.name))
            return len(input.name)

    else:

        @tool
        async def fetch(input: Item) -> dict[str, str]:
            """Fetch an item."""
            call_id = _call_of("fetch", input.name)
            if call_id in GATES:
                await timeline.gates[GATES[call_id]].wait()
            timeline.executed(call_id)
            return {"item": input.name, "status": "ok"}

        @tool
        async def count(input: Item) -> int:
            """Count letters."""
            call_id = _call_of("count", input.name)
            if call_id in GATES:
                await timeline.gates[GATES[call_id]].wait()
            timeline.executed(call_id)
            return len(input.name)

    return Agent(model=script(), instructions="Be brief.", tools=[fetch, count], tool_call_concurrency=concurrency)


def _call_of(tool_name: str, name: str) -> str:
    return next(c for c, label in CALLS.items() if label == f"{tool_name}:{name}")


# --- crash injection at the ports ----------------------------------------------------------------


class CrashPlan:
    """Numbers the port calls of a run and crashes at the chosen points (each fires once)."""

    def __init__(self, points: Iterable[int] = ()) -> None:
        self.points = set(points)
        self.calls: list[str] = []
        self.fired: list[int] = []
        self._lock = threading.Lock()

    def around(self, name: str, call: Callable[[], T]) -> T:
        with self._lock:
            index = len(self.calls)
            self.calls.append(name)
        if 2 * index in self.points:
            self.fired.append(2 * index)
            raise SimulatedCrash(f"crash before {name} (call {index})")
        result = call()
        if 2 * index + 1 in self.points:
            self.fired.append(2 * index + 1)
            raise SimulatedCrash(f"crash after {name} (call {index})")
        return result

    def describe(self, point: int) -> str:
        return f"{'before' if point % 2 == 0 else 'after'} {self.calls[point // 2]} #{point // 2}"


class PlannedStore:
    """A checkpoint store whose calls go through a :class:`CrashPlan`; commits feed a timeline."""

    def __init__(self, inner: CheckpointStore, plan: CrashPlan, timeline: Timeline | None = None) -> None:
        self.inner, self.plan, self.timeline = inner, plan, timeline

    def create(self, checkpoint: StoredRun) -> StoredRun:
        return self.inner.create(checkpoint)

    def load(self, run_id: str) -> StoredRun:
        return self.plan.around("store.load", lambda: self.inner.load(run_id))

    def claim(self, run_id: str, expected_version: int) -> StoredRun:
        return self.plan.around("store.claim", lambda: self.inner.claim(run_id, expected_version))

    def version(self, run_id: str) -> int:
        return self.plan.around("store.version", lambda: self.inner.version(run_id))

    def save(self, checkpoint: StoredRun, expected_version: int) -> StoredRun:
        def save() -> StoredRun:
            saved = self.inner.save(checkpoint, expected_version)
            if self.timeline is not None:  # committed: a crash right after it cannot undo it
                self.timeline.checkpointed(checkpoint.state)
            return saved

        return self.plan.around("store.save", save)


class PlannedLog:
    """A chunk log whose calls go through a :class:`CrashPlan`."""

    def __init__(self, inner: ChunkLog, plan: CrashPlan) -> None:
        self.inner, self.plan = inner, plan

    def open(self, run_id: str, epoch: int) -> int:
        return self.plan.around("log.open", lambda: self.inner.open(run_id, epoch))

    def append(self, run_id: str, start: int, chunks: Sequence[str], epoch: int) -> int:
        return self.plan.around("log.append", lambda: self.inner.append(run_id, start, chunks, epoch))

    def read(self, run_id: str, start: int, limit: int | None = None) -> list[str]:
        return self.plan.around("log.read", lambda: self.inner.read(run_id, start, limit))

    def count(self, run_id: str) -> int:
        return self.plan.around("log.count", lambda: self.inner.count(run_id))


# --- driving a run like the state machine ---------------------------------------------------------


@dataclass
class Outcome:
    """How a driven run went."""

    status: str
    slices: int
    crashes: int
    finalized: bool
    """Whether the failure finalizer had to end the run (a slice failed with a non-crash error)."""
    spans: list[tuple[int, int, str]]
    """Port-call index ranges ``[first, end)`` of each attempt, with what it was (slice, cancel, finalize)."""
    prefixes: list[list[str]]
    """The log right after each crash (the final log must extend each of them)."""
    covered: list[int]
    """The chunk count the checkpoint covered right after each crash (``-1``: a terminal checkpoint)."""
    resumed_by: list[str]
    """What ran next after each crash: ``slice``, ``cancel`` or ``finalize``."""


async def drive(
    make_runner: Callable[[], Runner],
    run_id: str,
    plan: CrashPlan,
    snapshot: Callable[[], tuple[list[str], int]],
    *,
    cold_restart: bool = False,
    cancel_when: Callable[[], bool] | None = None,
    give_up_after: int | None = None,
    budget: float | None = 0,
    max_attempts: int = 40,
) -> Outcome:
    """Drive the run to its end as the state machine does.

    A slice that crashed is run again (with new adapter objects when ``cold_restart``); a slice
    that fails with an error instead goes to the failure finalizer (``finalize``). Once
    ``cancel_when()`` is true (asked before each slice) the run is cancelled instead
    (``finalize(status="cancelled")``). After ``give_up_after`` crashed slices the run goes to the
    failure finalizer (retries exhausted). A crashed cancel or finalizer is retried the same way.
    """
    runner = make_runner()
    crashes, slices = 0, 0
    mode = "slice"
    spans: list[tuple[int, int, str]] = []
    prefixes: list[list[str]] = []
    covered: list[int] = []
    resumed_by: list[str] = []
    for _ in range(max_attempts):
        if mode == "slice" and cancel_when is not None and cancel_when():
            mode = "cancel"
        if len(resumed_by) < crashes:
            resumed_by.append(mode)
        first, kind = len(plan.calls), mode
        try:
            if mode == "cancel":
                state = await runner.finalize(run_id, status="cancelled")
            elif mode == "finalize":
                state = await runner.finalize(run_id, error="The run failed.")
            else:
                slices += 1
                state = await runner.run_slice(run_id, budget_seconds=budget)
        except SimulatedCrash:
            crashes += 1
            chunks, count = snapshot()
            prefixes.append(chunks)
            covered.append(count)
            if mode == "slice" and give_up_after is not None and crashes >= give_up_after:
                mode = "finalize"
            if cold_restart:
                runner = make_runner()
            continue
        except HarnessError:
            mode = "finalize"  # the state machine's catch: the failure finalizer ends the run
            continue
        finally:
            spans.append((first, len(plan.calls), kind))
        if state.terminal:
            return Outcome(state.status, slices, crashes, mode == "finalize", spans, prefixes, covered, resumed_by)
    raise AssertionError(f"run {run_id} did not end within {max_attempts} attempts")


# --- checks ---------------------------------------------------------------------------------------


def check_log(log: ChunkLog, store: CheckpointStore, run_id: str, *, every_index: bool = True) -> list[dict[str, Any]]:
    """The run's log, checked: contiguous from 0, exactly one ``finish``, last; the checkpoint covers it."""
    raw = log.read(run_id, 0)
    count = log.count(run_id)
    assert len(raw) == count, (len(raw), count)
    starts: Iterator[int] = iter(range(count)) if every_index else iter(sorted({0, 1, count // 2, count - 1}))
    for start in starts:
        assert log.read(run_id, start) == raw[start:], start
        assert log.read(run_id, start, 1) == raw[start : start + 1], start
    chunks = [json.loads(c) for c in raw]
    types = [c["type"] for c in chunks]
    assert types.count("finish") == 1 and types[-1] == "finish", types[-5:]
    assert types[0] == "start" and types.count("start") == 1, types[:3]
    state = json.loads(store.load(run_id).state)
    assert state["stream"]["chunk_count"] == count, (state["stream"]["chunk_count"], count)
    return chunks


def check_reference(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """The uninterrupted run's message is the scenario's (so comparing with it means something)."""
    message = message_of(chunks)
    tools = [(p["toolCallId"], p["state"], p.get("output")) for p in message["parts"] if p["type"].startswith("tool-")]
    assert tools == [
        ("c1", "output-available", {"item": "alpha", "status": "ok"}),
        ("c2", "output-available", {"item": "beta", "status": "ok"}),
        ("c3", "output-available", 5),
        ("c4", "output-available", 5),
    ], tools
    assert [p["type"] for p in message["parts"]].count("step-start") == 3
    assert message["parts"][-1] == {"type": "text", "text": FINAL_TEXT, "state": "done"}
    assert "reset-step" not in [c["type"] for c in chunks]
    return message
