"""StreamTranslator: harness-stream-parts.md §5 / §5.1, step boundaries, checkpointing."""

# ruff: noqa: E501 - reference examples and expected client JSON are kept one object per line, verbatim

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from durable_harness.errors import ProtocolError, ToolError
from durable_harness.protocol import harness_parts as hp
from durable_harness.protocol import ui_chunks as uc
from durable_harness.protocol.harness_parts import decode_part
from durable_harness.protocol.translate import StreamTranslator, ToolCallInfo, TranslatorState
from durable_harness.protocol.ui_chunks import encode_ui_chunk

# The harness parts behind the §5.1 table's examples, in the order of its "UI chunks produced by
# stage 2" list. call_1 validates as a dynamic provider-executed call of a tool outside the tool
# set, so its tool-call carries "dynamic": true; call_5 was recorded in an earlier slice.
PARTS_5_1 = r"""
{"type":"stream-start","modelId":"claude-sonnet-4-5"}
{"type":"text-start","id":"txt_0"}
{"type":"text-delta","id":"txt_0","delta":"Hello","harnessMetadata":{"claude-code":{"x":1}}}
{"type":"text-end","id":"txt_0"}
{"type":"tool-input-start","id":"call_1","toolName":"bash","providerExecuted":true,"title":"List files"}
{"type":"tool-input-delta","id":"call_1","delta":"{\"command\":\"ls\"}"}
{"type":"tool-input-end","id":"call_1"}
{"type":"tool-call","toolCallId":"call_1","toolName":"bash","input":"{\"command\":\"ls\"}","providerExecuted":true,"dynamic":true,"nativeName":"Bash","stepToolCallCount":1}
{"type":"file-change","event":"modify","path":"src/app.py"}
{"type":"compaction","trigger":"auto","summary":"s","tokensBefore":180000,"tokensAfter":12000}
{"type":"tool-result","toolCallId":"call_1","toolName":"bash","result":{"stdout":"README.md\n","exitCode":0}}
{"type":"tool-result","toolCallId":"call_2","toolName":"bash","result":"command not found: foo","isError":true}
{"type":"tool-result","toolCallId":"call_3","toolName":"bash","result":{"code":127},"isError":true}
{"type":"tool-call","toolCallId":"call_4","toolName":"nope","input":"{bad"}
{"type":"tool-approval-request","approvalId":"apr_1","toolCallId":"call_5"}
{"type":"raw","rawValue":{"type":"system"}}
{"type":"finish-step","finishReason":{"unified":"stop"},"usage":{"inputTokens":{},"outputTokens":{}}}
{"type":"finish","finishReason":{"unified":"stop"},"totalUsage":{"inputTokens":{},"outputTokens":{}}}
""".strip().splitlines()

# §5.1 "UI chunks produced by stage 2 for the table's examples", verbatim.
CHUNKS_5_1 = r"""
{"type":"start"}
{"type":"start-step"}
{"type":"text-start","id":"txt_0"}
{"type":"text-delta","id":"txt_0","delta":"Hello","providerMetadata":{"claude-code":{"x":1}}}
{"type":"text-end","id":"txt_0"}
{"type":"tool-input-start","toolCallId":"call_1","toolName":"bash","providerExecuted":true,"title":"List files"}
{"type":"tool-input-delta","toolCallId":"call_1","inputTextDelta":"{\"command\":\"ls\"}"}
{"type":"tool-input-available","toolCallId":"call_1","toolName":"bash","input":{"command":"ls"},"providerExecuted":true,"dynamic":true}
{"type":"tool-input-available","toolCallId":"harness-file-change-abc","toolName":"fileChange","input":{"event":"modify","path":"src/app.py"},"providerExecuted":true,"dynamic":true}
{"type":"tool-output-available","toolCallId":"harness-file-change-abc","output":{"event":"modify","path":"src/app.py"},"providerExecuted":true,"dynamic":true}
{"type":"tool-input-available","toolCallId":"harness-compaction-def","toolName":"compaction","input":{},"providerExecuted":true,"dynamic":true}
{"type":"tool-output-available","toolCallId":"harness-compaction-def","output":{"trigger":"auto","summary":"s","tokensBefore":180000,"tokensAfter":12000},"providerExecuted":true,"dynamic":true}
{"type":"tool-output-available","toolCallId":"call_1","output":{"stdout":"README.md\n","exitCode":0}}
{"type":"tool-output-error","toolCallId":"call_2","errorText":"command not found: foo","providerExecuted":true}
{"type":"tool-output-error","toolCallId":"call_3","errorText":"{\"code\":127}","providerExecuted":true}
{"type":"tool-input-error","toolCallId":"call_4","toolName":"nope","input":"{bad","dynamic":true,"errorText":"An error occurred."}
{"type":"tool-approval-request","approvalId":"apr_1","toolCallId":"call_5"}
{"type":"finish-step"}
{"type":"finish","finishReason":"stop"}
""".strip().splitlines()


