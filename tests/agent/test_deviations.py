"""Regressions for the deviations from the seeds: async ``needs_approval``, ``prepare_step``'s
``runtime_context``, the total time limit (an abort that bounds a running call and its retries),
and the callbacks' order and arguments (``on_end`` before the output fails, with the total usage;
``on_tool_execution_end`` with success and duration)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from durable_harness import Agent, CallOptions, Timeouts, Tool, ToolContext, tool
from durable_harness.agent.control import TokenUsage
from durable_harness.agent.state import StepOutcome
from durable_harness.errors import ModelError
from durable_harness.models.base import ModelRequest
from durable_harness.models.scripted import FunctionModel, ScriptedModel, text_step, tool_calls_step
from durable_harness.protocol import harness_parts as hp
from pydantic import BaseModel

from tests.agent.test_parity import Answer, Pair, add, run

BOUND = 10.0
"""Seconds a run may take before the test gives up (a run that does not stop would hang)."""


async def test_an_async_needs_approval_is_awaited_and_decides_per_call() -> None:
    asked: list[int] = []

    async def only_big(input: Pair, context: ToolContext) -> bool:
        await asyncio.sleep(0)
        asked.append(input.a)
        return input.a > 10

    guarded = Tool(name="add", execute=add.execute, input_model=Pair, needs_approval=only_big)
    model = ScriptedModel([tool_calls_step(("c1", "add", {"a": 1, "b": 1}), ("c2", "add", {"a": 50, "b": 1}))])
    chunks, state = await run(Agent(model=model, tools=[guarded]))
    assert asked == [1, 50]
    assert state.status == "awaiting_tool_approval"
    assert [c["toolCallId"] for c in chunks if c["type"] == "tool-approval-request"] == ["c2"]
    assert {"type": "tool-output-available", "toolCallId": "c1", "output": 2} in chunks  # ran without asking


async def test_a_runtime_context_from_prepare_step_reaches_tools_and_survives_slices() -> None:
    seen: list[Any] = []

    def record(input: Pair, context: ToolContext) -> int:
        seen.append(context.runtime_context)
        return input.a + input.b

    def prepare_call(options: CallOptions) -> CallOptions:
        return dataclasses.replace(options, runtime_context={**options.runtime_context, "tenant": "t1"})

    def prepare_step(options: CallOptions) -> CallOptions:
        previous = options.runtime_context
        return dataclasses.replace(options, runtime_context={**previous, "step": options.step_number})

    model = ScriptedModel(
        [tool_calls_step(("c1", "add", {"a": 1, "b": 1})), tool_calls_step(("c2", "add", {"a": 2, "b": 2})),
         text_step("4")]
    )  # fmt: skip
    agent = Agent(
        model=model, tools=[Tool(name="add", execute=record, input_model=Pair)], runtime_context={"user": "u1"},
        prepare_call=prepare_call, prepare_step=prepare_step,
    )  # fmt: skip
    _, state = await run(agent, budget=0)  # a slice per step: the context is read back from checkpoints
    assert state.status == "finished" and state.slices == 3
    assert seen == [{"user": "u1", "tenant": "t1", "step": 0}, {"user": "u1", "tenant": "t1", "step": 1}]
    assert agent.runtime_context == {"user": "u1"}  # the agent's own value is never changed


def recorder() -> tuple[list[Any], dict[str, Any]]:
    events: list[Any] = []
    callbacks = {
        "on_error": lambda error: events.append(("error", str(error))),
        "on_abort": lambda steps: events.append(("abort", [s.number for s in steps])),
        "on_end": lambda steps, output: events.append(("end", output)),
    }
    return events, callbacks


async def test_the_total_time_limit_aborts_the_run_instead_of_failing_it_as_an_error() -> None:
    events, callbacks = recorder()
    model = ScriptedModel([tool_calls_step(("c1", "add", {"a": 1, "b": 1})), text_step("2")])
    chunks, state = await run(Agent(model=model, tools=[add], timeout=Timeouts(total=0), **callbacks))
    assert state.status == "failed" and "total time limit" in state.error
    assert events == [("abort", [])]
    assert chunks[-1] == {"type": "finish", "finishReason": "error"}


async def test_the_total_time_limit_cuts_a_model_call_that_is_already_streaming() -> None:
    events, callbacks = recorder()
    never = asyncio.Event()

    async def stalls(request: ModelRequest, step: int) -> Any:
        if step == 0:
            for part in tool_calls_step(("c1", "add", {"a": 1, "b": 1})):
                yield part
            return
        yield hp.TextStartPart(id="t")
        yield hp.TextDeltaPart(id="t", delta="Thinking")
        await never.wait()  # no chunk timeout is set: only the total limit can end this call

    agent = Agent(model=FunctionModel(stalls), tools=[add], timeout=Timeouts(total=0.5), **callbacks)
    chunks, state = await asyncio.wait_for(run(agent), BOUND)
    assert state.status == "failed" and "total time limit" in state.error
    assert events == [("abort", [0])]  # the steps that finished
    assert [c["type"] for c in chunks][-2:] == ["finish-step", "finish"]


async def test_the_total_time_limit_is_not_waited_out_by_a_retry() -> None:
    events, callbacks = recorder()
    calls: list[int] = []
    waited: list[float] = []

    async def throttled(request: ModelRequest, step: int) -> Any:
        calls.append(step)
        raise ModelError("throttled", retryable=True, retry_after=30)
        yield  # pragma: no cover

    async def sleep(seconds: float) -> None:
        waited.append(seconds)

    agent = Agent(model=FunctionModel(throttled), sleep=sleep, timeout=Timeouts(total=5), **callbacks)
    _, state = await run(agent)
    assert calls == [0] and waited == []  # a 30 s backoff would end past the limit: no retry at all
    assert state.status == "failed" and "total time limit" in state.error and "throttled" in state.error
    assert events == [("abort", [])]


async def test_on_end_runs_before_the_output_is_checked_and_gets_the_total_usage() -> None:
    events, callbacks = recorder()
    _, state = await run(Agent(model=ScriptedModel([text_step("not json")]), output=Answer, **callbacks))
    assert state.status == "failed"
    assert events[0] == ("end", None) and events[1][0] == "error" and len(events) == 2

    usages: list[tuple[Any, TokenUsage]] = []
    answer = text_step('{"city": "Oslo", "temp_c": 4}')
    model = ScriptedModel([tool_calls_step(("c1", "add", {"a": 1, "b": 1})), answer])

    def on_end(steps: Any, output: Any, usage: TokenUsage) -> None:
        usages.append((output, usage))

    agent = Agent(model=model, tools=[add], output=Answer, on_end=on_end)
    _, state = await run(agent)
    [(output, usage)] = usages
    assert output == {"city": "Oslo", "temp_c": 4}
    total = state.final_result
    assert (usage.input_tokens, usage.output_tokens) == (total.input_tokens, total.output_tokens) == (10 + 10, 5 + 4)
    assert usage.total_tokens == 29


class Nap(BaseModel):
    seconds: float


async def test_on_tool_execution_end_gets_success_and_duration() -> None:
    ended: list[StepOutcome] = []

    @tool
    async def nap(input: Nap) -> str:
        """Sleep (the tool's own work), then fail on a long nap."""
        await asyncio.sleep(input.seconds)
        if input.seconds > 0.01:
            raise RuntimeError("overslept")
        return "rested"

    model = ScriptedModel([tool_calls_step(("c1", "nap", {"seconds": 0}), ("c2", "nap", {"seconds": 0.05})),
                           text_step("ok")])  # fmt: skip
    await run(Agent(model=model, tools=[nap], on_tool_execution_end=lambda call, outcome: ended.append(outcome)))
    by_id = {o.tool_call_id: o for o in ended}
    assert by_id["c1"].success and by_id["c1"].output == "rested"
    assert not by_id["c2"].success and by_id["c2"].error == "Error: overslept"
    assert by_id["c2"].duration_ms is not None and by_id["c2"].duration_ms >= 50
    assert by_id["c1"].duration_ms is not None and by_id["c1"].duration_ms < by_id["c2"].duration_ms
