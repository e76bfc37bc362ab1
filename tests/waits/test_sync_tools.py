"""The durable primitives in a sync tool (issue 21): the same ``ctx`` calls without ``await``.

A sync tool runs on the tool pool, off the event loop; there ``ctx.step``, ``ctx.wait_for_event``
and ``ctx.sleep`` block the tool's thread and return the value itself. Real parts: the runner over
the memory store and log, the built-in agent with a scripted model, the real tool pool.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from durable_harness.tools import ToolContext
from durable_harness.tools.pool import set_tool_threads, tool_threads
from durable_harness.waits import WaitTimeout

from tests.support import log_chunks, message_of, until_due
from tests.waits.test_primitives import Build, make_runner, one_tool_agent, prompt, tool_part


@pytest.fixture
def one_tool_thread() -> Iterator[None]:
    """A tool pool of one thread: a step that needed a second one would never run."""
    set_tool_threads(1)
    yield
    set_tool_threads(tool_threads())


def sync_build(effects: Path, threads: list[tuple[str, int]], *, timeout: float | None = None,
               nap: float | None = None) -> Any:  # fmt: skip
    """A sync tool: a recorded step appending to ``effects``, a wait for ``build-done``, a sleep."""

    def job(input: Build, ctx: ToolContext) -> dict[str, Any]:
        """Start a build and wait for it (a sync tool)."""
        threads.append(("tool", threading.get_ident()))
        hook = ctx.event_url("build-done", timeout_seconds=timeout)

        def note(line: str) -> None:
            with effects.open("a") as f:
                f.write(line + "\n")

        def start() -> dict[str, str]:
            threads.append(("step", threading.get_ident()))
            note(f"started {input.repo}")
            return {"id": "b-1", "hook": hook}

        build = ctx.step("start", start)
        try:
            event = ctx.wait_for_event("build-done", timeout_seconds=timeout)
        except WaitTimeout as exc:
            return {"build": build["id"], "status": "timed out", "why": str(exc)}
        if nap is not None:
            ctx.sleep(nap)
            ctx.step("after", lambda: note("woke"))
        return {"build": build["id"], "status": event["status"], "hook": build["hook"] == hook}

    return job


async def test_a_sync_tools_step_runs_once_in_its_own_thread_and_its_wait_parks_and_resumes(
    tmp_path: Path, one_tool_thread: None
) -> None:
    effects = tmp_path / "effects.txt"
    threads: list[tuple[str, int]] = []
    runner, log = make_runner(one_tool_agent(sync_build(effects, threads, nap=0.2)))
    run = runner.create_run(prompt(), message_id="msg_1")
    parked = await runner.run(run.run_id)
    assert parked.status == "awaiting_event" and [w.name for w in parked.waits] == ["build-done"]
    assert effects.read_text() == "started acme/app\n"
    assert threads[0] == ("tool", threads[1][1]) and threads[1][0] == "step"  # the tool's own thread
    assert runner.load(run.run_id).status == "awaiting_event"

    runner.events.deliver(run.run_id, "build-done", {"status": "passed"}, outcome="resumed", via="test")
    slept = await runner.run(run.run_id)  # the tool runs again from its start, then sleeps
    assert slept.status == "awaiting_event" and [w.kind for w in slept.waits] == ["sleep"]
    await until_due(runner, run.run_id)
    final = await runner.run(run.run_id)
    assert final.status == "finished"
    assert effects.read_text() == "started acme/app\nwoke\n"  # each step once, across two parks
    assert [kind for kind, _ in threads] == ["tool", "step", "tool", "tool"]
    assert tool_part(log, run.run_id)["output"] == {"build": "b-1", "status": "passed", "hook": True}
    chunks = log_chunks(log, run.run_id)
    assert [c["type"] for c in chunks].count("finish") == 1
    waits = [p for p in message_of(chunks)["parts"] if p["type"] == "data-wait"]
    assert [w["data"]["status"] for w in waits] == ["resumed"]  # one part per call, replaced in place


async def test_a_sync_tools_wait_timeout_reaches_it_as_wait_timeout(tmp_path: Path) -> None:
    runner, log = make_runner(one_tool_agent(sync_build(tmp_path / "e.txt", [], timeout=0.2)))
    run = runner.create_run(prompt(), message_id="msg_1")
    assert (await runner.run(run.run_id)).status == "awaiting_event"
    await until_due(runner, run.run_id)
    assert (await runner.run(run.run_id)).status == "finished"
    assert tool_part(log, run.run_id)["output"]["status"] == "timed out"


async def test_a_sync_tools_early_event_and_its_failing_step_are_handled_like_an_async_tools(tmp_path: Path) -> None:
    attempts: list[int] = []

    def flaky() -> str:
        attempts.append(1)
        if len(attempts) < 2:
            raise RuntimeError("first try failed")
        return "built"

    def job(input: Build, ctx: ToolContext) -> dict[str, Any]:
        """A retried step, then an event that came first."""
        return {"result": ctx.step("build", flaky), "event": ctx.wait_for_event("go")}

    runner, log = make_runner(one_tool_agent(job, retries=1))
    run = runner.create_run(prompt(), message_id="msg_1")
    runner.events.deliver(run.run_id, "go", {"early": True}, outcome="kept", via="test")
    assert (await runner.run(run.run_id)).status == "finished"
    assert attempts == [1, 1]
    assert tool_part(log, run.run_id)["output"] == {"result": "built", "event": {"early": True}}


async def test_a_sync_tool_that_outlives_its_cancelled_slice_is_not_left_waiting_on_the_loop(tmp_path: Path) -> None:
    reached, release, over = threading.Event(), threading.Event(), threading.Event()
    outcome: list[str] = []

    def job(input: Build, ctx: ToolContext) -> str:
        """A step, a pause the test controls, a second step (after its slice was cancelled)."""
        try:
            ctx.step("first", lambda: 1)
            reached.set()
            release.wait(30)
            ctx.step("second", lambda: 2)
            outcome.append("second step recorded")
        except BaseException as exc:  # what reached the thread, reported to the test
            outcome.append(type(exc).__name__)
        finally:
            over.set()
        return "done"

    runner, _ = make_runner(one_tool_agent(job))
    run = runner.create_run(prompt(), message_id="msg_1")
    slice_task = asyncio.ensure_future(runner.run(run.run_id))
    assert await asyncio.to_thread(reached.wait, 30)
    slice_task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await slice_task
    release.set()
    # The thread's second step asks the loop for a checkpoint nobody will write: it is refused.
    assert await asyncio.to_thread(over.wait, 30), "the tool's thread still waits on the loop"
    assert outcome == ["CancelledError"]
