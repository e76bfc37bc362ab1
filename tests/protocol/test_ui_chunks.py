"""UI message chunks: every example and schema verdict of ui-message-stream.md §4.

The verdicts were also checked against the transport's real schema (``ai`` 7.0.112
``uiMessageChunkSchema``) while writing the parser.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from durable_harness.errors import ProtocolError, UnknownPartTypeError
from durable_harness.protocol.ui_chunks import (
    CHUNK_CLASSES,
    DataChunk,
    FinishChunk,
    StartChunk,
    TextDeltaChunk,
    ToolApprovalRequestChunk,
    ToolOutputAvailableChunk,
    encode_ui_chunk,
    parse_ui_chunk,
)
from pydantic import ValidationError

# §4 "JSON example of each chunk", verbatim.
EXAMPLES = r"""
{"type":"start","messageId":"msg_1","messageMetadata":{"createdAt":1}}
{"type":"start-step"}
{"type":"reset-step"}
{"type":"text-start","id":"t1"}
{"type":"text-delta","id":"t1","delta":"Hello"}
{"type":"text-end","id":"t1"}
{"type":"reasoning-start","id":"r1"}
{"type":"reasoning-delta","id":"r1","delta":"Thinking..."}
{"type":"reasoning-end","id":"r1","providerMetadata":{"anthropic":{"signature":"sig"}}}
{"type":"tool-input-start","toolCallId":"call_1","toolName":"weather"}
{"type":"tool-input-delta","toolCallId":"call_1","inputTextDelta":"{\"city\":"}
{"type":"tool-input-available","toolCallId":"call_1","toolName":"weather","input":{"city":"Paris"}}
{"type":"tool-input-error","toolCallId":"call_9","toolName":"weather","input":"{bad","errorText":"Invalid input"}
{"type":"tool-approval-request","approvalId":"approval-call_2","toolCallId":"call_2","signature":"teb6WHqttRiaa8nPLCnkHCfaZrhmfiFA99j7It6GDbs"}
{"type":"tool-approval-response","approvalId":"approval-call_2","approved":false,"reason":"no"}
{"type":"tool-output-available","toolCallId":"call_1","output":{"city":"Paris","tempC":21}}
{"type":"tool-output-error","toolCallId":"call_3","errorText":"Error: tool failed"}
{"type":"tool-output-denied","toolCallId":"call_2"}
{"type":"source-url","sourceId":"s1","url":"https://example.com","title":"Ex"}
{"type":"source-document","sourceId":"s2","mediaType":"application/pdf","title":"Doc","filename":"a.pdf"}
{"type":"file","url":"data:image/png;base64,iVBORw0KGgo=","mediaType":"image/png"}
{"type":"reasoning-file","url":"data:text/plain;base64,aGk=","mediaType":"text/plain"}
{"type":"custom","kind":"openai.compaction"}
{"type":"data-weather","id":"w1","data":{"status":"done","tempC":21}}
{"type":"data-notice","data":"transient!","transient":true}
{"type":"message-metadata","messageMetadata":{"foo":1}}
{"type":"error","errorText":"An error occurred."}
{"type":"abort","reason":"AbortError: This operation was aborted"}
{"type":"finish-step"}
{"type":"finish","finishReason":"stop","messageMetadata":{"totalTokens":8}}
""".strip().splitlines()

# §4 "Schema verdicts": accepted, with what a round trip must give back.
ACCEPTED: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"type": "reset-step"}, {"type": "reset-step"}),
    ({"type": "finish-step", "foo": 1, "bar": [2]}, {"type": "finish-step"}),  # extra keys: accepted, dropped
    ({"type": "data-foo", "data": None}, {"type": "data-foo", "data": None}),
    ({"type": "tool-output-available", "toolCallId": "c", "output": None},
     {"type": "tool-output-available", "toolCallId": "c", "output": None}),
    ({"type": "finish", "messageMetadata": None}, {"type": "finish", "messageMetadata": None}),
]  # fmt: skip

# §4 "Schema verdicts": rejected (the unknown types with UnknownPartTypeError).
REJECTED: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"type": "ping"}, UnknownPartTypeError, '"ping"'),
    ({"type": "tool-result"}, UnknownPartTypeError, '"tool-result"'),
    ({"type": "unknown-type"}, UnknownPartTypeError, '"unknown-type"'),
    ({"type": "data-foo"}, ProtocolError, '"data-foo": missing required field "data"'),
    ({"type": "data-foo", "data": 1, "id": 5}, ProtocolError, '"data-foo": invalid field "id"'),
    ({"type": "tool-output-available", "toolCallId": "c"}, ProtocolError, 'missing required field "output"'),
    ({"type": "tool-input-available", "toolCallId": "c", "toolName": "x"}, ProtocolError, '"input"'),
    ({"type": "start", "messageId": None}, ProtocolError, '"start": optional field "messageId" must be omitted'),
    ({"type": "finish", "finishReason": None}, ProtocolError, '"finishReason" must be omitted, not null'),
    ({"type": "finish", "finishReason": "bogus"}, ProtocolError, 'invalid field "finishReason"'),
    ({"type": "error"}, ProtocolError, '"error": missing required field "errorText"'),
    ({"type": "message-metadata"}, ProtocolError, 'missing required field "messageMetadata"'),
    ({"type": "source-document", "sourceId": "s", "mediaType": "a/b"}, ProtocolError, '"title"'),
    ({"type": "text-delta", "delta": "x"}, ProtocolError, '"text-delta": missing required field "id"'),
    # ai 7.0.112 only, i.e. by the transport:
    ({"type": "finish", "finishReason": "interrupted"}, ProtocolError, 'invalid field "finishReason"'),
    ({"type": "steering-message", "id": "s", "parts": []}, UnknownPartTypeError, '"steering-message"'),
]  # fmt: skip


@pytest.mark.parametrize("line", EXAMPLES)
def test_every_example_round_trips(line: str) -> None:
    original = json.loads(line)
    chunk = parse_ui_chunk(original)
    encoded = encode_ui_chunk(chunk)
    assert json.loads(encoded) == original
    assert next(iter(json.loads(encoded))) == "type"


def test_examples_cover_every_chunk_type() -> None:
    types = {json.loads(line)["type"] for line in EXAMPLES}
    assert set(CHUNK_CLASSES) <= types
    assert "steering-message" not in CHUNK_CLASSES


@pytest.mark.parametrize(("obj", "expected"), ACCEPTED)
def test_accepted_verdicts(obj: dict[str, Any], expected: dict[str, Any]) -> None:
    assert json.loads(encode_ui_chunk(parse_ui_chunk(obj))) == expected


@pytest.mark.parametrize(("obj", "error", "message"), REJECTED)
def test_rejected_verdicts(obj: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error) as caught:
        parse_ui_chunk(obj)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    "obj",
    [
        {"type": "tool-input-start", "toolCallId": "c", "toolName": "x", "dynamic": "true"},  # no coercion
        {"type": "tool-approval-response", "approvalId": "a", "approved": 1},
        {"type": "tool-approval-request", "approvalId": "a", "toolCallId": "c", "isAutomatic": None},
        {"type": "text-start", "id": "t", "providerMetadata": {"a": 1}},  # Record<string, Record<...>>
        {"type": "abort", "reason": None},
        {"id": "x"},
        {"type": None},
        ["not", "an", "object"],
    ],
)
def test_more_rejections(obj: Any) -> None:
    with pytest.raises(ProtocolError):
        parse_ui_chunk(obj)


@pytest.mark.parametrize(
    "obj",
    [
        # ``unknown`` optionals take null, and the 7.0.173-only fields pass the 7.0.112 schema unchecked.
        {"type": "start", "messageMetadata": None},
        {"type": "tool-approval-request", "approvalId": "a", "toolCallId": "c", "approvalDescriptor": None,
         "inputSchemaInput": None},
        {"type": "text-end", "id": "t", "citations": None},
        {"type": "tool-input-start", "toolCallId": "c", "toolName": "x", "inputEncoding": "text"},
        {"type": "custom", "kind": "nodot"},
        {"type": "message-metadata", "messageMetadata": None},
    ],
)  # fmt: skip
def test_null_where_the_client_allows_it(obj: dict[str, Any]) -> None:
    assert json.loads(encode_ui_chunk(parse_ui_chunk(obj))) == obj


def test_python_construction_omits_absent_optionals_and_keeps_required_nulls() -> None:
    assert encode_ui_chunk(StartChunk()) == '{"type":"start"}'
    assert encode_ui_chunk(StartChunk(message_metadata=None)) == '{"type":"start","messageMetadata":null}'
    assert encode_ui_chunk(FinishChunk(finish_reason="stop")) == '{"type":"finish","finishReason":"stop"}'
    output = ToolOutputAvailableChunk(tool_call_id="c", output=None, provider_executed=None)
    assert encode_ui_chunk(output) == '{"type":"tool-output-available","toolCallId":"c","output":null}'
    request = ToolApprovalRequestChunk(approval_id="a", tool_call_id="c", signature=None)
    assert encode_ui_chunk(request) == '{"type":"tool-approval-request","approvalId":"a","toolCallId":"c"}'


def test_encoding_is_json_stringify_compatible() -> None:
    chunk = TextDeltaChunk(id="t", delta='ü "q"\n\u2028')
    assert encode_ui_chunk(chunk) == '{"type":"text-delta","id":"t","delta":"ü \\"q\\"\\n\u2028"}'


def test_data_chunk_type_must_start_with_data() -> None:
    with pytest.raises(ValidationError):
        DataChunk(type="weather", data=1)
    assert isinstance(parse_ui_chunk({"type": "data-x", "data": [1]}), DataChunk)