def ids(*values: str) -> Callable[[], str]:
    """An id factory returning ``values`` in order."""
    it: Iterator[str] = iter(values)
    return lambda: next(it)


def state_5_1() -> TranslatorState:
    return TranslatorState(tool_calls={"call_5": ToolCallInfo(tool_name="deleteFile", input={"path": "a"})})


def run(translator: StreamTranslator, lines: list[str]) -> list[str]:
    out = translator.start()
    for line in lines:
        out += translator.translate(decode_part(line))
    return [encode_ui_chunk(chunk) for chunk in out]


def test_section_5_1_example_byte_for_byte() -> None:
    translator = StreamTranslator(state_5_1(), tool_names=set(), id_factory=ids("abc", "def"))
    assert run(translator, PARTS_5_1) == CHUNKS_5_1
    assert translator.state.step_open is False
    assert translator.state.tool_calls["call_1"] == ToolCallInfo(
        tool_name="bash", input={"command": "ls"}, provider_executed=True, dynamic=True, title="List files"
    )


@pytest.mark.parametrize("split", range(len(PARTS_5_1) + 1))
def test_state_survives_a_checkpoint_anywhere(split: int) -> None:
    factory = ids("abc", "def")
    first = StreamTranslator(state_5_1(), tool_names=set(), id_factory=factory)
    out = run(first, PARTS_5_1[:split])
    restored = TranslatorState.model_validate_json(first.state.model_dump_json())
    assert restored == first.state
    second = StreamTranslator(restored, tool_names=set(), id_factory=factory)
    out += run(second, PARTS_5_1[split:])  # start() is a no-op: the run has started
    assert out == CHUNKS_5_1


def translate_all(translator: StreamTranslator, *items: Any) -> list[dict[str, Any]]:
    return [chunk.to_dict() for item in items for chunk in translator.translate(item)]


def test_steps_open_lazily_and_always_pair() -> None:
    t = StreamTranslator()
    assert [c.to_dict() for c in t.start("msg_1", {"createdAt": 1})] == [
        {"type": "start", "messageMetadata": {"createdAt": 1}, "messageId": "msg_1"}
    ]
    assert t.start("msg_1") == []
    usage = hp.Usage(input_tokens=hp.InputTokens(), output_tokens=hp.OutputTokens())
    finish_step = hp.FinishStepPart(finish_reason=hp.FinishReason(unified="tool-calls"), usage=usage)
    # An empty step still gets its start-step, so steps pair up on the wire.
    assert translate_all(t, finish_step) == [{"type": "start-step"}, {"type": "finish-step"}]
    assert translate_all(t, hp.StreamStartPart(), hp.RawPart(raw_value=None), hp.ToolInputEndPart(id="c")) == []
    assert translate_all(t, hp.TextStartPart(id="a"), hp.TextDeltaPart(id="a", delta="x")) == [
        {"type": "start-step"}, {"type": "text-start", "id": "a"}, {"type": "text-delta", "id": "a", "delta": "x"}
    ]  # fmt: skip
    finish = hp.FinishPart(finish_reason=hp.FinishReason(unified="stop"), total_usage=usage)
    with pytest.raises(ProtocolError, match="received terminal finish with unclosed step content"):
        t.translate(finish)
    assert translate_all(t, hp.TextEndPart(id="a"), finish_step, finish) == [
        {"type": "text-end", "id": "a"}, {"type": "finish-step"}, {"type": "finish", "finishReason": "stop"}
    ]  # fmt: skip


def test_start_metadata_null_is_sent() -> None:
    assert [c.to_dict() for c in StreamTranslator().start(message_metadata=None)] == [
        {"type": "start", "messageMetadata": None}
    ]


