"""Pydantic AI's deferred tool calls (``CallDeferred``) as durable event waits (issue 21): the run
parks on the call's event, and the event's payload is the call's result when it resumes.

Real parts: the runner over the memory store and log, a Pydantic AI ``Agent`` with its
deterministic ``FunctionModel`` (no credentials).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

pytest.importorskip("pydantic_ai", reason="the pydantic-ai extra is part of the dev install")

from durable_harness import ApprovalSecret
from durable_harness.harness import PydanticAIHarness
from durable_harness.messages import TextPart, UserMessage
from durable_harness.runner import Runner
from durable_harness.storage.memory import MemoryCheckpointStore, MemoryChunkLog
from pydantic_ai import Agent, CallDeferred
from pydantic_ai import messages as pm
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tests.harness.support import SECRET
from tests.support import log_chunks, message_of, until_due


def script(messages: list[pm.ModelMessage], info: AgentInfo) -> pm.ModelResponse:
    """A build (deferred) and a lookup in one step, then an answer naming the build's result."""
    returns = {p.tool_name: p.content for m in messages for p in m.parts if isinstance(p, pm.ToolReturnPart)}
    if "build" in returns:
        return pm.ModelResponse(parts=[pm.TextPart(f"Build: {returns['build']}")])
    calls = [pm.ToolCallPart("build", {"repo": "acme"}, "c1"), pm.ToolCallPart("lookup", {}, "c2")]
    return pm.ModelResponse(parts=calls)


def harness(ledger: Counter[str], timeout: float | None = None) -> PydanticAIHarness:
    agent: Agent[None, str] = Agent(FunctionModel(script))

    @agent.tool_plain
    def build(repo: str) -> dict[str, Any]:
        """Start a build; its result comes from the build system later."""
        ledger["build"] += 1
        raise CallDeferred(metadata={"event": "build-done", **({"timeoutSeconds": timeout} if timeout else {})})

    @agent.tool_plain
    def lookup() -> str:
        """Look something up (runs at once)."""
        ledger["lookup"] += 1
        return "looked"

    return PydanticAIHarness(agent)


def make_runner(ledger: Counter[str], timeout: float | None = None) -> tuple[Runner, MemoryChunkLog]:
    return runner_of(harness(ledger, timeout))


def runner_of(agent: PydanticAIHarness) -> tuple[Runner, MemoryChunkLog]:
    log = MemoryChunkLog()
    secret = ApprovalSecret.from_value(SECRET)
    return Runner(agent, MemoryCheckpointStore(), log, flush_interval=0, approval_secret=secret), log


async def failure(agent: Agent[None, str]) -> str:
    """The error text of the run of ``agent``, which must fail."""
    runner, log = runner_of(PydanticAIHarness(agent))
    run_id = start(runner)
    assert (await runner.run(run_id)).status == "failed"
    [error] = [c for c in log_chunks(log, run_id) if c["type"] == "error"]
    return str(error["errorText"])


def start(runner: Runner) -> str:
    return runner.create_run([UserMessage(content=[TextPart(text="build acme")])], message_id="msg_1").run_id


def tool_output(log: MemoryChunkLog, run_id: str, tool: str) -> Any:
    return next(p for p in message_of(log_chunks(log, run_id))["parts"] if p["type"] == f"tool-{tool}").get("output")


async def test_a_deferred_call_parks_the_run_and_its_event_is_the_calls_result() -> None:
    ledger: Counter[str] = Counter()
    runner, log = make_runner(ledger)
    run_id = start(runner)
    parked = await runner.run(run_id)
    assert parked.status == "awaiting_event"
    assert [(w.tool_call_id, w.name, w.kind, w.deadline) for w in parked.waits] == [("c1", "build-done", "event", None)]
    assert log_chunks(log, run_id)[-1]["type"] == "data-wait"
    assert (await runner.run(run_id)).status == "awaiting_event"  # not due: nothing runs

    runner.events.deliver(run_id, "build-done", {"status": "green"}, outcome="resumed", via="test")
    final = await runner.run(run_id)
    assert final.status == "finished"
    assert ledger == Counter({"build": 1, "lookup": 1})  # the lookup's recorded result was kept
    assert tool_output(log, run_id, "build") == {"status": "green"}
    chunks = log_chunks(log, run_id)
    assert [c["type"] for c in chunks].count("start") == 1 and [c["type"] for c in chunks].count("finish") == 1
    message = message_of(chunks)
    assert message["parts"][-1]["text"] == "Build: {'status': 'green'}"
    assert [p["data"]["status"] for p in message["parts"] if p["type"] == "data-wait"] == ["resumed"]


async def test_a_deferred_calls_timeout_is_its_result() -> None:
    runner, log = make_runner(Counter(), timeout=0.2)
    run_id = start(runner)
    parked = await runner.run(run_id)
    assert parked.status == "awaiting_event" and parked.waits[0].deadline is not None
    await until_due(runner, run_id)
    assert (await runner.run(run_id)).status == "finished"
    output = tool_output(log, run_id, "build")
    assert output["timeout"] is True and "No event 'build-done' arrived within 0.2 s" in output["error"]


async def test_a_step_that_defers_a_call_and_asks_for_an_approval_fails_saying_so() -> None:
    def both(messages: list[pm.ModelMessage], info: AgentInfo) -> pm.ModelResponse:
        return pm.ModelResponse(parts=[pm.ToolCallPart("build", {}, "c1"), pm.ToolCallPart("remove", {}, "c2")])

    agent: Agent[None, str] = Agent(FunctionModel(both))

    @agent.tool_plain
    def build() -> str:
        """Deferred."""
        raise CallDeferred(metadata={"event": "build-done"})

    @agent.tool_plain(requires_approval=True)
    def remove() -> str:
        """Needs approval."""
        return "removed"

    assert "defers a call (CallDeferred) and asks for an approval" in await failure(agent)


async def test_a_deferred_call_whose_metadata_names_no_valid_event_fails_the_run_saying_so() -> None:
    agent: Agent[None, str] = Agent(FunctionModel(script))

    @agent.tool_plain
    def build(repo: str) -> str:
        """Deferred, with a bad event name."""
        raise CallDeferred(metadata={"event": "no spaces allowed"})

    @agent.tool_plain
    def lookup() -> str:
        """Runs at once."""
        return "looked"

    assert 'needs metadata["event"], a valid event name' in await failure(agent)
