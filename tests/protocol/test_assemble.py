"""UIMessageAssembler: the message a useChat client (behind WorkflowChatTransport) ends with.

Expected messages not spelled out in ui-message-stream.md were produced by the real client
(``AbstractChat`` of ``ai`` 7.0.173 behind ``normalizeUIMessageStreamParts`` of
``@ai-sdk/workflow`` 2.0.43) from the same chunks.
"""

# ruff: noqa: E501 - reference examples and expected client JSON are kept one object per line, verbatim

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from durable_harness.errors import ProtocolError
from durable_harness.protocol import harness_parts as hp
from durable_harness.protocol.assemble import UIMessageAssembler, assemble_ui_message, merge_objects
from durable_harness.protocol.translate import StreamTranslator, TranslatorState
from durable_harness.protocol.ui_chunks import FinishChunk, StartChunk, TextDeltaChunk

START = [{"type": "start", "messageId": "m1"}, {"type": "start-step"}]
END = [{"type": "finish-step"}, {"type": "finish", "finishReason": "stop"}]


def parts(chunks: list[dict[str, Any]], **kwargs: Any) -> list[dict[str, Any]]:
    return assemble_ui_message(chunks, **kwargs)["parts"]  # type: ignore[no-any-return]


def test_reset_step_example_of_section_10() -> None:
    chunks = [
        {"type": "start", "messageId": "m1"}, {"type": "start-step"},
        {"type": "text-start", "id": "t1"}, {"type": "text-delta", "id": "t1", "delta": "First att"},
        {"type": "reset-step"},
        {"type": "text-start", "id": "t1"}, {"type": "text-delta", "id": "t1", "delta": "Second attempt succeeded."},
        {"type": "text-end", "id": "t1"}, {"type": "finish-step"}, {"type": "finish"},
    ]  # fmt: skip
    assert assemble_ui_message(chunks) == {
        "id": "m1",
        "role": "assistant",
        "parts": [{"type": "step-start"}, {"type": "text", "text": "Second attempt succeeded.", "state": "done"}],
    }


def test_text_turn_of_section_3_1_with_models() -> None:
    assembler = UIMessageAssembler("client-id")
    assembler.apply_all([
        StartChunk(message_metadata={"createdAt": 1}, message_id="msg-assistant-1"),
        {"type": "start-step"}, {"type": "text-start", "id": "t1"},
        TextDeltaChunk(id="t1", delta="Hello"), {"type": "text-delta", "id": "t1", "delta": " world"},
        {"type": "text-end", "id": "t1"}, {"type": "finish-step"},
        FinishChunk(finish_reason="stop", message_metadata={"totalTokens": 8}),
    ])  # fmt: skip
    assert assembler.message() == {
        "id": "msg-assistant-1",
        "role": "assistant",
        "metadata": {"createdAt": 1, "totalTokens": 8},
        "parts": [{"type": "step-start"}, {"type": "text", "text": "Hello world", "state": "done"}],
    }
    assert (assembler.finished, assembler.finish_reason, assembler.error) == (True, "stop", None)


def test_metadata_deep_merge_and_provider_metadata() -> None:
    message = assemble_ui_message([
        {"type": "start", "messageId": "m1", "messageMetadata": {"a": 1, "n": {"x": 1}, "l": [1, 2]}},
        {"type": "start-step"},
        {"type": "text-start", "id": "t1", "providerMetadata": {"p": {"a": 1}}},
        {"type": "text-delta", "id": "t1", "delta": "Hel"},
        {"type": "text-delta", "id": "t1", "delta": "lo", "providerMetadata": {"p": {"b": 2}}},
        {"type": "text-end", "id": "t1", "citations": [{"x": 1}]},
        {"type": "message-metadata", "messageMetadata": {"n": {"y": 2}, "l": [3]}},
        {"type": "finish-step"}, {"type": "finish", "finishReason": "stop", "messageMetadata": {"b": 2}},
    ])  # fmt: skip
    assert message["metadata"] == {"a": 1, "n": {"x": 1, "y": 2}, "l": [3], "b": 2}
    assert message["parts"][1] == {"type": "text", "text": "Hello", "providerMetadata": {"p": {"b": 2}},
                                   "state": "done", "citations": [{"x": 1}]}  # fmt: skip
    assert merge_objects({"a": {"b": 1}}, {"a": {"c": None}, "__proto__": 1}) == {"a": {"b": 1, "c": None}}