def test_reset_step_clears_open_ids_and_keeps_the_step() -> None:
    t = StreamTranslator()
    t.start()
    translate_all(t, hp.TextStartPart(id="t1"), hp.ReasoningStartPart(id="r1"), hp.TextDeltaPart(id="t1", delta="x"))
    assert (t.state.open_text, t.state.open_reasoning, t.state.step_open) == (["t1"], ["r1"], True)
    assert [c.to_dict() for c in t.reset_step()] == [{"type": "reset-step"}]
    assert (t.state.open_text, t.state.open_reasoning, t.state.step_open) == ([], [], True)
    # The retried attempt reuses the id, within the same step (no second start-step).
    assert translate_all(t, hp.TextStartPart(id="t1")) == [{"type": "text-start", "id": "t1"}]
    assert t.state.open_text == ["t1"]
    assert translate_all(t, hp.TextEndPart(id="t1")) == [{"type": "text-end", "id": "t1"}]
    assert t.state.open_text == []


def sign(secret: str, approval_id: str, tool_call_id: str, tool_name: str, value: Any) -> str:
    """``signToolApproval`` (ui-message-stream.md §11)."""

    def b64u(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    def canon(v: Any) -> str:
        if isinstance(v, list):
            return "[" + ",".join(canon(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + canon(v[k]) for k in sorted(v)) + "}"
        return json.dumps(v, ensure_ascii=False)

    digest = b64u(hashlib.sha256(canon(value).encode()).digest())
    payload = json.dumps(["ai-sdk-tool-approval-v1", approval_id, tool_call_id, tool_name, digest],
                         ensure_ascii=False, separators=(",", ":")).encode()  # fmt: skip
    return b64u(hmac.new(secret.encode(), payload, hashlib.sha256).digest())


def test_approval_request_is_signed_with_the_recorded_call() -> None:
    t = StreamTranslator(tool_names={"del"}, signer=lambda *args: sign("topsecret", *args))
    t.start()
    call = hp.ToolCallPart(tool_call_id="call_2", tool_name="del", input='{"path":"notes/draft.txt"}')
    request = hp.ToolApprovalRequestPart(approval_id="approval-call_2", tool_call_id="call_2")
    assert translate_all(t, call, request)[-1] == {
        "type": "tool-approval-request",
        "approvalId": "approval-call_2",
        "toolCallId": "call_2",
        "signature": "teb6WHqttRiaa8nPLCnkHCfaZrhmfiFA99j7It6GDbs",  # the §11 test vector
    }


def test_approval_request_for_an_unknown_call() -> None:
    t = StreamTranslator(signer=lambda *args: None)
    with pytest.raises(ProtocolError) as caught:
        t.translate(hp.ToolApprovalRequestPart(approval_id="apr_9", tool_call_id="call_9"))
    assert str(caught.value) == "Harness emitted approval request 'apr_9' for unknown tool call 'call_9'."


def test_tool_call_validation() -> None:
    errors: list[Any] = []

    def on_error(error: Any) -> str:
        errors.append(error)
        return f"failed: {error}"

    t = StreamTranslator(tool_names=["weather"], on_error=on_error)
    t.state.step_open = True
    assert translate_all(
        t,
        hp.ToolCallPart(tool_call_id="c1", tool_name="weather", input='{"city":"Paris"}', provider_metadata={"p": {}}),
        hp.ToolCallPart(tool_call_id="c2", tool_name="weather", input="  "),
        hp.ToolCallPart(tool_call_id="c3", tool_name="weather", input='{"city":'),
        hp.ToolCallPart(tool_call_id="c4", tool_name="mcp", input="[1]", provider_executed=True),
        hp.ToolCallPart(tool_call_id="c5", tool_name="mcp", input="", provider_executed=True, dynamic=True),
        hp.ToolCallPart(tool_call_id="c6", tool_name="bash", input="NaN", provider_executed=True, dynamic=True),
    ) == [
        {"type": "tool-input-available", "toolCallId": "c1", "toolName": "weather", "input": {"city": "Paris"},
         "providerMetadata": {"p": {}}},
        {"type": "tool-input-available", "toolCallId": "c2", "toolName": "weather", "input": {}},
        {"type": "tool-input-error", "toolCallId": "c3", "toolName": "weather", "input": '{"city":', "dynamic": True,
         "errorText": f"failed: {errors[0]}"},
        {"type": "tool-input-error", "toolCallId": "c4", "toolName": "mcp", "input": [1], "providerExecuted": True,
         "dynamic": True, "errorText": f"failed: {errors[1]}"},
        {"type": "tool-input-available", "toolCallId": "c5", "toolName": "mcp", "input": {}, "providerExecuted": True,
         "dynamic": True},
        {"type": "tool-input-error", "toolCallId": "c6", "toolName": "bash", "input": "NaN", "providerExecuted": True,
         "dynamic": True, "errorText": f"failed: {errors[2]}"},
    ]  # fmt: skip
    assert all(isinstance(error, ToolError) for error in errors)
    assert "unavailable tool 'mcp'" in str(errors[1])
    assert t.state.tool_calls["c3"].input == '{"city":'
    assert t.state.tool_calls["c3"].dynamic is True


def test_tool_results() -> None:
    t = StreamTranslator()  # every name is a host tool
    t.state.step_open = True
    translate_all(
        t,
        hp.ToolCallPart(tool_call_id="host", tool_name="weather", input="{}"),
        hp.ToolCallPart(tool_call_id="builtin", tool_name="bash", input="{}", provider_executed=True),
    )
    assert translate_all(
        t,
        # A host tool's failure echoed by the runtime stays an ordinary output.
        hp.ToolResultPart(tool_call_id="host", tool_name="weather", result={"error": "boom"}, is_error=True),
        hp.ToolResultPart(tool_call_id="builtin", tool_name="bash", result=["x"], is_error=True, dynamic=False),
        hp.ToolResultPart(tool_call_id="builtin", tool_name="bash", result=None, preliminary=True, dynamic=True,
                          provider_metadata={"p": {"k": 1}}),
    ) == [
        {"type": "tool-output-available", "toolCallId": "host", "output": {"error": "boom"}},
        {"type": "tool-output-error", "toolCallId": "builtin", "errorText": '["x"]', "providerExecuted": True,
         "dynamic": False},
        {"type": "tool-output-available", "toolCallId": "builtin", "output": None, "providerMetadata": {"p": {"k": 1}},
         "dynamic": True, "preliminary": True},
    ]  # fmt: skip


def test_reasoning_error_and_file_change_metadata() -> None:
    t = StreamTranslator(send_reasoning=False, on_error=lambda e: f"E: {e['message']}", id_factory=ids("x1"))
    assert translate_all(t, hp.ReasoningStartPart(id="r"), hp.ReasoningDeltaPart(id="r", delta="d")) == []
    assert t.state.step_open is False
    assert translate_all(t, hp.ErrorPart(error={"message": "runtime exited"})) == [
        {"type": "error", "errorText": "E: runtime exited"}
    ]
    change = hp.FileChangePart(event="create", path="a.txt", harness_metadata={"codex": {"turn": 1}})
    assert translate_all(t, change) == [
        {"type": "start-step"},
        {"type": "tool-input-available", "toolCallId": "harness-file-change-x1", "toolName": "fileChange",
         "input": {"event": "create", "path": "a.txt"}, "providerExecuted": True,
         "providerMetadata": {"codex": {"turn": 1}}, "dynamic": True},
        {"type": "tool-output-available", "toolCallId": "harness-file-change-x1",
         "output": {"event": "create", "path": "a.txt"}, "providerExecuted": True,
         "providerMetadata": {"codex": {"turn": 1}}, "dynamic": True},
    ]  # fmt: skip


def test_ui_chunks_pass_through_and_open_steps_like_content() -> None:
    t = StreamTranslator()
    approval = uc.ToolApprovalResponseChunk(approval_id="a", approved=True)
    output = uc.ToolOutputAvailableChunk(tool_call_id="c", output=1)
    transient = uc.DataChunk(type="data-status", data="working", transient=True)
    assert translate_all(t, uc.StartChunk(message_id="m"), transient, uc.MessageMetadataChunk(message_metadata=None))[
        0
    ] == {"type": "start", "messageId": "m"}
    assert t.state.started and not t.state.step_open
    assert translate_all(t, approval, output, uc.FinishStepChunk()) == [
        {"type": "start-step"},
        {"type": "tool-approval-response", "approvalId": "a", "approved": True},
        {"type": "tool-output-available", "toolCallId": "c", "output": 1},
        {"type": "finish-step"},
    ]
    assert not t.state.step_open
    assert translate_all(t, uc.DataChunk(type="data-x", data=None)) == [
        {"type": "start-step"}, {"type": "data-x", "data": None}
    ]  # fmt: skip
    assert translate_all(t, uc.TextStartChunk(id="t")) == [{"type": "text-start", "id": "t"}]
    assert t.state.open_text == ["t"]
    assert translate_all(t, uc.ResetStepChunk()) == [{"type": "reset-step"}]
    assert t.state.open_text == []
    assert t.start() == []
