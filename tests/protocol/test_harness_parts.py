"""Harness stream parts: every example of harness-stream-parts.md §3, and every rejected one."""

# ruff: noqa: E501 - reference examples and expected client JSON are kept one object per line, verbatim

from __future__ import annotations

import json
from typing import Any

import pytest
from durable_harness.errors import ProtocolError, UnknownPartTypeError
from durable_harness.protocol import harness_parts as hp
from durable_harness.protocol.harness_parts import PART_CLASSES, decode_part, encode_part

# §3 "One JSON example per part", verbatim.
EXAMPLES = r"""
{"type":"stream-start","warnings":[{"type":"unsupported-setting","setting":"temperature","details":"ignored by the runtime"}],"modelId":"claude-sonnet-4-5"}
{"type":"text-start","id":"txt_0"}
{"type":"text-delta","id":"txt_0","delta":"Hello"}
{"type":"text-end","id":"txt_0","harnessMetadata":{"claude-code":{"messageId":"msg_01"}}}
{"type":"reasoning-start","id":"rsn_0"}
{"type":"reasoning-delta","id":"rsn_0","delta":"Check the file first."}
{"type":"reasoning-end","id":"rsn_0"}
{"type":"tool-input-start","id":"call_1","toolName":"bash","providerExecuted":true,"title":"List files"}
{"type":"tool-input-delta","id":"call_1","delta":"{\"command\":\"ls\"}"}
{"type":"tool-input-end","id":"call_1"}
{"type":"tool-call","toolCallId":"call_1","toolName":"bash","input":"{\"command\":\"ls\"}","providerExecuted":true,"nativeName":"Bash","stepToolCallCount":1}
{"type":"tool-approval-request","approvalId":"apr_1","toolCallId":"call_1"}
{"type":"tool-result","toolCallId":"call_1","toolName":"bash","result":{"stdout":"README.md\n","exitCode":0}}
{"type":"finish-step","finishReason":{"unified":"tool-calls","raw":"tool_use"},"usage":{"inputTokens":{"total":1200,"noCache":200,"cacheRead":1000,"cacheWrite":0},"outputTokens":{"total":85,"text":60,"reasoning":25}}}
{"type":"finish","finishReason":{"unified":"stop","raw":"end_turn"},"totalUsage":{"inputTokens":{"total":1200,"noCache":200,"cacheRead":1000,"cacheWrite":0},"outputTokens":{"total":85,"text":60,"reasoning":25},"raw":{"input_tokens":1200}},"harnessMetadata":{"claude-code":{"sessionId":"s_1"}}}
{"type":"file-change","event":"modify","path":"src/app.py"}
{"type":"compaction","trigger":"auto","summary":"The user is refactoring app.py; tests pass.","tokensBefore":180000,"tokensAfter":12000}
{"type":"error","error":{"message":"runtime exited with code 1"}}
{"type":"raw","rawValue":{"type":"system","subtype":"init"}}
""".strip().splitlines()

# §3 "More valid variants".
VARIANTS = r"""
{"type":"stream-start"}
{"type":"tool-result","toolCallId":"call_2","toolName":"bash","result":"command not found: foo","isError":true}
{"type":"tool-result","toolCallId":"call_3","toolName":"noop","result":null}
{"type":"finish-step","finishReason":{"unified":"stop"},"usage":{"inputTokens":{},"outputTokens":{}}}
{"type":"error","error":null}
""".strip().splitlines()

# §3 "Rejected examples" (comments removed), with a piece of the expected message.
REJECTED = [
    ('{"type":"text-start","id":"t","harnessMetadata":null}', '"text-start": optional field "harnessMetadata"'),
    ('{"type":"tool-result","toolCallId":"c","toolName":"x"}', '"tool-result": missing required field "result"'),
    ('{"type":"tool-call","toolCallId":"c","toolName":"x","input":{"a":1}}', 'invalid field "input"'),
    ('{"type":"tool-call","toolCallId":"c","toolName":"x","input":"{}","stepToolCallCount":0}', "stepToolCallCount"),
    ('{"type":"finish","finishReason":"stop","totalUsage":{"inputTokens":{},"outputTokens":{}}}', "finishReason"),
    ('{"type":"finish","finishReason":{"unified":"interrupted"},"totalUsage":{"inputTokens":{},"outputTokens":{}}}',
     "finishReason.unified"),
    ('{"type":"finish-step","finishReason":{"unified":"stop"},"usage":{"inputTokens":{}}}', "usage.outputTokens"),
    ('{"type":"tool-input-start","toolCallId":"c","toolName":"x"}', '"tool-input-start": missing required field "id"'),
    ('{"type":"tool-input-delta","id":"c","inputTextDelta":"x"}', 'missing required field "delta"'),
    ('{"type":"file-change","event":"rename","path":"a"}', 'invalid field "event"'),
    ('{"type":"compaction","trigger":"scheduled","summary":"x"}', 'invalid field "trigger"'),
    ('{"type":"error"}', '"error": missing required field "error"'),
]  # fmt: skip