def test_server_tool_two_steps() -> None:
    chunks = [
        *START,
        {"type": "tool-input-start", "toolCallId": "c1", "toolName": "weather", "title": "W", "toolMetadata": {"k": 1}},
        {"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": '{"city":'},
        {"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": '"Par'},
    ]  # fmt: skip
    streaming = parts(chunks)[1]
    assert streaming == {"type": "tool-weather", "toolCallId": "c1", "state": "input-streaming", "title": "W",
                         "toolMetadata": {"k": 1}, "input": {"city": "Par"}, "rawInput": '{"city":"Par'}  # fmt: skip
    chunks += [
        {"type": "tool-input-available", "toolCallId": "c1", "toolName": "weather", "input": {"city": "Paris"},
         "providerMetadata": {"p": {"call": 1}}},
        {"type": "tool-output-available", "toolCallId": "c1", "output": {"t": 20}, "providerMetadata": {"p": {"r": 1}}},
        {"type": "finish-step"}, {"type": "start-step"},
        {"type": "text-start", "id": "t"}, {"type": "text-delta", "id": "t", "delta": "20 degrees."},
        {"type": "text-end", "id": "t"}, *END,
    ]  # fmt: skip
    assert parts(chunks) == [
        {"type": "step-start"},
        {"type": "tool-weather", "toolCallId": "c1", "state": "output-available", "title": "W", "toolMetadata": {"k": 1},
         "input": {"city": "Paris"}, "output": {"t": 20}, "callProviderMetadata": {"p": {"call": 1}},
         "resultProviderMetadata": {"p": {"r": 1}}},
        {"type": "step-start"},
        {"type": "text", "text": "20 degrees.", "state": "done"},
    ]  # fmt: skip


def test_partial_inputs_as_the_client_shows_them() -> None:
    start = {"type": "tool-input-start", "toolCallId": "c1", "toolName": "weather"}
    assert parts([*START, {**start, "dynamic": True},
                  {"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": '{"ci'}])[1] == {
        "type": "dynamic-tool", "toolName": "weather", "toolCallId": "c1", "state": "input-streaming", "input": {},
        "rawInput": '{"ci',
    }  # fmt: skip
    assert parts([*START, {**start, "inputEncoding": "text"},
                  {"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": "abc"}])[1] == {
        "type": "tool-weather", "toolCallId": "c1", "state": "input-streaming", "input": "abc",
        "inputEncoding": "text", "rawInput": "abc",
    }  # fmt: skip


def test_tool_input_errors() -> None:
    assert parts([
        *START,
        {"type": "tool-input-error", "toolCallId": "c1", "toolName": "weather", "input": '{"city":', "errorText": "Invalid JSON"},
        {"type": "tool-input-start", "toolCallId": "c2", "toolName": "lookup", "dynamic": True},
        {"type": "tool-input-error", "toolCallId": "c2", "toolName": "lookup", "input": {"id": 1}, "errorText": "Bad"},
        {"type": "tool-input-error", "toolCallId": "c3", "toolName": "other", "input": {}, "errorText": "No tool", "dynamic": True},
        {"type": "tool-input-start", "toolCallId": "c4", "toolName": "st"},
        {"type": "tool-input-delta", "toolCallId": "c4", "inputTextDelta": "{"},
        {"type": "tool-input-error", "toolCallId": "c4", "toolName": "st", "input": "{bad", "errorText": "E", "dynamic": True},
        {"type": "tool-output-error", "toolCallId": "c4", "errorText": "E2"},
    ])[1:] == [
        {"type": "tool-weather", "toolCallId": "c1", "state": "output-error", "input": '{"city":', "errorText": "Invalid JSON"},
        {"type": "dynamic-tool", "toolName": "lookup", "toolCallId": "c2", "state": "output-error", "input": {"id": 1},
         "errorText": "Bad"},
        {"type": "dynamic-tool", "toolName": "other", "toolCallId": "c3", "state": "output-error", "input": {},
         "errorText": "No tool"},
        {"type": "tool-st", "toolCallId": "c4", "state": "output-error", "input": "{bad", "errorText": "E2"},
    ]  # fmt: skip


