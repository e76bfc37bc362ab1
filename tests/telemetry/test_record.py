"""The slice recorder on hand-fed event streams, with a clock that advances 1 ms per event.

These are the cases a harness can produce that the runs of the other tests do not: a retried
model call, an invalid tool input, a denial, a provider-executed tool inside the model call,
preliminary results, a result for a call made in an earlier slice, an error part, a slice that
raises.
"""

from __future__ import annotations

from collections.abc import Sequence

from durable_harness.errors import FencedError
from durable_harness.harness.interface import Checkpoint, HarnessEvent
from durable_harness.protocol import harness_parts as hp
from durable_harness.protocol import ui_chunks as uc
from durable_harness.runner.state import ApprovalRecord, RunState
from durable_harness.telemetry import AgentInfo, SliceRecord, SliceRecorder, SpanRecord

MS = 1_000_000
AGENT = AgentInfo("notes:agent", "bedrock:us.anthropic.claude-x")


class Clock:
    """Epoch nanoseconds; each reading is 1 ms after the previous one."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        self.now += MS
        return self.now


def state(status: str = "ready_for_next_step", **fields: object) -> RunState:
    return RunState(run_id="wrun_t", session_id="sess_t", message_id="msg_t", slices=2, status=status, **fields)  # type: ignore[arg-type]


def usage(input_tokens: int, output_tokens: int) -> hp.Usage:
    return hp.Usage(input_tokens=hp.InputTokens(total=input_tokens), output_tokens=hp.OutputTokens(total=output_tokens))


def finish_step(reason: str = "tool-calls", tokens: tuple[int, int] = (7, 3)) -> hp.FinishStepPart:
    return hp.FinishStepPart(finish_reason=hp.FinishReason(unified=reason), usage=usage(*tokens))  # type: ignore[arg-type]


def call(call_id: str, name: str = "lookup", provider: bool | None = None) -> hp.ToolCallPart:
    return hp.ToolCallPart(tool_call_id=call_id, tool_name=name, input="{}", provider_executed=provider)


def result(call_id: str, name: str = "lookup", **extra: object) -> hp.ToolResultPart:
    return hp.ToolResultPart(tool_call_id=call_id, tool_name=name, result={"ok": True}, **extra)  # type: ignore[arg-type]


def record(
    events: Sequence[HarnessEvent], end: RunState | None = None, error: BaseException | None = None
) -> SliceRecord:
    recorder = SliceRecorder(state(), AGENT, clock=Clock())  # reads 1 ms
    for event in events:
        recorder.event(event)
    return recorder.finish(end or state(), error)


def spans(rec: SliceRecord, kind: str) -> list[SpanRecord]:
    return [s for s in rec.span.walk() if s.kind == kind]


def test_a_step_runs_from_the_previous_step_and_its_model_call_to_the_last_model_part() -> None:
    rec = record(
        [
            hp.StreamStartPart(model_id="claude-x-2025"),  # 2 ms
            hp.TextStartPart(id="t"),  # 3
            call("c1"),  # 4
            result("c1"),  # 5
            finish_step(),  # 6
            Checkpoint(state=None),  # 7: the next step waits for the model from here
            hp.TextDeltaPart(id="t2", delta="hi"),  # 8
            finish_step("stop", (5, 1)),  # 9
        ]
    )
    (first, second) = spans(rec, "step")
    assert (first.start_ns, first.end_ns) == (1 * MS, 6 * MS)
    assert (second.start_ns, second.end_ns) == (7 * MS, 9 * MS)
    (m1, m2) = spans(rec, "model")
    assert (m1.start_ns, m1.end_ns) == (1 * MS, 4 * MS)  # from the step's start to the tool call
    assert m1.name == "chat us.anthropic.claude-x"
    assert m1.attributes["gen_ai.provider.name"] == "aws.bedrock"
    assert m1.attributes["gen_ai.response.model"] == "claude-x-2025"
    assert (m1.attributes["gen_ai.usage.input_tokens"], m1.attributes["gen_ai.usage.output_tokens"]) == (7, 3)
    assert (m2.start_ns, m2.end_ns) == (7 * MS, 8 * MS)
    (tool,) = spans(rec, "tool")
    assert (tool.start_ns, tool.end_ns) == (4 * MS, 5 * MS) and tool.error is None
    assert first.attributes["durable_harness.step.id"] == "wrun_t/2.1"
    assert second.attributes["durable_harness.step.id"] == "wrun_t/2.2"
    counters = rec.counters["bedrock:us.anthropic.claude-x"]
    assert (counters.input_tokens, counters.output_tokens, counters.steps, counters.tool_calls) == (12, 4, 2, 1)
    assert rec.span.attributes["gen_ai.usage.input_tokens"] == 12


def test_a_host_tool_starts_when_the_model_call_ends() -> None:
    rec = record([call("c1"), hp.TextDeltaPart(id="t", delta="more"), result("c1"), finish_step()])
    (tool,) = spans(rec, "tool")
    (model,) = spans(rec, "model")
    assert model.end_ns == 3 * MS and (tool.start_ns, tool.end_ns) == (3 * MS, 4 * MS)


def test_a_retried_model_call_is_a_failed_attempt_then_a_new_one() -> None:
    rec = record([hp.TextDeltaPart(id="t", delta="a"), uc.ResetStepChunk(), hp.TextDeltaPart(id="t", delta="b"),
                  finish_step("stop")])  # fmt: skip
    (failed, retry) = spans(rec, "model")
    assert failed.error == "retried" and (failed.start_ns, failed.end_ns) == (1 * MS, 2 * MS)
    assert retry.error is None and (retry.start_ns, retry.end_ns) == (2 * MS, 4 * MS)
    assert "gen_ai.usage.input_tokens" in retry.attributes and "gen_ai.usage.input_tokens" not in failed.attributes


def test_tool_errors_invalid_inputs_and_denials() -> None:
    rec = record(
        [
            call("c1"),
            uc.ToolInputErrorChunk(tool_call_id="c2", tool_name="lookup", input="{", error_text="bad JSON"),
            call("c3", "remove"),
            result("c1", is_error=True),
            uc.ToolOutputErrorChunk(tool_call_id="c4", error_text="boom"),  # a call of an earlier slice
            uc.ToolOutputDeniedChunk(tool_call_id="c3"),
            finish_step(),
        ]
    )
    tools = {str(s.attributes["gen_ai.tool.call.id"]): s for s in spans(rec, "tool")}
    assert {k: v.error for k, v in tools.items()} == {"c1": "tool_error", "c2": "invalid_input", "c3": None,
                                                     "c4": "tool_error"}  # fmt: skip
    assert tools["c3"].attributes["durable_harness.tool.outcome"] == "denied"
    # A call this slice never saw: no name, and it ran at the earliest when this step's model call ended.
    assert tools["c4"].attributes["gen_ai.tool.name"] == "unknown" and tools["c4"].start_ns == 4 * MS
    assert rec.counters[AGENT.model or ""].tool_errors == 3


def test_a_provider_executed_tool_runs_inside_the_model_call_and_preliminary_results_do_not_end_it() -> None:
    rec = record(
        [
            call("p1", "web_search", provider=True),  # 2
            result("p1", "web_search", preliminary=True),  # 3
            result("p1", "web_search"),  # 4
            hp.TextDeltaPart(id="t", delta="found it"),  # 5
            finish_step("stop"),  # 6
        ]
    )
    (tool,) = spans(rec, "tool")
    (model,) = spans(rec, "model")
    assert tool.attributes["gen_ai.tool.type"] == "extension"
    assert (tool.start_ns, tool.end_ns) == (2 * MS, 4 * MS)
    assert model.end_ns == 5 * MS  # the model went on after its own tool


def test_a_paused_slice_counts_the_approvals_it_waits_for_and_ends_the_waiting_call() -> None:
    pending = [ApprovalRecord(approval_id="approval-c1", tool_call_id="c1", tool_name="remove", input={})]
    rec = record(
        [call("c1", "remove"), hp.ToolApprovalRequestPart(approval_id="approval-c1", tool_call_id="c1"), finish_step()],
        end=state("awaiting_tool_approval", pending_approvals=pending),
    )
    (tool,) = spans(rec, "tool")
    assert tool.attributes["durable_harness.tool.outcome"] == "approval_requested" and tool.end_ns == 4 * MS
    assert rec.approvals_waiting == 1 and rec.span.attributes["durable_harness.approvals.waiting"] == 1


def test_a_failed_run_and_a_slice_that_raises_mark_their_open_spans() -> None:
    failed = record([hp.TextDeltaPart(id="t", delta="a"), hp.ErrorPart(error="overloaded")], end=state("failed"))
    (model,) = spans(failed, "model")
    (step,) = spans(failed, "step")
    assert (model.error, step.error, failed.span.error) == ("model_error", "run_failed", "run_failed")

    raised = record([call("c1")], error=FencedError("a newer writer owns the run"))
    (tool,) = spans(raised, "tool")
    assert raised.span.error == "FencedError" and spans(raised, "step")[0].error == "FencedError"
    assert tool.attributes["durable_harness.tool.outcome"] == "unfinished" and tool.end_ns == raised.span.end_ns


def test_a_recorder_bug_stops_recording_but_never_raises(monkeypatch: object) -> None:
    recorder = SliceRecorder(state(), AGENT, clock=Clock())
    recorder._open_step = None  # type: ignore[assignment,method-assign]  # any event that opens a step now fails
    recorder.event(hp.TextDeltaPart(id="t", delta="a"))
    recorder.event(finish_step())
    rec = recorder.finish(state("finished"), None)
    assert rec.status == "finished" and spans(rec, "step") == []


def test_a_result_for_a_call_made_in_an_earlier_slice_starts_with_its_step() -> None:
    rec = record([result("c9", "remove"), finish_step("stop")])  # an approved call, run as the slice starts
    (tool,) = spans(rec, "tool")
    assert tool.attributes["gen_ai.tool.name"] == "remove" and (tool.start_ns, tool.end_ns) == (1 * MS, 2 * MS)
    assert spans(rec, "model") == []
