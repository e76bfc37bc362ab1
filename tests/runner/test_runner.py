"""The durable runner: slices, checkpoints, crash recovery with reset-step, and the finalizer."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from typing import Any

import pytest
from durable_harness.agent.loop import ToolLoopAgent
from durable_harness.errors import ModelError
from durable_harness.messages import TextPart, UserMessage
from durable_harness.models.base import ModelRequest, ModelStreamPart
from durable_harness.models.scripted import FunctionModel, ScriptedModel, text_step, tool_calls_step
from durable_harness.runner import LocalOrchestrator, Runner
from durable_harness.storage.memory import MemoryCheckpointStore, MemoryChunkLog
from durable_harness.tools import tool
from pydantic import BaseModel

from tests.support import CrashingLog, CrashingStore, SimulatedCrash, log_chunks, message_of


class Item(BaseModel):
    name: str


def make_agent(executions: Counter[str], crash_tool: dict[str, int] | None = None) -> ToolLoopAgent:
    """Two tools and a three-step script: tool calls, more tool calls, then a text answer."""
    crash_tool = crash_tool if crash_tool is not None else {}

    @tool
    def fetch(input: Item) -> dict[str, str]:
        """Fetch an item."""
        executions[f"fetch:{input.name}"] += 1
        if crash_tool.get(input.name, 0) > 0:
            crash_tool[input.name] -= 1
            raise SimulatedCrash(f"died while fetching {input.name}")
        return {"item": input.name, "status": "ok"}

    @tool
    def count(input: Item) -> int:
        """Count letters."""
        executions[f"count:{input.name}"] += 1
        return len(input.name)

    model = ScriptedModel(
        [
            tool_calls_step(("c1", "fetch", {"name": "alpha"}), ("c2", "fetch", {"name": "beta"}), text="Let me look."),
            tool_calls_step(("c3", "count", {"name": "gamma"})),
            text_step("Alpha and beta are fine; gamma has 5 letters."),
        ]
    )
    return ToolLoopAgent(model=model, instructions="Be brief.", tools=[fetch, count], tool_call_concurrency=1)


CALLS = {"c1": "fetch:alpha", "c2": "fetch:beta", "c3": "count:gamma"}


def recorded_results(turn: dict[str, Any] | None) -> set[str]:
    """Tool call ids whose results a checkpointed turn state holds."""
    if turn is None:
        return set()
    ids = {o["tool_call_id"] for o in turn["step_outcomes"]}
    for message in turn["messages"]:
        if message["role"] == "tool":
            ids |= {p["toolCallId"] for p in message["content"] if p["type"] == "tool-result"}
    return ids


def prompt() -> list[Any]:
    return [UserMessage(content=[TextPart(text="check the items")])]


async def run_uninterrupted() -> tuple[list[dict[str, Any]], Counter[str]]:
    executions: Counter[str] = Counter()
    log = MemoryChunkLog()
    runner = Runner(make_agent(executions), MemoryCheckpointStore(), log, flush_interval=0)
    state = runner.create_run(prompt(), message_id="msg_1")
    final = await runner.run(state.run_id)
    assert final.status == "finished"
    return log_chunks(log, state.run_id), executions


async def test_uninterrupted_run_streams_the_whole_turn() -> None:
    chunks, executions = await run_uninterrupted()
    types = [c["type"] for c in chunks]
    assert types[0] == "start" and chunks[0]["messageId"] == "msg_1"
    assert types[-1] == "finish" and chunks[-1]["finishReason"] == "stop"
    assert types.count("start-step") == types.count("finish-step") == 3
    assert "reset-step" not in types
    assert executions == Counter({"fetch:alpha": 1, "fetch:beta": 1, "count:gamma": 1})
    message = message_of(chunks)
    tool_parts = [p for p in message["parts"] if p["type"].startswith("tool-")]
    assert [(p["toolCallId"], p["state"]) for p in tool_parts] == [
        ("c1", "output-available"),
        ("c2", "output-available"),
        ("c3", "output-available"),
    ]
    assert tool_parts[2]["output"] == 5
    assert message["parts"][-1] == {
        "type": "text",
        "text": "Alpha and beta are fine; gamma has 5 letters.",
        "state": "done",
    }


async def test_time_slices_end_at_step_boundaries_and_continue_from_the_checkpoint() -> None:
    expected, _ = await run_uninterrupted()
    executions: Counter[str] = Counter()
    log, store = MemoryChunkLog(), MemoryCheckpointStore()
    runner = Runner(make_agent(executions), store, log, flush_interval=0)
    run_id = runner.create_run(prompt(), message_id="msg_1").run_id
    statuses = []
    while True:
        state = await runner.run_slice(run_id, budget_seconds=0)  # spent at once: one step per slice
        statuses.append(state.status)
        if state.terminal:
            break
    # The last step's slice also ends the turn: no slice runs only to send `finish`.
    assert statuses == ["ready_for_next_step", "ready_for_next_step", "finished"]
    assert state.slices == 3
    assert log_chunks(log, run_id) == expected
    assert sum(executions.values()) == 3


async def test_crash_after_chunks_were_written_resets_the_step_and_skips_the_checkpointed_tool() -> None:
    expected, _ = await run_uninterrupted()
    executions: Counter[str] = Counter()
    log = MemoryChunkLog()
    # The slice dies at the save that would record beta's result: its output has reached the log,
    # alpha's result (checkpointed while beta was still to run) is durable, beta's is not.
    store = CrashingStore(
        MemoryCheckpointStore(), crash_when=lambda cp: "c2" in recorded_results(json.loads(cp.state)["turn"])
    )
    runner = Runner(make_agent(executions), store, log, flush_interval=0)
    run_id = runner.create_run(prompt(), message_id="msg_1").run_id

    with pytest.raises(SimulatedCrash):
        await runner.run_slice(run_id)
    before_retry = log_chunks(log, run_id)
    assert {"type": "tool-output-available", "toolCallId": "c2", "output": {"item": "beta", "status": "ok"}} in (
        before_retry
    )
    assert recorded_results(runner.load(run_id).turn) == {"c1"}

    state = await runner.run_slice(run_id)  # the state machine's retry
    assert state.status == "finished"
    chunks = log_chunks(log, run_id)
    assert chunks[: len(before_retry)] == before_retry  # append-only
    assert chunks[len(before_retry)] == {"type": "reset-step"}
    assert [c["type"] for c in chunks].count("finish") == 1 and chunks[-1]["type"] == "finish"
    assert executions["fetch:alpha"] == 1  # its result was checkpointed: never run again
    assert executions["fetch:beta"] == 2  # its result was not
    assert message_of(chunks) == message_of(expected)


async def test_crash_inside_a_tool_continues_without_reset_when_the_log_matches_the_checkpoint() -> None:
    expected, _ = await run_uninterrupted()
    executions: Counter[str] = Counter()
    log = MemoryChunkLog()
    runner = Runner(make_agent(executions, crash_tool={"beta": 1}), MemoryCheckpointStore(), log, flush_interval=0)
    run_id = runner.create_run(prompt(), message_id="msg_1").run_id
    with pytest.raises(SimulatedCrash):
        await runner.run_slice(run_id)
    state = await runner.run_slice(run_id)
    assert state.status == "finished"
    chunks = log_chunks(log, run_id)
    assert "reset-step" not in [c["type"] for c in chunks]
    assert chunks == expected
    assert executions == Counter({"fetch:alpha": 1, "fetch:beta": 2, "count:gamma": 1})


@pytest.mark.parametrize("open_with_start", [False, True])
@pytest.mark.parametrize("after_write", [False, True])
async def test_a_crash_at_any_append_recovers_to_the_same_message(after_write: bool, open_with_start: bool) -> None:
    expected, _ = await run_uninterrupted()
    for point in range(len(expected)):  # the append that holds each chunk of the turn, in turn
        executions: Counter[str] = Counter()
        log = CrashingLog(MemoryChunkLog(), crash_at_chunk=point, after_write=after_write)
        runner = Runner(
            make_agent(executions), MemoryCheckpointStore(), log, flush_interval=0, open_with_start=open_with_start
        )
        run_id = runner.create_run(prompt(), message_id="msg_1").run_id
        with pytest.raises(SimulatedCrash):
            await runner.run_slice(run_id)
        recorded = recorded_results(runner.load(run_id).turn)
        state = await runner.run_slice(run_id)
        assert state.status == "finished", point
        chunks = log_chunks(log, run_id)
        indexes = [c["type"] for c in chunks]
        assert indexes.count("finish") == 1 and indexes[-1] == "finish", point
        assert message_of(chunks) == message_of(expected), point
        for call_id in recorded:  # a tool whose result was checkpointed never runs again
            assert executions[CALLS[call_id]] == 1, (point, call_id, executions)
        assert all(n <= 2 for n in executions.values()), (point, executions)


async def test_open_with_start_appends_start_with_the_claim_before_the_model_is_called() -> None:
    expected, _ = await run_uninterrupted()
    log, seen = MemoryChunkLog(), []
    script = make_agent(Counter()).model

    def peek(request: ModelRequest, index: int) -> Iterable[ModelStreamPart]:
        seen.append([c["type"] for c in log_chunks(log, run_id)])  # what the log holds as the model is called
        return script._play(request, index)  # type: ignore[attr-defined]

    agent = make_agent(Counter())
    agent.model = FunctionModel(peek, model_id="scripted")
    commits: list[int] = []
    runner = Runner(
        agent, MemoryCheckpointStore(), log, flush_interval=0, open_with_start=True,
        on_commit=lambda _run, count: commits.append(count),
    )  # fmt: skip
    state = runner.create_run(prompt(), message_id="msg_1")
    run_id = state.run_id
    final = await runner.run(run_id)
    assert final.status == "finished"
    assert seen[0] == ["start"]  # durable before the first model request, not appended after it
    assert commits[0] == 1  # and readers are told
    assert log_chunks(log, run_id) == expected  # once, at index 0: the same log as without the option
    assert final.slice_times[0][0] == 0


async def test_model_error_fails_the_run_with_error_and_finish() -> None:
    model = ScriptedModel([ModelError("the provider said no", status_code=400)])
    log, store = MemoryChunkLog(), MemoryCheckpointStore()
    runner = Runner(ToolLoopAgent(model=model), store, log, flush_interval=0)
    run_id = runner.create_run(prompt()).run_id
    state = await runner.run(run_id)
    assert state.status == "failed" and state.error == "the provider said no"
    chunks = log_chunks(log, run_id)
    assert chunks[-2] == {"type": "error", "errorText": "the provider said no"}
    assert chunks[-1] == {"type": "finish", "finishReason": "error"}


async def test_finalizer_ends_a_crashed_run_and_fences_off_the_dead_slice() -> None:
    log, store = MemoryChunkLog(), MemoryCheckpointStore()
    runner = Runner(make_agent(Counter(), crash_tool={"alpha": 5}), store, log, flush_interval=0)
    run_id = runner.create_run(prompt(), message_id="msg_1").run_id
    with pytest.raises(SimulatedCrash):
        await runner.run_slice(run_id)
    stale_epoch = store.load(run_id).epoch
    state = await runner.finalize(run_id, error="The run failed after repeated errors.")
    assert state.status == "failed"
    chunks = log_chunks(log, run_id)
    assert chunks[-2:] == [
        {"type": "error", "errorText": "The run failed after repeated errors."},
        {"type": "finish", "finishReason": "error"},
    ]
    from durable_harness.errors import FencedError

    with pytest.raises(FencedError):
        log.append(run_id, log.count(run_id), ['{"type":"text-delta","id":"x","delta":"late"}'], stale_epoch)
    # finalizing again changes nothing
    assert (await runner.finalize(run_id)).status == "failed"
    assert log_chunks(log, run_id) == chunks


async def test_terminal_chunks_lost_in_a_crash_are_appended_by_the_next_attempt() -> None:
    expected, _ = await run_uninterrupted()
    # The append of `finish` (after the terminal checkpoint) is lost.
    log = CrashingLog(MemoryChunkLog(), crash_at_chunk=len(expected) - 1)
    store = MemoryCheckpointStore()
    runner = Runner(make_agent(Counter()), store, log, flush_interval=0)
    run_id = runner.create_run(prompt(), message_id="msg_1").run_id
    with pytest.raises(SimulatedCrash):
        await runner.run_slice(run_id)
    assert runner.load(run_id).status == "finished"
    assert log.count(run_id) == len(expected) - 1
    state = await runner.run_slice(run_id)
    assert state.status == "finished"
    assert log_chunks(log, run_id) == expected


async def test_local_orchestrator_retries_retryable_errors_then_finalizes() -> None:
    from durable_harness.errors import StorageError

    class FlakyLog(MemoryChunkLog):
        failures = 0

        def append(self, run_id: str, start: int, chunks: Any, epoch: int) -> int:
            if FlakyLog.failures < 1:
                FlakyLog.failures += 1
                raise StorageError("throttled")
            return super().append(run_id, start, chunks, epoch)

    log = FlakyLog()
    runner = Runner(make_agent(Counter()), MemoryCheckpointStore(), log, flush_interval=0)
    orchestrator = LocalOrchestrator(runner, slice_seconds=0, retry_delay=0)
    run_id = runner.create_run(prompt()).run_id
    orchestrator.start(run_id)
    state = await orchestrator.wait(run_id)
    assert state is not None and state.status == "finished"
    assert json.loads(log.read(run_id, log.count(run_id) - 1)[0])["type"] == "finish"