APPROVAL_REQUEST = [
    {"type": "start", "messageId": "msg_11", "messageMetadata": {"createdAt": 1795984524247}},
    {"type": "start-step"},
    {"type": "tool-input-available", "toolCallId": "call_11", "toolName": "deleteFile", "input": {"path": "notes/draft.txt"}},
    {"type": "tool-approval-request", "approvalId": "approval-call_11", "toolCallId": "call_11",
     "signature": "FMwvgq3MwPAapUVCdi-3nA9CdVCODM0NdojMONvQr5s"},
    {"type": "finish-step"}, {"type": "finish", "finishReason": "tool-calls"},
]  # fmt: skip


def answered(approved: bool, reason: str | None = None) -> dict[str, Any]:
    """The assistant message after ``addToolApprovalResponse({id, approved, reason})`` (§7.1)."""
    message = assemble_ui_message(APPROVAL_REQUEST, message_id="client-id")
    part = message["parts"][1]
    assert part["state"] == "approval-requested"
    part["state"] = "approval-responded"
    part["approval"] = {**part["approval"], "approved": approved, **({"reason": reason} if reason else {})}
    return message


def test_approval_round_trip_shapes_of_section_7_1() -> None:
    posted = json.loads(
        '{"id":"msg_11","metadata":{"createdAt":1795984524247},"role":"assistant","parts":['
        '{"type":"step-start"},'
        '{"type":"tool-deleteFile","toolCallId":"call_11","state":"approval-responded","input":{"path":"notes/draft.txt"},'
        '"approval":{"id":"approval-call_11","signature":"FMwvgq3MwPAapUVCdi-3nA9CdVCODM0NdojMONvQr5s",'
        '"approved":false,"reason":"no way"}}]}'
    )
    assert answered(False, "no way") == posted


@pytest.mark.parametrize("shape", ["streamText", "WorkflowAgent"])
def test_approved_continuation_reaches_output_available(shape: str) -> None:
    output = {"type": "tool-output-available", "toolCallId": "call_11", "output": {"deleted": "notes/draft.txt"}}
    text = [{"type": "text-start", "id": "t"}, {"type": "text-delta", "id": "t", "delta": "Deleted."},
            {"type": "text-end", "id": "t"}]  # fmt: skip
    if shape == "streamText":  # §6.1: the output comes before start-step
        chunks = [{"type": "start", "messageId": "msg_11"}, output, {"type": "start-step"}, *text, *END]
    else:  # §6.2
        chunks = [{"type": "start"}, {"type": "start-step"}, output, {"type": "finish-step"}, {"type": "start-step"},
                  {"type": "reset-step"}, *text, *END]  # fmt: skip
    assembler = UIMessageAssembler(message=answered(True))
    assembler.apply_all(chunks)
    message = assembler.message()
    tool = message["parts"][1]
    assert tool["state"] == "output-available"
    assert tool["output"] == {"deleted": "notes/draft.txt"}
    assert tool["approval"] == {"id": "approval-call_11", "signature": "FMwvgq3MwPAapUVCdi-3nA9CdVCODM0NdojMONvQr5s",
                                "approved": True}  # fmt: skip
    assert message["id"] == "msg_11"
    assert message["parts"][-1] == {"type": "text", "text": "Deleted.", "state": "done"}
    # The WorkflowAgent shape leaves an extra (empty) step-start part.
    assert [p["type"] for p in message["parts"]].count("step-start") == (2 if shape == "streamText" else 3)


