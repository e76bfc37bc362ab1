"""WorkflowAgent parity: tools, loop control, structured output, hooks, retries and timeouts."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from durable_harness import Agent, CallOptions, Timeouts, Tool, ToolContext, has_tool_call, step_count_is, tool
from durable_harness.agent.control import retry_delay
from durable_harness.errors import AgentConfigError, ModelError
from durable_harness.messages import TextPart, UserMessage
from durable_harness.models.base import ModelRequest, finish
from durable_harness.models.scripted import FunctionModel, ScriptedModel, text_step, tool_calls_step
from durable_harness.protocol import harness_parts as hp
from durable_harness.runner import Runner
from durable_harness.storage.memory import MemoryCheckpointStore, MemoryChunkLog
from pydantic import BaseModel

from tests.support import log_chunks, message_of


class Name(BaseModel):
    name: str


class Pair(BaseModel):
    a: int
    b: int


@tool
def add(input: Pair) -> int:
    """Add."""
    return input.a + input.b


async def run(agent: Agent, *, budget: float | None = None) -> tuple[list[dict[str, Any]], Any]:
    log = MemoryChunkLog()
    runner = Runner(agent, MemoryCheckpointStore(), log, flush_interval=0)
    run_id = runner.create_run([UserMessage(content=[TextPart(text="go")])], message_id="m").run_id
    while not (state := await runner.run_slice(run_id, budget_seconds=budget)).terminal:
        pass
    return log_chunks(log, run_id), state


async def test_client_side_tool_ends_the_turn_with_the_call_for_the_client() -> None:
    ask = Tool(name="ask_user", input_schema={"type": "object", "properties": {"q": {"type": "string"}}})
    model = ScriptedModel([tool_calls_step(("c1", "ask_user", {"q": "which city?"}), ("c2", "add", {"a": 1, "b": 2}))])
    chunks, state = await run(Agent(model=model, tools=[ask, add]))
    assert state.status == "finished" and chunks[-1] == {"type": "finish", "finishReason": "tool-calls"}
    parts = {p["toolCallId"]: p for p in message_of(chunks)["parts"] if "toolCallId" in p}
    assert parts["c1"]["state"] == "input-available" and parts["c1"]["input"] == {"q": "which city?"}
    assert parts["c2"]["state"] == "output-available" and parts["c2"]["output"] == 3
    assert len(model.requests) == 1


async def test_provider_executed_calls_and_results_pass_through() -> None:
    step = [
        hp.ToolCallPart(tool_call_id="p1", tool_name="web_search", input='{"q":"x"}', provider_executed=True),
        hp.ToolResultPart(tool_call_id="p1", tool_name="web_search", result={"hits": 3}),
        *text_step("Found 3.")[:-1],
        finish("stop"),
    ]
    model = ScriptedModel([step])
    chunks, state = await run(Agent(model=model))
    assert state.status == "finished"
    assert {"type": "tool-input-available", "toolCallId": "p1", "toolName": "web_search", "input": {"q": "x"},
            "providerExecuted": True, "dynamic": True} in chunks  # fmt: skip
    assert {"type": "tool-output-available", "toolCallId": "p1", "output": {"hits": 3}} in chunks
    assert len(model.requests) == 1  # nothing for the host to run


async def test_concurrency_runs_tools_together_but_reports_in_model_order() -> None:
    started: list[str] = []
    both = asyncio.Event()

    @tool
    async def slow(input: Name) -> str:
        started.append(input.name)
        if len(started) == 2:
            both.set()
        await asyncio.wait_for(both.wait(), 5)  # finishes only if both run at once
        if input.name == "first":
            await asyncio.sleep(0)  # let the second one finish first
            await asyncio.sleep(0)
        return input.name

    model = ScriptedModel([tool_calls_step(("c1", "slow", {"name": "first"}), ("c2", "slow", {"name": "second"})),
                           text_step("ok")])  # fmt: skip
    chunks, _ = await run(Agent(model=model, tools=[slow]))
    outputs = [c["toolCallId"] for c in chunks if c["type"] == "tool-output-available"]
    assert outputs == ["c1", "c2"]


async def test_concurrency_one_runs_tools_one_at_a_time_in_order() -> None:
    order: list[str] = []

    @tool
    async def step_tool(input: Name) -> str:
        order.append(f"start {input.name}")
        await asyncio.sleep(0)
        order.append(f"end {input.name}")
        return input.name

    model = ScriptedModel([tool_calls_step(("c1", "step_tool", {"name": "a"}), ("c2", "step_tool", {"name": "b"})),
                           text_step("ok")])  # fmt: skip
    await run(Agent(model=model, tools=[step_tool], tool_call_concurrency=1))
    assert order == ["start a", "end a", "start b", "end b"]


async def test_runtime_and_tool_context_reach_the_tool_and_are_validated() -> None:
    seen: list[ToolContext] = []

    class Limits(BaseModel):
        max: int

    def limited(input: Any, ctx: ToolContext) -> str:
        seen.append(ctx)
        return "ok"

    limited_tool = Tool(name="limited", execute=limited, context_model=Limits)
    model = ScriptedModel([tool_calls_step(("c1", "limited", {})), text_step("ok")])
    agent = Agent(
        model=model, tools=[limited_tool], runtime_context={"user": "u1"}, tools_context={"limited": {"max": 3}}
    )
    await run(agent)
    assert seen[0].runtime_context == {"user": "u1"} and seen[0].tool_context == {"max": 3}
    assert seen[0].tool_call_id == "c1"
    with pytest.raises(AgentConfigError, match="tools_context"):
        Agent(model=model, tools=[limited_tool], tools_context={"limited": {"max": "many"}})
    with pytest.raises(AgentConfigError, match="JSON-serializable"):
        Agent(model=model, runtime_context={"when": object()})


async def test_a_tool_timeout_becomes_an_error_result() -> None:
    never = asyncio.Event()

    async def hang(input: Any) -> str:
        await never.wait()
        return "never"

    model = ScriptedModel([tool_calls_step(("c1", "hang", {})), text_step("too slow")])
    chunks, _ = await run(Agent(model=model, tools=[Tool(name="hang", execute=hang, timeout=0.05)]))
    assert {"type": "tool-output-error", "toolCallId": "c1", "errorText": "Tool hang timed out after 0.05 s"} in chunks


async def test_repair_tool_call_gets_a_chance_before_a_call_is_invalid() -> None:
    def repair(call_id: str, name: str, text: str, error: str, tools: Any) -> tuple[str, str] | None:
        return ("add", text) if name == "ad" else None

    model = ScriptedModel([tool_calls_step(("c1", "ad", {"a": 1, "b": 1})), text_step("2")])
    chunks, _ = await run(Agent(model=model, tools=[add], repair_tool_call=repair))
    assert {"type": "tool-output-available", "toolCallId": "c1", "output": 2} in chunks


@pytest.mark.parametrize(
    ("stop_when", "calls"),
    [([has_tool_call("add")], 1), ([step_count_is(3)], 3), ([lambda steps: len(steps) == 2], 2), ([], 8)],
)
async def test_stop_conditions(stop_when: list[Any], calls: int) -> None:
    model = ScriptedModel([tool_calls_step((f"c{i}", "add", {"a": i, "b": 0})) for i in range(7)] + [text_step("end")])
    _, state = await run(Agent(model=model, tools=[add], stop_when=stop_when))
    assert len(model.requests) == calls and state.status == "finished"


async def test_token_budget_ends_the_run_cleanly() -> None:
    model = ScriptedModel([tool_calls_step((f"c{i}", "add", {"a": i, "b": 0})) for i in range(10)])
    chunks, state = await run(Agent(model=model, tools=[add], max_total_tokens=40))
    assert len(model.requests) == 3  # 15 tokens per step
    assert chunks[-1] == {"type": "finish", "finishReason": "length"}
    assert state.final_result.finish_reason == "length" and state.final_result.raw_finish_reason == "token-budget"


class Answer(BaseModel):
    city: str
    temp_c: int


async def test_structured_output_is_requested_and_parsed() -> None:
    model = ScriptedModel([text_step('{"city": "Oslo", "temp_c": 4}')])
    _, state = await run(Agent(model=model, output=Answer))
    assert model.requests[0].response_format == Answer.model_json_schema()
    assert state.final_result.output == {"city": "Oslo", "temp_c": 4}


async def test_structured_output_that_does_not_parse_fails_the_run_clearly() -> None:
    chunks, state = await run(Agent(model=ScriptedModel([text_step("It is cold in Oslo.")]), output=Answer))
    assert state.status == "failed" and "not valid Answer output" in state.error
    assert chunks[-2]["type"] == "error" and chunks[-1] == {"type": "finish", "finishReason": "error"}


@pytest.mark.parametrize("ending", ["client tool", "stop condition", "token budget"])
async def test_a_turn_with_output_that_ends_on_a_tool_step_has_no_output_and_does_not_fail(ending: str) -> None:
    # Seed 003: the output is parsed from the last step's text when that step did not call tools.
    ask = Tool(name="ask_user", input_schema={"type": "object", "properties": {"q": {"type": "string"}}})
    call = ("c1", "ask_user", {"q": "which city?"}) if ending == "client tool" else ("c1", "add", {"a": 1, "b": 2})
    model = ScriptedModel([tool_calls_step(call, text="Let me check."), text_step('{"city": "Oslo", "temp_c": 4}')])
    ends: list[Any] = []
    options: dict[str, Any] = {
        "stop condition": {"stop_when": [has_tool_call("add")]},
        "token budget": {"max_total_tokens": 1},
    }.get(ending, {})
    agent = Agent(model=model, tools=[ask, add], output=Answer, on_end=lambda steps, output: ends.append(output),
                  **options)  # fmt: skip
    chunks, state = await run(agent)
    assert state.status == "finished", state.error
    assert len(model.requests) == 1 and state.final_result.output is None and ends == [None]
    assert chunks[-1]["type"] == "finish" and not any(c["type"] == "error" for c in chunks)


async def test_hooks_and_callbacks() -> None:
    events: list[str] = []
    prepared: list[int] = []

    def prepare_call(options: CallOptions) -> CallOptions:
        prepared.append(options.step_number)
        options.instructions = "prepared"
        return options

    def prepare_step(options: CallOptions) -> CallOptions:
        options.tool_choice = "required" if options.step_number == 0 else "none"
        return options

    model = ScriptedModel([tool_calls_step(("c1", "add", {"a": 1, "b": 1})), text_step("2")])
    agent = Agent(
        model=model, tools=[add], prepare_call=prepare_call, prepare_step=prepare_step,
        on_start=lambda messages: events.append("start"),
        on_step_start=lambda step, options: events.append(f"step {step}"),
        on_tool_execution_start=lambda call: events.append(f"tool {call.tool_name}"),
        on_tool_execution_end=lambda call, outcome: events.append(f"tool end {outcome.output}"),
        on_step_end=lambda summary: events.append(f"step end {summary.finish_reason}"),
        on_end=lambda steps, output: events.append(f"end {len(steps)}"),
    )  # fmt: skip
    await run(agent, budget=0)  # a slice per boundary: prepare_call still runs once per run
    assert prepared == [0]
    assert [r.instructions for r in model.requests] == ["prepared", "prepared"]
    assert [r.tool_choice for r in model.requests] == ["required", "none"]
    assert events == ["start", "step 0", "tool add", "tool end 2", "step end tool-calls", "step 1",
                      "step end stop", "end 2"]  # fmt: skip


def test_retry_delays_follow_the_ai_sdk() -> None:
    assert [retry_delay(n, None) for n in range(7)] == [2, 4, 8, 16, 32, 60, 60]
    assert retry_delay(0, 0.5) == 0.5 and retry_delay(1, 59) == 59
    assert retry_delay(0, 61) == 2  # a hint of a minute or more is not honoured


async def test_retryable_errors_are_retried_with_reset_step_after_partial_output() -> None:
    attempts: list[int] = []
    waited: list[float] = []

    async def flaky(request: ModelRequest, step: int) -> Any:
        attempts.append(step)
        if len(attempts) == 1:
            yield hp.TextStartPart(id="t")
            yield hp.TextDeltaPart(id="t", delta="Half an ans")
            raise ModelError("overloaded", retryable=True, retry_after=0.25)
        for part in text_step("A whole answer."):
            yield part

    async def sleep(seconds: float) -> None:
        waited.append(seconds)

    chunks, state = await run(Agent(model=FunctionModel(flaky), sleep=sleep))
    assert state.status == "finished" and waited == [0.25]
    types = [c["type"] for c in chunks]
    assert types.count("reset-step") == 1 and types.index("reset-step") > types.index("text-delta")
    assert [p for p in message_of(chunks)["parts"] if p["type"] == "text"] == [
        {"type": "text", "text": "A whole answer.", "state": "done"}
    ]


async def test_retries_are_bounded_and_non_retryable_errors_fail_at_once() -> None:
    calls: list[int] = []

    async def always(request: ModelRequest, step: int) -> Any:
        calls.append(step)
        raise ModelError("throttled", retryable=True)
        yield  # pragma: no cover

    async def no_wait(seconds: float) -> None:
        return None

    _, state = await run(Agent(model=FunctionModel(always), sleep=no_wait))
    assert len(calls) == 3 and state.status == "failed" and state.error == "throttled"
    calls.clear()
    _, state = await run(Agent(model=FunctionModel(always), sleep=no_wait, max_retries=0))
    assert len(calls) == 1


async def test_first_chunk_and_gap_timeouts_are_retryable_model_errors() -> None:
    never = asyncio.Event()

    async def stalls(request: ModelRequest, step: int) -> Any:
        yield hp.TextStartPart(id="t")
        await never.wait()

    async def no_wait(seconds: float) -> None:
        return None

    agent = Agent(model=FunctionModel(stalls), sleep=no_wait, timeout=Timeouts(chunk=0.02), max_retries=1)
    chunks, state = await run(agent)
    assert state.status == "failed" and "timed out waiting for the next chunk" in state.error
    assert [c["type"] for c in chunks].count("reset-step") == 1


async def test_total_timeout_stops_a_run_between_steps() -> None:
    model = ScriptedModel([tool_calls_step(("c1", "add", {"a": 1, "b": 1})), text_step("2")])
    _, state = await run(Agent(model=model, tools=[add], timeout=Timeouts(total=0)))
    assert state.status == "failed" and "total time limit" in state.error


async def test_send_reasoning_false_keeps_reasoning_from_the_client() -> None:
    step = [hp.ReasoningStartPart(id="r"), hp.ReasoningDeltaPart(id="r", delta="hmm"), hp.ReasoningEndPart(id="r")]
    model = ScriptedModel([step + text_step("Answer.")])
    chunks, _ = await run(Agent(model=model, send_reasoning=False))
    assert not [c for c in chunks if c["type"].startswith("reasoning")]
    assert message_of(chunks)["parts"][-1]["text"] == "Answer."