@pytest.mark.parametrize("line", EXAMPLES + VARIANTS)
def test_examples_round_trip_with_type_first(line: str) -> None:
    part = decode_part(line)
    encoded = encode_part(part)
    assert json.loads(encoded) == json.loads(line)
    assert encoded.startswith('{"type":')


def test_examples_cover_all_19_types() -> None:
    assert len(PART_CLASSES) == 19
    assert {json.loads(line)["type"] for line in EXAMPLES} == set(PART_CLASSES)


@pytest.mark.parametrize(("line", "message"), REJECTED)
def test_rejected_examples(line: str, message: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        decode_part(line)
    assert not isinstance(caught.value, UnknownPartTypeError)
    assert message in str(caught.value)


def test_unknown_type() -> None:
    with pytest.raises(UnknownPartTypeError, match='"ping"'):
        decode_part('{"type":"ping"}')


@pytest.mark.parametrize(
    "obj",
    [
        {"type": "finish-step", "finishReason": {"unified": "stop"},
         "usage": {"inputTokens": {"total": None}, "outputTokens": {}}},  # null inside usage
        {"type": "finish-step", "finishReason": {"unified": "stop"},
         "usage": {"inputTokens": {"total": True}, "outputTokens": {}}},  # a bool is not a number
        {"type": "tool-result", "toolCallId": "c", "toolName": "x", "result": 1, "isError": None},
        {"type": "tool-call", "toolCallId": "c", "toolName": "x", "input": "{}", "stepToolCallCount": 1.5},
        {"type": "stream-start", "warnings": [{"type": "other"}]},
        {"type": "stream-start", "warnings": [{"type": "nope", "message": "m"}]},
        {"type": "raw"},
        {"type": 3},
    ],
)  # fmt: skip
def test_more_rejections(obj: dict[str, Any]) -> None:
    with pytest.raises(ProtocolError):
        decode_part(obj)


def test_decode_accepts_text_bytes_and_objects_only() -> None:
    assert isinstance(decode_part(b'{"type":"raw","rawValue":null}'), hp.RawPart)
    with pytest.raises(ProtocolError, match="not valid JSON"):
        decode_part("{nope")
    with pytest.raises(ProtocolError, match="JSON object"):
        decode_part("[1]")


def test_unknown_keys_are_stripped() -> None:
    part = decode_part('{"type":"tool-approval-request","approvalId":"a","toolCallId":"c","signature":"s"}')
    assert encode_part(part) == '{"type":"tool-approval-request","approvalId":"a","toolCallId":"c"}'


def test_numbers_keep_their_json_form() -> None:
    line = '{"type":"compaction","trigger":"manual","summary":"s","tokensBefore":1.5,"tokensAfter":12000}'
    assert encode_part(decode_part(line)) == line


def test_python_construction_encodes_type_first_and_required_nulls() -> None:
    part = hp.ToolResultPart(tool_call_id="c", tool_name="noop", result=None)
    assert encode_part(part) == '{"type":"tool-result","toolCallId":"c","toolName":"noop","result":null}'
    usage = hp.Usage(input_tokens=hp.InputTokens(total=3), output_tokens=hp.OutputTokens())
    finish = hp.FinishPart(finish_reason=hp.FinishReason(unified="stop"), total_usage=usage)
    assert encode_part(finish) == (
        '{"type":"finish","finishReason":{"unified":"stop"},"totalUsage":{"inputTokens":{"total":3},"outputTokens":{}}}'
    )
    assert encode_part(hp.ErrorPart(error=None)) == '{"type":"error","error":null}'
