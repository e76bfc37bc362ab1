"""OpenTelemetry spans of runs with tools, through the real runner, read from the SDK's in-memory exporter.

Nothing is faked: the spans come from the OpenTelemetry SDK (a ``TracerProvider`` with a
``SimpleSpanProcessor`` into an ``InMemorySpanExporter``), the runs from the real runner and harnesses.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from durable_harness.runner.state import RunState
from durable_harness.telemetry import AgentInfo, SliceRecord, SliceRecorder
from durable_harness.telemetry.otel import OpenTelemetryExporter, run_trace_id
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from tests.harness.support import answered
from tests.telemetry.support import PRIVATE, SCENARIOS, Scenario, observed_turns, run_scenario, tool_calls_of


@pytest.fixture
def spans() -> Iterator[tuple[InMemorySpanExporter, TracerProvider]]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    yield memory, provider
    provider.shutdown()


@pytest.fixture(autouse=True)
def _fast_steps(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setenv("STEP_SECONDS", "0.05")  # the harness program's own tools
    monkeypatch.setenv("NOTES_DIR", str(tmp_path / "notes"))


def children(span: ReadableSpan, every: list[ReadableSpan]) -> list[ReadableSpan]:
    return [s for s in every if s.parent is not None and s.parent.span_id == span.context.span_id]


def of_kind(every: list[ReadableSpan], operation: str) -> list[ReadableSpan]:
    return [s for s in every if (s.attributes or {}).get("gen_ai.operation.name") == operation]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
async def test_a_run_with_tools_is_one_trace_of_slices_steps_model_and_tool_calls(
    scenario: Scenario, spans: tuple[InMemorySpanExporter, TracerProvider]
) -> None:
    memory, provider = spans
    chunks, state = await run_scenario(scenario, [OpenTelemetryExporter(provider.get_tracer("test"))])
    every = list(memory.get_finished_spans())
    slices = of_kind(every, "invoke_agent")

    # One span per slice, all in the run's trace, numbered in order. A harness program goes on
    # after `stop` to its next slice point (issue 18), so its two-step turn may fit in one slice.
    assert len(slices) == state.slices >= (1 if scenario.name == "process" else 2)
    assert {s.context.trace_id for s in every} == {run_trace_id(state.run_id)}
    assert [s.attributes["durable_harness.slice.number"] for s in slices] == list(range(1, state.slices + 1))
    for s in slices:
        assert s.kind == SpanKind.INTERNAL and s.name.startswith("invoke_agent ")
        assert s.attributes["durable_harness.run.id"] == state.run_id
        assert s.attributes["gen_ai.conversation.id"] == state.session_id
    assert slices[-1].attributes["durable_harness.run.status"] == "awaiting_tool_approval"
    assert slices[-1].attributes["durable_harness.approvals.waiting"] == 1

    # Steps under slices; model calls and tool calls under steps, inside their parent's time.
    steps = [step for s in slices for step in children(s, every)]
    assert steps and all(step.name == "step" for step in steps)
    assert len({step.attributes["durable_harness.step.id"] for step in steps}) == len(steps)
    by_id = {s.context.span_id: s for s in every}
    for span in every:
        if span.parent is not None and span.parent.span_id in by_id:
            parent = by_id[span.parent.span_id]
            assert parent.start_time <= span.start_time <= span.end_time <= parent.end_time, span.name
    models = of_kind(every, "chat")
    assert models and all(by_id[m.parent.span_id].name == "step" for m in models)  # type: ignore[union-attr]
    assert all(m.kind == SpanKind.CLIENT and m.name.startswith("chat ") for m in models)

    # Every tool call the client saw has one span, with its id and name, under a step.
    tools = of_kind(every, "execute_tool")
    assert {t.attributes["gen_ai.tool.call.id"]: t.attributes["gen_ai.tool.name"] for t in tools} == tool_calls_of(
        chunks
    )
    assert len(tools) == len(tool_calls_of(chunks))
    assert all(by_id[t.parent.span_id].name == "step" for t in tools)  # type: ignore[union-attr]
    assert all(t.name == f"execute_tool {t.attributes['gen_ai.tool.name']}" for t in tools)
    waiting = next(t for t in tools if t.attributes["gen_ai.tool.call.id"] == scenario.approval_call)
    assert waiting.attributes["durable_harness.tool.outcome"] == "approval_requested"

    # Token usage: the steps' add up to the turn's, and the model calls carry their step's.
    final = state.final_result
    assert final is not None
    assert sum(int(s.attributes["gen_ai.usage.input_tokens"]) for s in steps) == final.input_tokens
    assert sum(int(s.attributes["gen_ai.usage.output_tokens"]) for s in steps) == final.output_tokens
    for m in models:
        step = by_id[m.parent.span_id]  # type: ignore[union-attr]
        if "gen_ai.usage.input_tokens" in m.attributes:  # type: ignore[operator]
            assert m.attributes["gen_ai.usage.input_tokens"] == step.attributes["gen_ai.usage.input_tokens"]

    # No message content: not the text the tools were given, nor what they returned.
    assert not [s.name for s in every if PRIVATE in repr(dict(s.attributes or {})) or PRIVATE in s.name]


async def test_the_built_in_loops_spans_name_the_model_and_mark_the_failing_tool(
    spans: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    memory, provider = spans
    scenario = SCENARIOS[0]
    _, state = await run_scenario(scenario, [OpenTelemetryExporter(provider.get_tracer("test"))], slice_seconds=None)
    every = list(memory.get_finished_spans())
    assert state.slices == 1
    (first_model, second_model) = of_kind(every, "chat")
    for m in (first_model, second_model):
        assert (m.attributes["gen_ai.provider.name"], m.attributes["gen_ai.request.model"]) == ("scripted", "scripted")
    assert first_model.attributes["gen_ai.usage.input_tokens"] == 10
    assert first_model.attributes["gen_ai.response.finish_reasons"] == ("tool-calls",)
    tools = {t.attributes["gen_ai.tool.call.id"]: t for t in of_kind(every, "execute_tool")}
    assert tools["c2"].status.status_code == StatusCode.ERROR and tools["c2"].attributes["error.type"] == "tool_error"
    assert tools["c1"].status.status_code == StatusCode.UNSET
    assert tools["c1"].attributes["gen_ai.tool.type"] == "function"
    # The host runs a tool after the model call that asked for it.
    for call in ("c1", "c2", "c3"):
        assert tools[call].start_time >= first_model.end_time
    # Run one at a time (tool_call_concurrency=1), each ends before the next one's result.
    assert tools["c1"].end_time <= tools["c2"].end_time <= tools["c3"].end_time


async def test_a_slice_inside_a_span_joins_its_trace(spans: tuple[InMemorySpanExporter, TracerProvider]) -> None:
    memory, provider = spans
    tracer = provider.get_tracer("test")
    exporter = OpenTelemetryExporter(tracer)
    with tracer.start_as_current_span("lambda invocation") as outer:
        _, state = await run_scenario(SCENARIOS[0], [exporter], slice_seconds=None)
    (slice_span,) = of_kind(list(memory.get_finished_spans()), "invoke_agent")
    assert slice_span.parent is not None and slice_span.parent.span_id == outer.get_span_context().span_id
    assert slice_span.context.trace_id == outer.get_span_context().trace_id != run_trace_id(state.run_id)


async def test_the_run_that_answers_an_approval_links_to_the_paused_run(
    spans: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    memory, provider = spans
    scenario = SCENARIOS[0]
    turns = observed_turns(scenario.harness(), [OpenTelemetryExporter(provider.get_tracer("test"))])
    chunks, paused = await turns.ask(scenario.prompt)
    _, state = await turns.run(answered(scenario.prompt, chunks, scenario.approval_call, True), "msg_a")
    assert state.status == "finished" and state.run_id != paused.run_id
    every = list(memory.get_finished_spans())
    later = [s for s in of_kind(every, "invoke_agent") if s.attributes["durable_harness.run.id"] == state.run_id]
    assert later and {s.context.trace_id for s in later} == {run_trace_id(state.run_id)}
    first = later[0]
    assert first.attributes["durable_harness.run.continues"] == paused.run_id
    assert [link.context.trace_id for link in first.links] == [run_trace_id(paused.run_id)]
    # The approved call runs in the continuation: its span is in the new run's trace.
    (approved,) = [t for t in of_kind(every, "execute_tool") if t.context.trace_id == run_trace_id(state.run_id)]
    assert approved.attributes["gen_ai.tool.call.id"] == scenario.approval_call
    assert approved.attributes["durable_harness.tool.outcome"] == "done"


async def test_a_failing_exporter_never_fails_the_run(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def export(self, record: SliceRecord) -> None:
            raise RuntimeError("backend down")

    seen: list[SliceRecord] = []

    class Collect:
        def export(self, record: SliceRecord) -> None:
            seen.append(record)

    _, state = await run_scenario(SCENARIOS[0], [Broken(), Collect()], slice_seconds=None)
    assert state.status == "awaiting_tool_approval"
    assert len(seen) == 1 and "telemetry: Broken failed" in caplog.text


def test_without_a_configured_provider_nothing_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    # The global provider stays the API's proxy until an application sets one: no span is made.
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    made: list[str] = []
    monkeypatch.setattr(trace.ProxyTracer, "start_span", lambda self, name, *a, **k: made.append(name))
    state = RunState(run_id="wrun_x", session_id="sess_x", message_id="msg_x", slices=1)
    OpenTelemetryExporter().export(SliceRecorder(state, AgentInfo("agent")).finish(state, None))
    assert made == []