def test_denied_continuation_reaches_output_denied() -> None:
    assembler = UIMessageAssembler(message=answered(False, "no way"))
    assembler.apply_all([{"type": "start", "messageId": "msg_11"}, {"type": "tool-output-denied", "toolCallId": "call_11"},
                         {"type": "start-step"}, *END])  # fmt: skip
    tool = assembler.message()["parts"][1]
    assert tool["state"] == "output-denied"
    assert tool["approval"]["reason"] == "no way"


def test_approval_request_and_response_chunks() -> None:
    assert parts([
        *START,
        {"type": "tool-input-available", "toolCallId": "c1", "toolName": "web", "input": {"q": "s"}, "providerExecuted": True},
        {"type": "tool-approval-request", "approvalId": "a1", "toolCallId": "c1", "isAutomatic": True},
        {"type": "tool-approval-response", "approvalId": "a1", "approved": True, "providerMetadata": {"p": {"x": 1}},
         "providerExecuted": True},
        {"type": "tool-output-available", "toolCallId": "c1", "output": [{"u": 1}], "providerExecuted": True,
         "preliminary": True},
        {"type": "tool-output-available", "toolCallId": "c1", "output": [{"u": 2}]},
    ])[1] == {
        "type": "tool-web", "toolCallId": "c1", "state": "output-available", "input": {"q": "s"}, "output": [{"u": 2}],
        "providerExecuted": True, "approval": {"id": "a1", "isAutomatic": True, "approved": True},
        "callProviderMetadata": {"p": {"x": 1}},
    }  # fmt: skip


def test_data_parts() -> None:
    assert parts([
        {"type": "data-weather", "id": "w1", "data": {"s": "loading"}},
        {"type": "data-weather", "id": "w1", "data": {"s": "done"}},  # an update in place
        {"type": "data-notice", "data": "t", "transient": True},  # never in the message
        {"type": "data-log", "data": "one"}, {"type": "data-log", "data": "two"},
        {"type": "data-weather", "id": "w2", "data": None, "transient": False},
    ]) == [
        {"type": "data-weather", "id": "w1", "data": {"s": "done"}},
        {"type": "data-log", "data": "one"}, {"type": "data-log", "data": "two"},
        {"type": "data-weather", "id": "w2", "data": None, "transient": False},
    ]  # fmt: skip


def test_normalizer_repairs_framing() -> None:
    assert parts([
        {"type": "start"}, {"type": "start-step"}, {"type": "reset-step"},
        {"type": "text-start", "id": "0"}, {"type": "text-delta", "id": "0", "delta": "a"}, {"type": "text-end", "id": "0"},
        {"type": "text-start", "id": "0"}, {"type": "text-delta", "id": "0", "delta": "dup"},  # replayed: dropped
        {"type": "finish-step"}, {"type": "start-step"},
        {"type": "text-delta", "id": "0", "delta": "b"},  # orphan delta: a start is synthesized
        {"type": "text-end", "id": "0"}, *END,
    ]) == [
        {"type": "step-start"}, {"type": "text", "text": "a", "state": "done"},
        {"type": "step-start"}, {"type": "text", "text": "b", "state": "done"},
    ]  # fmt: skip


def test_error_chunk_ends_processing() -> None:
    assembler = UIMessageAssembler()
    assembler.apply_all([*START, {"type": "text-start", "id": "t"}, {"type": "text-delta", "id": "t", "delta": "x"},
                         {"type": "error", "errorText": "Rate limited"}, {"type": "text-delta", "id": "t", "delta": "y"},
                         {"type": "finish"}])  # fmt: skip
    assert assembler.error == "Rate limited"
    assert not assembler.finished
    assert assembler.message()["parts"][1] == {"type": "text", "text": "x", "state": "streaming"}


