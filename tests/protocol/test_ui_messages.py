"""UI messages (ui-message-stream.md §7) and convertToModelMessages (§8).

Expected conversions not spelled out in the reference were produced by the real
``convertToModelMessages`` of ``ai`` 7.0.173 for the same input.
"""

# ruff: noqa: E501 - reference examples and expected client JSON are kept one object per line, verbatim

from __future__ import annotations

import json
from typing import Any

import pytest
from durable_harness.errors import ProtocolError, UnknownPartTypeError
from durable_harness.messages import TextPart
from durable_harness.protocol.ui_messages import (
    DataUIPart,
    DynamicToolUIPart,
    ToolUIPart,
    convert_to_model_messages,
    parse_ui_messages,
)

# §7.1 "Second POST body, deny case", verbatim.
DENY_BODY = r"""
{"messages":[
 {"parts":[{"type":"text","text":"please delete notes/draft.txt"}],"id":"jjJEZQmWRzwjZCwe","role":"user"},
 {"id":"msg_11","metadata":{"createdAt":1795984524247},"role":"assistant","parts":[
   {"type":"step-start"},
   {"type":"tool-deleteFile","toolCallId":"call_11","state":"approval-responded","input":{"path":"notes/draft.txt"},
    "approval":{"id":"approval-call_11","signature":"FMwvgq3MwPAapUVCdi-3nA9CdVCODM0NdojMONvQr5s","approved":false,"reason":"no way"}}]}]}
"""
USER = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "please delete notes/draft.txt"}]}
SIG = "U2fOlljdXD-YhaTPK-P_cqLn9uzhW2ACrfSNjMHgIEE"  # §11: approval-abc / call_2 / del


def convert(messages: list[dict[str, Any]], **options: Any) -> list[dict[str, Any]]:
    return [m.to_dict() for m in convert_to_model_messages(parse_ui_messages(messages), **options)]


def assistant(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"id": "a1", "role": "assistant", "parts": [{"type": "step-start"}, *parts]}


def test_deny_body_parses_and_round_trips() -> None:
    body = json.loads(DENY_BODY)
    messages = parse_ui_messages(body)
    assert [m.to_dict() for m in messages] == body["messages"]
    part = messages[1].parts[1]
    assert isinstance(part, ToolUIPart)
    assert (part.tool_name, part.state, part.approval and part.approval.approved) == (
        "deleteFile", "approval-responded", False
    )  # fmt: skip


def test_deny_body_converts() -> None:
    assert [m.to_dict() for m in convert_to_model_messages(parse_ui_messages(json.loads(DENY_BODY)))] == [
        {"role": "user", "content": [{"type": "text", "text": "please delete notes/draft.txt"}]},
        {"role": "assistant", "content": [
            {"type": "tool-call", "toolCallId": "call_11", "toolName": "deleteFile", "input": {"path": "notes/draft.txt"}},
            {"type": "tool-approval-request", "approvalId": "approval-call_11", "toolCallId": "call_11",
             "signature": "FMwvgq3MwPAapUVCdi-3nA9CdVCODM0NdojMONvQr5s"}]},
        {"role": "tool", "content": [
            {"type": "tool-approval-response", "approvalId": "approval-call_11", "approved": False, "reason": "no way"},
            {"type": "tool-result", "toolCallId": "call_11", "toolName": "deleteFile",
             "output": {"type": "execution-denied", "reason": "no way"}}]},
    ]  # fmt: skip


# §8 "Converted output for the approval flows".
def test_approval_flow_denied() -> None:
    part = {"type": "tool-del", "toolCallId": "call_2", "state": "approval-responded",
            "input": {"path": "notes/draft.txt"},
            "approval": {"id": "approval-abc", "signature": SIG, "approved": False, "reason": "user said no"}}  # fmt: skip
    assert convert([USER, assistant(part)])[1:] == [
        {"role": "assistant", "content": [
            {"type": "tool-call", "toolCallId": "call_2", "toolName": "del", "input": {"path": "notes/draft.txt"}},
            {"type": "tool-approval-request", "approvalId": "approval-abc", "toolCallId": "call_2", "signature": SIG}]},
        {"role": "tool", "content": [
            {"type": "tool-approval-response", "approvalId": "approval-abc", "approved": False, "reason": "user said no"},
            {"type": "tool-result", "toolCallId": "call_2", "toolName": "del",
             "output": {"type": "execution-denied", "reason": "user said no"}}]},
    ]  # fmt: skip


