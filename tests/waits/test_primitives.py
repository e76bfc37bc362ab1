"""Durable waits inside tools (issue 21, D16): recorded steps, event waits, sleeps, at the runner.

Real parts: the runner over the memory store and log (the same ports the SQLite/DynamoDB adapters
implement), the built-in agent with a scripted model. Time is the runner's wall clock.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from durable_harness.agent.loop import ToolLoopAgent
from durable_harness.approvals import ApprovalSecret
from durable_harness.messages import TextPart, UserMessage
from durable_harness.models.scripted import ScriptedModel, text_step, tool_calls_step
from durable_harness.runner import Runner
from durable_harness.storage.memory import MemoryCheckpointStore, MemoryChunkLog
from durable_harness.telemetry import RunTelemetry, SliceRecord, agent_info
from durable_harness.tools import ToolContext, tool
from durable_harness.waits import WaitTimeout
from pydantic import BaseModel

from tests.support import SimulatedCrash, log_chunks, message_of

SECRET = ApprovalSecret.from_value("w" * 32)


class Build(BaseModel):
    repo: str


def build_agent(side_effects: Path, *, timeout: float | None = None, crash_after_step: list[int] | None = None,
                sleep: float | None = None) -> ToolLoopAgent:  # fmt: skip
    """A tool that records a step (appending to ``side_effects``), then waits for ``build-done``."""

    @tool
    async def run_build(input: Build, ctx: ToolContext) -> dict[str, Any]:
        """Start a build and wait for it."""
        hook = ctx.event_url("build-done")

        def start() -> dict[str, str]:
            with side_effects.open("a") as f:
                f.write(f"started {input.repo}\n")
            return {"id": "b-1", "hook": hook}

        build = await ctx.step("start", start)
        if crash_after_step and crash_after_step[0] > 0:
            crash_after_step[0] -= 1
            raise SimulatedCrash("died right after the step")
        try:
            event = await ctx.wait_for_event("build-done", timeout_seconds=timeout)
        except WaitTimeout as exc:
            return {"build": build["id"], "status": "timed out", "why": str(exc)}
        if sleep is not None:
            await ctx.sleep(sleep)
        return {"build": build["id"], "status": event["status"]}

    model = ScriptedModel([tool_calls_step(("c1", "run_build", {"repo": "acme/app"})), text_step("The build passed.")])
    return ToolLoopAgent(model=model, tools=[run_build], approval_secret=SECRET)


def prompt() -> list[Any]:
    return [UserMessage(content=[TextPart(text="build it")])]


def make_runner(agent: ToolLoopAgent) -> tuple[Runner, MemoryChunkLog]:
    log = MemoryChunkLog()
    return Runner(agent, MemoryCheckpointStore(), log, flush_interval=0, public_url="http://example.test"), log


async def test_a_wait_parks_the_run_and_an_event_resumes_it_in_the_same_message(tmp_path: Path) -> None:
    effects = tmp_path / "effects.txt"
    runner, log = make_runner(build_agent(effects))
    run = runner.create_run(prompt(), message_id="msg_1")
    parked = await runner.run(run.run_id)
    assert parked.status == "awaiting_event"
    assert [w.name for w in parked.waits] == ["build-done"]
    chunks = log_chunks(log, run.run_id)
    assert chunks[-1]["type"] == "data-wait" and chunks[-1]["data"]["status"] == "waiting"
    assert not any(c["type"] == "finish" for c in chunks)
    # Not due: a slice now does nothing (no claim, no chunk).
    again = await runner.run(run.run_id)
    assert again.status == "awaiting_event" and len(log_chunks(log, run.run_id)) == len(chunks)
    runner.events.deliver(run.run_id, "build-done", {"status": "passed"}, outcome="resumed", via="test")
    assert runner.due(runner.load(run.run_id))
    final = await runner.run(run.run_id)
    assert final.status == "finished"
    assert effects.read_text() == "started acme/app\n"
    chunks = log_chunks(log, run.run_id)
    assert [c["type"] for c in chunks].count("start") == 1 and chunks[-1]["type"] == "finish"
    message = message_of(chunks)
    tool_part = next(p for p in message["parts"] if p["type"] == "tool-run_build")
    assert tool_part["output"] == {"build": "b-1", "status": "passed"}
    wait_parts = [p for p in message["parts"] if p["type"] == "data-wait"]
    assert len(wait_parts) == 1 and wait_parts[0]["data"]["status"] == "resumed"


async def test_an_early_event_is_not_lost_and_the_run_never_parks(tmp_path: Path) -> None:
    runner, log = make_runner(build_agent(tmp_path / "e.txt"))
    run = runner.create_run(prompt(), message_id="msg_1")
    runner.events.deliver(run.run_id, "build-done", {"status": "early"}, outcome="kept", via="test")
    final = await runner.run(run.run_id)
    assert final.status == "finished"
    assert not any(c["type"] == "data-wait" for c in log_chunks(log, run.run_id))


async def test_the_step_runs_once_across_a_crash_after_it(tmp_path: Path) -> None:
    effects = tmp_path / "effects.txt"
    runner, _ = make_runner(build_agent(effects, crash_after_step=[1]))
    run = runner.create_run(prompt(), message_id="msg_1")
    with pytest.raises(SimulatedCrash):
        await runner.run(run.run_id)
    parked = await runner.run(run.run_id)  # the retried slice replays the recorded step
    assert parked.status == "awaiting_event"
    assert effects.read_text() == "started acme/app\n"


async def test_a_timeout_reaches_the_tool_as_wait_timeout(tmp_path: Path) -> None:
    runner, log = make_runner(build_agent(tmp_path / "e.txt", timeout=0.2))
    run = runner.create_run(prompt(), message_id="msg_1")
    parked = await runner.run(run.run_id)
    assert parked.status == "awaiting_event" and parked.waits[0].deadline is not None
    for _ in range(600):  # until the deadline passes on the runner's clock (bounded: 30 s)
        if runner.due(runner.load(run.run_id)):
            break
        await asyncio.sleep(0.05)
    final = await runner.run(run.run_id)
    assert final.status == "finished"
    output = next(p for p in message_of(log_chunks(log, run.run_id))["parts"] if p["type"] == "tool-run_build")
    assert output["output"]["status"] == "timed out"


class Records:
    """An exporter that keeps every slice record."""

    def __init__(self) -> None:
        self.records: list[SliceRecord] = []

    def export(self, record: SliceRecord) -> None:
        self.records.append(record)


async def test_a_wait_is_a_span_with_its_name_and_duration_and_the_parking_slice_counts_a_waiting_run(
    tmp_path: Path,
) -> None:
    agent = build_agent(tmp_path / "e.txt")
    runner, _ = make_runner(agent)
    exported = Records()
    runner.telemetry = RunTelemetry([exported], agent_info(agent))
    run = runner.create_run(prompt(), message_id="msg_1")
    parked = await runner.run(run.run_id)
    [parking] = exported.records
    assert parking.runs_waiting == 1 and parking.span.attributes["durable_harness.waits.started"] == 1
    assert not [s for s in parking.span.walk() if s.kind == "wait"]  # the wait has not ended yet
    runner.events.deliver(run.run_id, "build-done", {"status": "passed"}, outcome="resumed", via="test")
    await runner.run(run.run_id)
    resumed = exported.records[-1]
    assert resumed.runs_waiting == 0
    [wait] = [s for s in resumed.span.walk() if s.kind == "wait"]
    assert wait.name == "wait build-done" and wait.attributes["durable_harness.wait.kind"] == "event"
    assert wait.start_ns == int(parked.waits[0].since * 1e9) and wait.end_ns >= wait.start_ns
    assert wait.attributes["durable_harness.wait.duration_ms"] == (wait.end_ns - wait.start_ns) / 1e6


def one_tool_agent(function: Any, *, retries: int = 0) -> ToolLoopAgent:
    """An agent whose first step calls ``function`` (an async tool of a Build input) once."""
    model = ScriptedModel([tool_calls_step(("c1", "job", {"repo": "acme/app"})), text_step("Done.")])
    return ToolLoopAgent(model=model, tools=[tool(name="job", retries=retries)(function)], approval_secret=SECRET)


def tool_part(log: MemoryChunkLog, run_id: str) -> dict[str, Any]:
    return next(p for p in message_of(log_chunks(log, run_id))["parts"] if p["type"] == "tool-job")


async def test_a_failing_step_is_retried_per_the_tools_retries_and_its_final_error_is_recorded() -> None:
    attempts: list[str] = []

    def flaky() -> str:
        attempts.append("try")
        if len(attempts) < 3:
            raise RuntimeError(f"attempt {len(attempts)} failed")
        return "built"

    async def job(input: Build, ctx: ToolContext) -> dict[str, Any]:
        """Build, then wait."""
        result = await ctx.step("build", flaky)
        await ctx.wait_for_event("go")
        return {"result": result}

    runner, log = make_runner(one_tool_agent(job, retries=2))  # three tries in all
    run = runner.create_run(prompt(), message_id="msg_1")
    assert (await runner.run(run.run_id)).status == "awaiting_event"
    runner.events.deliver(run.run_id, "go", None, outcome="resumed", via="test")
    assert (await runner.run(run.run_id)).status == "finished"
    assert attempts == ["try"] * 3  # the replay returned the recorded result
    assert tool_part(log, run.run_id)["output"] == {"result": "built"}

    attempts.clear()
    failing, failing_log = make_runner(one_tool_agent(job))  # no retry: the first error is final
    run = failing.create_run(prompt(), message_id="msg_2")
    assert (await failing.run(run.run_id)).status == "finished"
    assert attempts == ["try"]
    assert tool_part(failing_log, run.run_id)["errorText"] == "Step 'build' failed: attempt 1 failed"


async def test_a_step_name_used_twice_in_one_call_is_a_tool_error() -> None:
    async def job(input: Build, ctx: ToolContext) -> str:
        """Two steps of one name."""
        await ctx.step("same name", lambda: 1)
        await ctx.step("same name", lambda: 2)
        return "unreachable"

    runner, log = make_runner(one_tool_agent(job))
    run = runner.create_run(prompt(), message_id="msg_1")
    assert (await runner.run(run.run_id)).status == "finished"
    assert "used twice" in tool_part(log, run.run_id)["errorText"]