@pytest.mark.parametrize(
    ("chunk", "message"),
    [
        ({"type": "tool-input-delta", "toolCallId": "c9", "inputTextDelta": "{"},
         'Received tool-input-delta for missing tool call with ID "c9".'),
        ({"type": "tool-output-available", "toolCallId": "c9", "output": 1},
         'No tool invocation found for tool call ID "c9".'),
        ({"type": "tool-approval-response", "approvalId": "a9", "approved": True},
         'No tool invocation found for approval ID "a9".'),
        ({"type": "tool-approval-request", "approvalId": "a9", "toolCallId": "zz"},
         'No tool invocation found for tool call ID "zz".'),
    ],
)  # fmt: skip
def test_reducer_errors_raise_the_clients_message(chunk: dict[str, Any], message: str) -> None:
    assembler = UIMessageAssembler()
    with pytest.raises(ProtocolError) as caught:
        assembler.apply_all([*START, chunk])
    assert str(caught.value).startswith(message)
    assert assembler.error == str(caught.value)


def test_invalid_chunks_are_rejected_like_the_transport() -> None:
    with pytest.raises(ProtocolError):
        UIMessageAssembler().apply({"type": "start", "messageId": None})


def test_message_id_without_start_id_and_continuation_of_streaming_input() -> None:
    assert assemble_ui_message([{"type": "start"}])["id"] == ""
    assert assemble_ui_message([{"type": "start"}], message_id="gen")["id"] == "gen"
    earlier = {"id": "m", "role": "assistant", "parts": [
        {"type": "step-start"},
        {"type": "tool-w", "toolCallId": "c", "state": "input-streaming", "input": {"a": "b"}, "rawInput": '{"a":"b'}]}  # fmt: skip
    assembler = UIMessageAssembler(message=copy.deepcopy(earlier))
    assembler.apply({"type": "tool-input-delta", "toolCallId": "c", "inputTextDelta": 'c"}'})
    assert assembler.message()["parts"][1]["input"] == {"a": "bc"}
    assert earlier["parts"][1]["rawInput"] == '{"a":"b'  # the caller's dict is not touched


def translate(translator: StreamTranslator, items: list[Any]) -> list[dict[str, Any]]:
    return [chunk.to_dict() for item in items for chunk in translator.translate(item)]


def test_a_retried_step_gives_the_same_message_as_a_clean_run() -> None:
    usage = hp.Usage(input_tokens=hp.InputTokens(), output_tokens=hp.OutputTokens())
    step = [
        hp.TextStartPart(id="t"), hp.TextDeltaPart(id="t", delta="Checking."), hp.TextEndPart(id="t"),
        hp.ToolCallPart(tool_call_id="c1", tool_name="weather", input='{"city":"Paris"}'),
        hp.ToolResultPart(tool_call_id="c1", tool_name="weather", result={"t": 20}),
        hp.FinishStepPart(finish_reason=hp.FinishReason(unified="tool-calls"), usage=usage),
    ]  # fmt: skip
    last = [hp.TextStartPart(id="t"), hp.TextDeltaPart(id="t", delta="20 degrees."), hp.TextEndPart(id="t"),
            hp.FinishStepPart(finish_reason=hp.FinishReason(unified="stop"), usage=usage),
            hp.FinishPart(finish_reason=hp.FinishReason(unified="stop"), total_usage=usage)]  # fmt: skip

    clean = StreamTranslator()
    clean_chunks = [c.to_dict() for c in clean.start("m1")] + translate(clean, step + last)

    # Slice 1 dies after streaming part of step 2; its checkpoint is the state before that step.
    first = StreamTranslator()
    crashed = [c.to_dict() for c in first.start("m1")] + translate(first, step)
    checkpoint = first.state.model_dump_json()
    crashed += translate(first, last[:2])  # partial text of step 2, then the crash
    retry = StreamTranslator(TranslatorState.model_validate_json(checkpoint))
    # The log already holds the dead slice's start-step: the retry keeps that step open, drops its
    # partial parts with reset-step and streams the step again.
    assert not retry.state.step_open and crashed[-3] == {"type": "start-step"}
    retry.state.step_open = True
    resumed = crashed + [c.to_dict() for c in retry.reset_step()] + translate(retry, last)
    assert assemble_ui_message(resumed) == assemble_ui_message(clean_chunks)
    assert assemble_ui_message(clean_chunks)["parts"][-1] == {"type": "text", "text": "20 degrees.", "state": "done"}