def test_approval_flow_approved() -> None:
    part = {"type": "tool-del", "toolCallId": "call_2", "state": "approval-responded",
            "input": {"path": "notes/draft.txt"}, "approval": {"id": "approval-abc", "approved": True}}  # fmt: skip
    assert convert([USER, assistant(part)])[-1] == {
        "role": "tool", "content": [{"type": "tool-approval-response", "approvalId": "approval-abc", "approved": True}]
    }  # fmt: skip


def test_approval_flow_after_completion() -> None:
    part = {"type": "tool-deleteFile", "toolCallId": "call_10", "state": "output-available",
            "input": {"path": "notes/draft.txt"}, "output": {"deleted": "notes/draft.txt"},
            "approval": {"id": "approval-call_10", "approved": True}}  # fmt: skip
    assert convert([USER, assistant(part)])[-1] == {"role": "tool", "content": [
        {"type": "tool-approval-response", "approvalId": "approval-call_10", "approved": True},
        {"type": "tool-result", "toolCallId": "call_10", "toolName": "deleteFile",
         "output": {"type": "json", "value": {"deleted": "notes/draft.txt"}}},
    ]}  # fmt: skip


def test_approval_flow_after_a_denial_completed() -> None:
    part = {"type": "tool-deleteFile", "toolCallId": "call_11", "state": "output-denied",
            "input": {"path": "notes/draft.txt"},
            "approval": {"id": "approval-call_11", "approved": False, "reason": "no way"}}  # fmt: skip
    assert convert([USER, assistant(part)])[-1] == {"role": "tool", "content": [
        {"type": "tool-approval-response", "approvalId": "approval-call_11", "approved": False, "reason": "no way"},
        {"type": "tool-result", "toolCallId": "call_11", "toolName": "deleteFile",
         "output": {"type": "error-text", "value": "no way"}},
    ]}  # fmt: skip
    del part["approval"]["reason"]  # type: ignore[attr-defined]
    assert convert([USER, assistant(part)])[-1]["content"][1]["output"] == {
        "type": "error-text", "value": "Tool call execution denied."
    }  # fmt: skip


def test_every_part_type_steps_and_tool_outputs() -> None:
    messages = [
        {"id": "s", "role": "system", "parts": [
            {"type": "text", "text": "Be ", "providerMetadata": {"a": {"x": 1}}},
            {"type": "text", "text": "nice", "providerMetadata": {"b": {"y": 2}}}]},
        {"id": "u", "role": "user", "parts": [
            {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64,AAA=", "filename": "a.png"},
            {"type": "file", "mediaType": "text/plain", "url": "HTTPS://Example.COM:443",
             "providerMetadata": {"p": {"q": 1}}},
            {"type": "file", "mediaType": "text/plain", "url": "https://ex.com/a", "providerReference": {"openai": "f"}},
            {"type": "text", "text": "hi"}, {"type": "data-x", "data": 1}]},
        {"id": "a", "role": "assistant", "parts": [
            {"type": "step-start"},
            {"type": "reasoning", "text": "think", "providerMetadata": {"anthropic": {"signature": "s"}}},
            {"type": "text", "text": "a"}, {"type": "source-url", "sourceId": "s", "url": "https://e.com"},
            {"type": "tool-w", "toolCallId": "c1", "state": "output-available", "input": {"c": 1}, "output": "sunny",
             "callProviderMetadata": {"p": {"c": 1}}, "resultProviderMetadata": {"p": {"r": 1}}},
            {"type": "step-start"},
            {"type": "text", "text": "b"}, {"type": "file", "mediaType": "image/png", "url": "https://x.org"},
            {"type": "reasoning-file", "mediaType": "text/plain", "url": "data:text/plain;base64,aGk="},
            {"type": "custom", "kind": "openai.compaction"}, {"type": "data-y", "data": 2},
            {"type": "dynamic-tool", "toolName": "bash", "toolCallId": "c2", "state": "output-available",
             "input": {"command": "ls"}, "output": {"o": 1}, "providerExecuted": True},
            {"type": "dynamic-tool", "toolName": "bash", "toolCallId": "c3", "state": "output-error",
             "input": {"command": "x"}, "errorText": "boom", "providerExecuted": True,
             "resultProviderMetadata": {"p": {"e": 1}}},
            {"type": "tool-w", "toolCallId": "c4", "state": "output-error", "rawInput": "{bad", "errorText": "Invalid",
             "resultProviderMetadata": {"p": {"e": 2}}},
            {"type": "tool-w", "toolCallId": "c5", "state": "input-streaming", "input": {"a": 1}},
            {"type": "tool-w", "toolCallId": "c6", "state": "input-available", "input": None},
            {"type": "dynamic-tool", "toolName": "gone", "toolCallId": "c7", "state": "output-available",
             "input": {}, "output": {"secret": 1}, "dynamic": False},
            {"type": "step-start"}, {"type": "source-document", "sourceId": "d", "mediaType": "a/b", "title": "T"},
            {"type": "step-start"}, {"type": "data-z", "data": 3}]},
    ]  # fmt: skip
    assert convert(messages) == [
        {"role": "system", "content": "Be nice", "providerOptions": {"a": {"x": 1}, "b": {"y": 2}}},
        {"role": "user", "content": [
            {"type": "file", "mediaType": "image/png", "filename": "a.png",
             "data": {"type": "url", "url": "data:image/png;base64,AAA="}},
            {"type": "file", "mediaType": "text/plain", "data": {"type": "url", "url": "https://example.com/"},
             "providerOptions": {"p": {"q": 1}}},
            {"type": "file", "mediaType": "text/plain", "data": {"type": "reference", "reference": {"openai": "f"}}},
            {"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [
            {"type": "reasoning", "text": "think", "providerOptions": {"anthropic": {"signature": "s"}}},
            {"type": "text", "text": "a"},
            {"type": "tool-call", "toolCallId": "c1", "toolName": "w", "input": {"c": 1},
             "providerOptions": {"p": {"c": 1}}}]},
        {"role": "tool", "content": [
            {"type": "tool-result", "toolCallId": "c1", "toolName": "w", "output": {"type": "text", "value": "sunny"},
             "providerOptions": {"p": {"c": 1}}}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "b"},
            {"type": "file", "mediaType": "image/png", "data": {"type": "url", "url": "https://x.org/"}},
            {"type": "reasoning-file", "data": {"type": "url", "url": "data:text/plain;base64,aGk="},
             "mediaType": "text/plain"},
            {"type": "custom", "kind": "openai.compaction"},
            {"type": "tool-call", "toolCallId": "c2", "toolName": "bash", "input": {"command": "ls"},
             "providerExecuted": True},
            {"type": "tool-result", "toolCallId": "c2", "toolName": "bash", "output": {"type": "json", "value": {"o": 1}}},
            {"type": "tool-call", "toolCallId": "c3", "toolName": "bash", "input": {"command": "x"},
             "providerExecuted": True, "providerOptions": {"p": {"e": 1}}},
            {"type": "tool-result", "toolCallId": "c3", "toolName": "bash", "output": {"type": "error-json", "value": "boom"},
             "providerOptions": {"p": {"e": 1}}},
            {"type": "tool-call", "toolCallId": "c4", "toolName": "w", "input": "{bad", "providerOptions": {"p": {"e": 2}}},
            {"type": "tool-call", "toolCallId": "c6", "toolName": "w", "input": None},
            {"type": "tool-call", "toolCallId": "c7", "toolName": "gone", "input": {}}]},
        {"role": "tool", "content": [
            {"type": "tool-result", "toolCallId": "c4", "toolName": "w", "output": {"type": "error-text", "value": "Invalid"}},
            {"type": "tool-result", "toolCallId": "c7", "toolName": "gone",
             "output": {"type": "text", "value": "Tool output omitted because the tool is no longer available."}}]},
    ]  # fmt: skip


def test_convert_data_part_hook() -> None:
    def keep(part: DataUIPart) -> TextPart | None:
        return TextPart(text=json.dumps(part.data)) if part.type == "data-note" else None

    messages = [{"id": "u", "role": "user", "parts": [{"type": "data-note", "data": {"n": 1}}, {"type": "data-x", "data": 2}]},
                assistant({"type": "data-note", "data": "a"})]  # fmt: skip
    assert convert(messages, convert_data_part=keep) == [
        {"role": "user", "content": [{"type": "text", "text": '{"n": 1}'}]},
        {"role": "assistant", "content": [{"type": "text", "text": '"a"'}]},
    ]


OLDER = assistant(
    {"type": "text", "text": "x"},
    {"type": "tool-del", "toolCallId": "call_2", "state": "approval-requested", "input": {"path": "p"},
     "approval": {"id": "ap"}},
    {"type": "tool-w", "toolCallId": "c8", "state": "input-available", "input": {}},
    {"type": "tool-w", "toolCallId": "c9", "state": "output-available", "input": {}, "output": 1, "preliminary": True},
)  # fmt: skip
LATER = {"id": "u2", "role": "user", "parts": [{"type": "text", "text": "never mind"}]}


def test_prefilter_drops_unanswered_approvals_before_the_last_user_message() -> None:
    assert convert([USER, OLDER, LATER])[1:3] == [
        {"role": "assistant", "content": [
            {"type": "text", "text": "x"},
            {"type": "tool-call", "toolCallId": "c8", "toolName": "w", "input": {}},
            {"type": "tool-call", "toolCallId": "c9", "toolName": "w", "input": {}}]},
        {"role": "tool", "content": [
            {"type": "tool-result", "toolCallId": "c9", "toolName": "w", "output": {"type": "json", "value": 1}}]},
    ]  # fmt: skip
    # The last message's request is still pending: it stays.
    assert convert([USER, OLDER])[1]["content"][2] == {
        "type": "tool-approval-request", "approvalId": "ap", "toolCallId": "call_2"
    }  # fmt: skip


def test_ignore_incomplete_tool_calls() -> None:
    expected = [{"role": "assistant", "content": [{"type": "text", "text": "x"}]}]
    assert convert([USER, OLDER], ignore_incomplete_tool_calls=True)[1:] == expected
    assert convert([USER, OLDER, LATER], ignore_incomplete_tool_calls=True)[1:2] == expected


def test_provider_executed_denial_and_empty_blocks() -> None:
    part = {"type": "dynamic-tool", "toolName": "mcp", "toolCallId": "c", "state": "approval-responded",
            "input": {"a": 1}, "providerExecuted": True, "callProviderMetadata": {"o": {"i": "x"}},
            "approval": {"id": "ap", "approved": False, "reason": "no"}}  # fmt: skip
    assert convert([USER, assistant(part)])[1:] == [
        {"role": "assistant", "content": [
            {"type": "tool-call", "toolCallId": "c", "toolName": "mcp", "input": {"a": 1}, "providerExecuted": True,
             "providerOptions": {"o": {"i": "x"}}},
            {"type": "tool-approval-request", "approvalId": "ap", "toolCallId": "c"}]},
        {"role": "tool", "content": [
            {"type": "tool-approval-response", "approvalId": "ap", "approved": False, "reason": "no",
             "providerExecuted": True},
            {"type": "tool-result", "toolCallId": "c", "toolName": "mcp",
             "output": {"type": "execution-denied", "reason": "no"}, "providerOptions": {"o": {"i": "x"}}}]},
    ]  # fmt: skip
    # An assistant message with nothing to say (the WorkflowAgent's extra empty step) yields nothing.
    assert convert([USER, assistant(), {"id": "a2", "role": "assistant", "parts": []}]) == convert([USER])


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"messages": [USER, assistant({"type": "foo"})]}, 'messages[1].parts[1]: unknown part type "foo"'),
        ([], "messages: expected a non-empty array"),
        ({"messages": "x"}, "messages: expected a non-empty array"),
        ([{"id": "u", "role": "user", "parts": []}], "messages[0].parts: a user message must contain at least one part"),
        ([{"id": "u", "role": "bot", "parts": [{"type": "text", "text": "x"}]}], 'messages[0]: invalid field "role"'),
        ([{"id": "u", "role": "user"}], 'messages[0]: missing required field "parts"'),
        ([{"role": "user", "parts": [{"type": "text", "text": "x"}]}], 'messages[0]: missing required field "id"'),
        ([USER, assistant({"type": "text", "text": "x", "state": None})],
         'messages[1].parts[1]: optional field "state" must be omitted, not null'),
        ([USER, assistant({"type": "text"})], 'messages[1].parts[1]: missing required field "text"'),
        ([USER, assistant({"type": "tool-x", "toolCallId": "c", "state": "input-available"})],
         'messages[1].parts[1]: missing required field "input" in state "input-available"'),
        ([USER, assistant({"type": "tool-x", "toolCallId": "c", "state": "output-available", "input": 1})],
         'missing required field "output" in state "output-available"'),
        ([USER, assistant({"type": "tool-x", "toolCallId": "c", "state": "input-available", "input": 1, "output": 2})],
         'field "output" must be absent in state "input-available"'),
        ([USER, assistant({"type": "tool-x", "toolCallId": "c", "state": "output-denied", "input": 1,
                           "approval": {"id": "a", "approved": True}})],
         'invalid field "approval.approved": must be false in state "output-denied"'),
        ([USER, assistant({"type": "dynamic-tool", "toolCallId": "c", "state": "input-streaming"})],
         'messages[1].parts[1]: missing required field "toolName"'),
        ([USER, assistant({"type": "tool-x", "toolCallId": "c", "state": "bogus"})], 'invalid field "state"'),
        ([USER, assistant({"type": "steering-message", "id": "s", "parts": []})], 'unknown part type "steering-message"'),
    ],
)  # fmt: skip
def test_parse_errors_name_the_json_path(data: Any, message: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        parse_ui_messages(data)
    assert message in str(caught.value)


def test_unknown_part_type_error_class_and_accepted_shapes() -> None:
    with pytest.raises(UnknownPartTypeError):
        parse_ui_messages([{"id": "u", "role": "user", "parts": [{"type": "nope"}]}])
    messages = parse_ui_messages([
        USER,
        {"id": "a", "role": "assistant", "metadata": None, "parts": [], "extra": 1},  # an empty assistant is fine
        assistant(
            {"type": "reasoning", "text": "r", "id": "r1", "state": "done"},
            {"type": "data-x", "data": None},
            {"type": "dynamic-tool", "toolName": "t", "toolCallId": "c", "state": "output-error", "rawInput": "{",
             "errorText": "e"},
            {"type": "tool-x", "toolCallId": "d", "state": "approval-requested", "input": None,
             "approval": {"id": "a", "isAutomatic": True, "signature": "s", "requestReason": "q", "descriptor": None}},
        ),
    ])  # fmt: skip
    assert messages[1].to_dict() == {"id": "a", "role": "assistant", "metadata": None, "parts": []}
    dynamic = messages[2].parts[3]
    assert isinstance(dynamic, DynamicToolUIPart) and dynamic.raw_input == "{"
    assert messages[2].parts[4].to_dict()["approval"]["descriptor"] is None
