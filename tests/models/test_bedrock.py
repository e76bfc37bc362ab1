"""The Bedrock ConverseStream provider against recorded event streams, through real botocore.

No AWS account or network is available here, so Bedrock is replaced by a recorded stream: a real
boto3 ``bedrock-runtime`` client (fake credentials) signs and serializes the real request, and a
``before-send`` event hook -- botocore's own extension point, the one its ``Stubber`` builds on --
answers with an :class:`~botocore.awsrequest.AWSResponse` whose body is the binary
``application/vnd.amazon.eventstream`` Bedrock sends: frames with the ``:event-type`` /
``:message-type`` / ``:exception-type`` headers, the JSON payloads (with Bedrock's ``p`` padding
field) and both CRC32 checksums. botocore ships an event-stream *decoder* but no encoder, so
``tests.lambda_fastpath.aws.frames`` writes the documented frame layout (checked against botocore's decoder below);
botocore then parses the stream exactly as it parses Bedrock's. Error responses carry the
``x-amzn-ErrorType`` header and JSON body of the real service. Nothing of our code is mocked.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.config import Config
from botocore.eventstream import EventStreamBuffer
from botocore.exceptions import EndpointConnectionError, ReadTimeoutError
from durable_harness.aws.clients import bedrock_model_client
from durable_harness.errors import ModelError
from durable_harness.messages import parse_messages
from durable_harness.models import bedrock
from durable_harness.models.base import ModelRequest, ToolDefinition
from durable_harness.models.bedrock import BedrockConverseModel
from durable_harness.protocol import harness_parts as hp
from durable_harness.protocol.harness_parts import encode_part

from tests.lambda_fastpath.aws.frames import event, exception

MODEL_ID = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
SIGNATURE = "ErcBCkgIAhABGAIiQMrjEqI3ryb4Hqq5aYvB2EcLhmdD9XvnH1FJ5fX0cL8lRuqaGmoAa5hcLQzBeLyZMB6f"
REDACTED = b"\x0e\x8e\x02\x0a\x02\x18\x01opaque-redacted-reasoning"


# --- the event-stream wire format ----------------------------------------------------------------


def test_frames_decode_with_botocores_own_parser() -> None:
    buffer = EventStreamBuffer()
    buffer.add_data(event("messageStart", {"p": "abc", "role": "assistant"}) + exception("throttlingException", {}))
    first, second = list(buffer)
    assert first.headers[":event-type"] == "messageStart" and json.loads(first.payload)["role"] == "assistant"
    assert second.headers[":exception-type"] == "throttlingException"


# --- recorded streams -----------------------------------------------------------------------------

START = event("messageStart", {"p": "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0", "role": "assistant"})

TEXT_STREAM = b"".join(
    [
        START,
        event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Hello"}, "p": "abcdefghijklmn"}),
        event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": " from Bedrock."}, "p": "abcdefghij"}),
        event("contentBlockStop", {"contentBlockIndex": 0, "p": "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"}),
        event("messageStop", {"p": "abcdefghijklmnopqrstu", "stopReason": "end_turn"}),
        event(
            "metadata",
            {
                "metrics": {"latencyMs": 612},
                "p": "abcdefghijklmnopqrstuvwxy",
                "usage": {"inputTokens": 12, "outputTokens": 9, "totalTokens": 21},
            },
        ),
    ]
)

REASONING_STREAM = b"".join(
    [
        START,
        event(
            "contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "2 + 2"}}, "p": "ab"}
        ),
        event(
            "contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": " is 4."}}, "p": "a"}
        ),
        event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": SIGNATURE}}}),
        event("contentBlockStop", {"contentBlockIndex": 0, "p": "abcdefghijklmnopqrstuvwxyzABCDE"}),
        event(
            "contentBlockDelta",
            {
                "contentBlockIndex": 1,
                "delta": {"reasoningContent": {"redactedContent": base64.b64encode(REDACTED).decode()}},
                "p": "abcdefg",
            },
        ),
        event("contentBlockStop", {"contentBlockIndex": 1, "p": "abcdefghijklmnop"}),
        event("contentBlockDelta", {"contentBlockIndex": 2, "delta": {"text": "4"}, "p": "abcdefghijklmnopqrstuvw"}),
        event("contentBlockStop", {"contentBlockIndex": 2, "p": "abcdefghijklmnopqrstuvwxyzAB"}),
        event("messageStop", {"p": "abcdefghijklmnopqrstuvwxyzABCDEFGHI", "stopReason": "end_turn"}),
        event(
            "metadata",
            {
                "metrics": {"latencyMs": 2130},
                "p": "abc",
                "usage": {
                    "cacheReadInputTokens": 1500,
                    "cacheWriteInputTokens": 0,
                    "inputTokens": 40,
                    "outputTokens": 65,
                    "totalTokens": 1605,
                },
            },
        ),
    ]
)

TOOLS_STREAM = b"".join(
    [
        START,
        event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "I'll check both."}, "p": "abcd"}),
        event("contentBlockStop", {"contentBlockIndex": 0, "p": "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQR"}),
        event(
            "contentBlockStart",
            {
                "contentBlockIndex": 1,
                "p": "abcdefghijklmnopqrstuvw",
                "start": {"toolUse": {"name": "get_weather", "toolUseId": "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q"}},
            },
        ),
        event("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"toolUse": {"input": ""}}, "p": "abcdefghi"}),
        event("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"toolUse": {"input": '{"ci'}}, "p": "abcde"}),
        event("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"toolUse": {"input": 'ty": "Par'}}, "p": "a"}),
        event("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"toolUse": {"input": 'is"}'}}, "p": "abcdefgh"}),
        event("contentBlockStop", {"contentBlockIndex": 1, "p": "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKL"}),
        event(
            "contentBlockStart",
            {
                "contentBlockIndex": 2,
                "p": "abcdefghijklm",
                "start": {"toolUse": {"name": "get_time", "toolUseId": "tooluse_2mQ0bD1eTqe3xZyJ4fG8Hw"}},
            },
        ),
        event("contentBlockDelta", {"contentBlockIndex": 2, "delta": {"toolUse": {"input": '{"tz": "Eu'}}, "p": "ab"}),
        event("contentBlockDelta", {"contentBlockIndex": 2, "delta": {"toolUse": {"input": 'rope/Paris"}'}}, "p": "a"}),
        event("contentBlockStop", {"contentBlockIndex": 2, "p": "abcdefghijklmnopqrstuvwxyzABCDEFGH"}),
        event("messageStop", {"p": "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOP", "stopReason": "tool_use"}),
        event(
            "metadata",
            {
                "metrics": {"latencyMs": 1840},
                "p": "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ012345",
                "usage": {"inputTokens": 472, "outputTokens": 89, "totalTokens": 561},
            },
        ),
    ]
)

TEXT_THEN = b"".join(
    [
        START,
        event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Once upon"}, "p": "abcdefghijklmn"}),
    ]
)


# --- a real client with a recorded answer ---------------------------------------------------------


class RecordedBody:
    """The raw HTTP body botocore reads: the recorded bytes, in small pieces (like socket reads)."""

    def __init__(self, data: bytes, *, piece: int = 53, delay: float = 0.0, fail_after: int | None = None) -> None:
        self.data, self.piece, self.delay, self.fail_after = data, piece, delay, fail_after
        self.closed = False

    def stream(self, amt: int | None = None, decode_content: bool | None = None) -> Iterator[bytes]:
        for i in range(0, len(self.data), self.piece):
            if self.fail_after is not None and i >= self.fail_after:
                raise ReadTimeoutError(endpoint_url="https://bedrock-runtime.us-east-1.amazonaws.com")
            if self.delay:
                time.sleep(self.delay)
            yield self.data[i : i + self.piece]

    def close(self) -> None:
        self.closed = True


Answer = Callable[[AWSPreparedRequest], AWSResponse]


def streamed(data: bytes, **body_options: Any) -> Answer:
    def answer(request: AWSPreparedRequest) -> AWSResponse:
        headers = {
            "content-type": "application/vnd.amazon.eventstream",
            "x-amzn-requestid": "5d1c6ffe-0b2c-4f9e-9b8e-3a0e4c2d7a11",
        }
        return AWSResponse(request.url, 200, headers, RecordedBody(data, **body_options))

    return answer


def failed(status: int, error_type: str, message: str, headers: dict[str, str] | None = None) -> Answer:
    def answer(request: AWSPreparedRequest) -> AWSResponse:
        all_headers = {
            "content-type": "application/json",
            "x-amzn-requestid": "0a7f1c2e-1111-2222-3333-444455556666",
            "x-amzn-errortype": f"{error_type}:http://internal.amazon.com/coral/com.amazon.bedrock/",
            **(headers or {}),
        }
        body = json.dumps({"message": message}).encode()
        return AWSResponse(request.url, status, all_headers, RecordedBody(body))

    return answer


def model_for(answer: Answer, **options: Any) -> tuple[BedrockConverseModel, list[AWSPreparedRequest]]:
    client = boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key=SECRET_KEY,
        config=Config(retries={"total_max_attempts": 1, "mode": "standard"}),
    )
    seen: list[AWSPreparedRequest] = []

    def before_send(request: AWSPreparedRequest, **kwargs: Any) -> AWSResponse:
        seen.append(request)
        return answer(request)

    client.meta.events.register("before-send.bedrock-runtime.ConverseStream", before_send)
    return BedrockConverseModel(options.pop("model_id", MODEL_ID), client=client, **options), seen


def hello(**update: Any) -> ModelRequest:
    return ModelRequest(messages=parse_messages([{"role": "user", "content": "Say hello"}])).model_copy(update=update)


async def collect(model: BedrockConverseModel, request: ModelRequest) -> list[str]:
    return [encode_part(p) for p in [part async for part in model.stream(request)]]


async def collect_until_error(model: BedrockConverseModel, request: ModelRequest) -> tuple[list[str], ModelError]:
    parts: list[str] = []
    with pytest.raises(ModelError) as info:
        async for part in model.stream(request):
            parts.append(encode_part(part))
    return parts, info.value


def encoded(*parts: hp.HarnessPartModel) -> list[str]:
    return [encode_part(p) for p in parts]


def finish(unified: str, raw: str | None, usage: dict[str, Any]) -> hp.FinishPart:
    return hp.FinishPart.model_validate({"finishReason": {"unified": unified, "raw": raw}, "totalUsage": usage})


# --- streams --------------------------------------------------------------------------------------


async def test_plain_text_with_usage() -> None:
    model, seen = model_for(streamed(TEXT_STREAM))
    assert await collect(model, hello()) == encoded(
        hp.StreamStartPart(model_id=MODEL_ID),
        hp.TextStartPart(id="text-0"),
        hp.TextDeltaPart(id="text-0", delta="Hello"),
        hp.TextDeltaPart(id="text-0", delta=" from Bedrock."),
        hp.TextEndPart(id="text-0"),
        finish(
            "stop",
            "end_turn",
            {
                "inputTokens": {"total": 12, "noCache": 12},
                "outputTokens": {"total": 9},
                "raw": {"inputTokens": 12, "outputTokens": 9, "totalTokens": 21},
            },
        ),
    )
    assert seen[0].url == (
        "https://bedrock-runtime.us-east-1.amazonaws.com/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0"
        "/converse-stream"
    )
    assert seen[0].headers["Authorization"].startswith(b"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")


async def test_reasoning_with_signature_and_redacted_content() -> None:
    model, _ = model_for(streamed(REASONING_STREAM, piece=31))
    assert await collect(model, hello()) == encoded(
        hp.StreamStartPart(model_id=MODEL_ID),
        hp.ReasoningStartPart(id="reasoning-0"),
        hp.ReasoningDeltaPart(id="reasoning-0", delta="2 + 2"),
        hp.ReasoningDeltaPart(id="reasoning-0", delta=" is 4."),
        hp.ReasoningEndPart(id="reasoning-0", harness_metadata={"bedrock": {"signature": SIGNATURE}}),
        hp.ReasoningStartPart(id="reasoning-1"),
        hp.ReasoningEndPart(
            id="reasoning-1", harness_metadata={"bedrock": {"redactedData": base64.b64encode(REDACTED).decode()}}
        ),
        hp.TextStartPart(id="text-2"),
        hp.TextDeltaPart(id="text-2", delta="4"),
        hp.TextEndPart(id="text-2"),
        finish(
            "stop",
            "end_turn",
            {
                "inputTokens": {"total": 1540, "noCache": 40, "cacheRead": 1500, "cacheWrite": 0},
                "outputTokens": {"total": 65},
                "raw": {
                    "inputTokens": 40,
                    "outputTokens": 65,
                    "totalTokens": 1605,
                    "cacheReadInputTokens": 1500,
                    "cacheWriteInputTokens": 0,
                },
            },
        ),
    )


async def test_two_tool_calls_with_input_split_mid_token() -> None:
    model, _ = model_for(streamed(TOOLS_STREAM, piece=47))
    assert await collect(model, hello()) == encoded(
        hp.StreamStartPart(model_id=MODEL_ID),
        hp.TextStartPart(id="text-0"),
        hp.TextDeltaPart(id="text-0", delta="I'll check both."),
        hp.TextEndPart(id="text-0"),
        hp.ToolInputStartPart(id="tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", tool_name="get_weather"),
        hp.ToolInputDeltaPart(id="tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", delta='{"ci'),
        hp.ToolInputDeltaPart(id="tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", delta='ty": "Par'),
        hp.ToolInputDeltaPart(id="tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", delta='is"}'),
        hp.ToolInputEndPart(id="tooluse_kZJMlvQmRJ6eAyJE5GIl7Q"),
        hp.ToolCallPart(
            tool_call_id="tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", tool_name="get_weather", input='{"city": "Paris"}'
        ),
        hp.ToolInputStartPart(id="tooluse_2mQ0bD1eTqe3xZyJ4fG8Hw", tool_name="get_time"),
        hp.ToolInputDeltaPart(id="tooluse_2mQ0bD1eTqe3xZyJ4fG8Hw", delta='{"tz": "Eu'),
        hp.ToolInputDeltaPart(id="tooluse_2mQ0bD1eTqe3xZyJ4fG8Hw", delta='rope/Paris"}'),
        hp.ToolInputEndPart(id="tooluse_2mQ0bD1eTqe3xZyJ4fG8Hw"),
        hp.ToolCallPart(
            tool_call_id="tooluse_2mQ0bD1eTqe3xZyJ4fG8Hw", tool_name="get_time", input='{"tz": "Europe/Paris"}'
        ),
        finish(
            "tool-calls",
            "tool_use",
            {
                "inputTokens": {"total": 472, "noCache": 472},
                "outputTokens": {"total": 89},
                "raw": {"inputTokens": 472, "outputTokens": 89, "totalTokens": 561},
            },
        ),
    )


@pytest.mark.parametrize(
    ("raw", "unified"),
    [
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("guardrail_intervened", "content-filter"),
        ("content_filtered", "content-filter"),
        ("malformed_model_output", "other"),
    ],
)
async def test_stop_reason_mapping(raw: str, unified: str) -> None:
    stream = TEXT_STREAM.replace(event("messageStop", {"p": "abcdefghijklmnopqrstu", "stopReason": "end_turn"}), b"")
    stream += event("messageStop", {"stopReason": raw})
    model, _ = model_for(streamed(stream))
    parts = await collect(model, hello())
    assert json.loads(parts[-1])["finishReason"] == {"unified": unified, "raw": raw}


async def test_the_event_loop_keeps_running_while_boto3_blocks() -> None:
    def slow(request: AWSPreparedRequest) -> AWSResponse:
        # The synchronous HTTP call blocks until the event loop has ticked on meanwhile: were the
        # call made on the loop's thread, no tick could come and this would give up.
        seen, deadline = ticks, time.monotonic() + 30
        while ticks < seen + 3:
            assert time.monotonic() < deadline, "the event loop stood still during the blocking call"
            time.sleep(0.005)
        return streamed(TEXT_STREAM, piece=40, delay=0.02)(request)

    model, _ = model_for(slow)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.005)
            ticks += 1

    task = asyncio.create_task(ticker())
    try:
        parts = await collect(model, hello())
    finally:
        task.cancel()
    assert json.loads(parts[-1])["type"] == "finish"  # the loop ticked during the call (see slow)


# --- the request ----------------------------------------------------------------------------------

PNG = b"\x89PNG\r\n\x1a\n"
PDF = b"%PDF-1.4\n"


def full_request(**update: Any) -> ModelRequest:
    messages = parse_messages(
        [
            {"role": "system", "content": "Answer in French."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Look at these."},
                    {
                        "type": "file",
                        "mediaType": "image/png",
                        "data": {"type": "url", "url": "data:image/png;base64," + base64.b64encode(PNG).decode()},
                    },
                    {
                        "type": "file",
                        "mediaType": "application/pdf",
                        "data": {"type": "url", "url": "data:application/pdf;base64," + base64.b64encode(PDF).decode()},
                        "filename": "Q3 report (final).pdf",
                    },
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "reasoning",
                        "text": "Need weather.",
                        "providerOptions": {"bedrock": {"signature": SIGNATURE}},
                    },
                    {"type": "reasoning", "text": "unsigned reasoning is dropped"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool-call", "toolCallId": "tu_1", "toolName": "get_weather", "input": {"city": "Paris"}},
                    {"type": "tool-call", "toolCallId": "tu_2", "toolName": "get_time", "input": {"tz": "CET"}},
                    {"type": "tool-approval-request", "approvalId": "appr_1", "toolCallId": "tu_2"},
                ],
            },
            {
                "role": "tool",
                "content": [
                    {"type": "tool-approval-response", "approvalId": "appr_1", "approved": True},
                    {
                        "type": "tool-result",
                        "toolCallId": "tu_1",
                        "toolName": "get_weather",
                        "output": {"type": "json", "value": {"tempC": 21}},
                    },
                    {
                        "type": "tool-result",
                        "toolCallId": "tu_2",
                        "toolName": "get_time",
                        "output": {"type": "error-text", "value": "Error: unknown zone"},
                    },
                ],
            },
            {"role": "user", "content": "And now?"},
        ]
    )
    base = ModelRequest(
        instructions="You are terse.",
        messages=messages,
        tools=[
            ToolDefinition(
                name="get_weather",
                description="Weather of a city",
                input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
            ),
            ToolDefinition(name="get_time"),
        ],
        tool_choice="required",
        settings={"max_output_tokens": 1024, "temperature": 0.5, "stop_sequences": ["END"], "seed": 1},
    )
    return base.model_copy(update=update)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def test_request_payload_maps_messages_tools_and_settings() -> None:
    model, seen = model_for(streamed(TEXT_STREAM), inference_config={"topP": 0.9, "maxTokens": 4096})
    parts = await collect(model, full_request())
    assert json.loads(seen[0].body) == {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"text": "Look at these."},
                    {"image": {"format": "png", "source": {"bytes": b64(PNG)}}},
                    {"document": {"format": "pdf", "name": "Q3 report (final)", "source": {"bytes": b64(PDF)}}},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"reasoningContent": {"reasoningText": {"text": "Need weather.", "signature": SIGNATURE}}},
                    {"text": "Checking."},
                    {"toolUse": {"toolUseId": "tu_1", "name": "get_weather", "input": {"city": "Paris"}}},
                    {"toolUse": {"toolUseId": "tu_2", "name": "get_time", "input": {"tz": "CET"}}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"toolResult": {"toolUseId": "tu_1", "content": [{"json": {"tempC": 21}}]}},
                    {
                        "toolResult": {
                            "toolUseId": "tu_2",
                            "content": [{"text": "Error: unknown zone"}],
                            "status": "error",
                        }
                    },
                    {"text": "And now?"},
                ],
            },
        ],
        "system": [{"text": "You are terse."}, {"text": "Answer in French."}],
        "inferenceConfig": {"maxTokens": 1024, "temperature": 0.5, "topP": 0.9, "stopSequences": ["END"]},
        "toolConfig": {
            "tools": [
                {
                    "toolSpec": {
                        "name": "get_weather",
                        "description": "Weather of a city",
                        "inputSchema": {"json": {"type": "object", "properties": {"city": {"type": "string"}}}},
                    }
                },
                {"toolSpec": {"name": "get_time", "inputSchema": {"json": {"type": "object", "properties": {}}}}},
            ],
            "toolChoice": {"any": {}},
        },
    }
    assert parts[0] == encode_part(
        hp.StreamStartPart(model_id=MODEL_ID, warnings=[hp.UnsupportedSettingWarning(setting="seed")])
    )


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", None),
        ("required", {"any": {}}),
        ({"type": "tool", "toolName": "get_time"}, {"tool": {"name": "get_time"}}),
    ],
)
async def test_tool_choice_mapping(choice: Any, expected: dict[str, Any] | None) -> None:
    model, seen = model_for(streamed(TEXT_STREAM))
    await collect(model, full_request(tool_choice=choice, settings={}))
    tool_config = json.loads(seen[0].body)["toolConfig"]
    assert tool_config.get("toolChoice") == expected and len(tool_config["tools"]) == 2


async def test_tool_choice_none_omits_tools_and_sends_earlier_tool_use_as_text() -> None:
    model, seen = model_for(streamed(TEXT_STREAM))
    await collect(model, full_request(tool_choice="none", settings={}))
    body = json.loads(seen[0].body)
    assert "toolConfig" not in body
    assert body["messages"][1]["content"][2:] == [
        {"text": '[called tool get_weather with input {"city":"Paris"}]'},
        {"text": '[called tool get_time with input {"tz":"CET"}]'},
    ]
    assert body["messages"][2]["content"] == [
        {"text": '[result of tool get_weather: {"tempC":21}]'},
        {"text": "[result of tool get_time: Error: unknown zone]"},
        {"text": "And now?"},
    ]


async def test_response_format_uses_output_config() -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    model, seen = model_for(streamed(TEXT_STREAM))
    await collect(model, hello(response_format=schema, settings={"bedrock": {"requestMetadata": {"run": "r1"}}}))
    body = json.loads(seen[0].body)
    assert body["outputConfig"] == {
        "textFormat": {
            "type": "json_schema",
            "structure": {"jsonSchema": {"schema": json.dumps(schema, separators=(",", ":")), "name": "output"}},
        }
    }
    assert body["requestMetadata"] == {"run": "r1"}


async def test_a_reasoning_part_from_the_stream_goes_back_with_its_signature() -> None:
    model, seen = model_for(streamed(REASONING_STREAM))
    parts = [p async for p in model.stream(hello())]
    ends = [p for p in parts if isinstance(p, hp.ReasoningEndPart)]
    follow_up = parse_messages(
        [
            {"role": "user", "content": "Say hello"},
            {
                "role": "assistant",
                "content": [
                    {"type": "reasoning", "text": "2 + 2 is 4.", "providerOptions": ends[0].harness_metadata},
                    {"type": "reasoning", "text": "", "providerOptions": ends[1].harness_metadata},
                    {"type": "text", "text": "4"},
                ],
            },
            {"role": "user", "content": "Thanks"},
        ]
    )
    await collect(model, ModelRequest(messages=follow_up))
    assert json.loads(seen[1].body)["messages"][1]["content"] == [
        {"reasoningContent": {"reasoningText": {"text": "2 + 2 is 4.", "signature": SIGNATURE}}},
        {"reasoningContent": {"redactedContent": b64(REDACTED)}},
        {"text": "4"},
    ]


# --- errors ---------------------------------------------------------------------------------------


async def test_http_400_validation_is_not_retryable_and_carries_the_message() -> None:
    message = "The model returned the following errors: messages.1.content: Conversation blocks and tool result blocks cannot be provided in the same turn."  # noqa: E501
    model, _ = model_for(failed(400, "ValidationException", message))
    parts, error = await collect_until_error(model, hello())
    assert parts == [] and not error.retryable and error.status_code == 400
    assert str(error) == f"Bedrock ValidationException: {message}"


async def test_http_403_access_denied_is_not_retryable_and_leaks_no_secret() -> None:
    message = (
        "User: arn:aws:sts::123456789012:assumed-role/agent-fn/agent-fn is not authorized to perform: "
        "bedrock:InvokeModelWithResponseStream on resource: arn:aws:bedrock:us-east-1::foundation-model/"
        "anthropic.claude-sonnet-4-5-20250929-v1:0 because no identity-based policy allows the "
        "bedrock:InvokeModelWithResponseStream action"
    )
    model, _ = model_for(failed(403, "AccessDeniedException", message))
    _, error = await collect_until_error(model, hello())
    assert not error.retryable and error.status_code == 403
    assert "bedrock:InvokeModelWithResponseStream" in str(error) and SECRET_KEY not in str(error)


@pytest.mark.parametrize(
    ("status", "error_type", "message", "advice"),
    [
        (  # the first call of a third-party model: the subscription needs Marketplace permissions
            403,
            "AccessDeniedException",
            "Model access is denied due to IAM user or service role is not authorized to perform the required AWS "
            "Marketplace actions (aws-marketplace:ViewSubscriptions, aws-marketplace:Subscribe) to enable access to "
            "this model. Refer to the Amazon Bedrock User Guide for further details. Your AWS Marketplace "
            "subscription for this model cannot be completed at this time. If you recently fixed this issue, try "
            "again after 15 minutes.",
            "payment method for Marketplace purchases",
        ),
        (  # Anthropic's one-time form
            404,
            "ResourceNotFoundException",
            "Model use case details have not been submitted for this account. Fill out the Anthropic use case "
            "details form before using the model. If you have already filled out the form, try again in 15 minutes.",
            "Submit it in the Amazon Bedrock console",
        ),
        (
            403,
            "AccessDeniedException",
            "User: arn:aws:sts::123456789012:assumed-role/agent-fn/agent-fn is not authorized to perform: "
            "bedrock:InvokeModelWithResponseStream on resource: arn:aws:bedrock:us-east-1::foundation-model/x",
            "Check the ModelId parameter",
        ),
        (
            403,
            "AccessDeniedException",
            "You don't have access to the model with the specified model ID.",
            "no access to the model in this Region",
        ),
    ],
)
async def test_a_refused_model_call_says_what_to_do_and_not_who_called(
    status: int, error_type: str, message: str, advice: str
) -> None:
    model, _ = model_for(failed(status, error_type, message))
    _, error = await collect_until_error(model, hello())
    assert not error.retryable and error.status_code == status
    text = str(error)
    assert text.startswith(f"Bedrock {error_type}: Bedrock refused the model call: ") and advice in text
    assert "docs/deploying.md, Model access" in text
    # The account, role and session the refused message named stay out of the client's error chunk.
    assert "123456789012" not in text and "assumed-role" not in text and SECRET_KEY not in text


@pytest.mark.parametrize(
    ("status", "error_type", "message"),
    [
        (429, "ThrottlingException", "Too many requests, please wait before trying again."),
        (503, "ServiceUnavailableException", "Bedrock is unable to process your request."),
        (500, "InternalServerException", "The server encountered an error processing your request."),
        (408, "ModelTimeoutException", "Model has timed out in processing the request."),
    ],
)
async def test_throttling_and_server_errors_are_retryable(status: int, error_type: str, message: str) -> None:
    model, seen = model_for(failed(status, error_type, message, headers={"retry-after": "3"}))
    _, error = await collect_until_error(model, hello())
    assert error.retryable and error.status_code == status and error.retry_after == 3.0
    assert str(error) == f"Bedrock {error_type}: {message}"
    assert len(seen) == 1  # botocore did not retry


async def test_throttling_exception_in_the_stream_after_text() -> None:
    stream = TEXT_THEN + exception(
        "throttlingException", {"message": "Too many tokens, please wait before trying again."}
    )
    model, _ = model_for(streamed(stream))
    parts, error = await collect_until_error(model, hello())
    assert parts == encoded(
        hp.StreamStartPart(model_id=MODEL_ID),
        hp.TextStartPart(id="text-0"),
        hp.TextDeltaPart(id="text-0", delta="Once upon"),
    )
    assert (
        error.retryable
        and str(error) == "Bedrock throttlingException: Too many tokens, please wait before trying again."
    )


@pytest.mark.parametrize(
    ("name", "body", "retryable"),
    [
        ("serviceUnavailableException", {"message": "Bedrock is unable to process your request."}, True),
        ("internalServerException", {"message": "An internal server error occurred."}, True),
        (
            "modelStreamErrorException",
            {"message": "Model stream error", "originalStatusCode": 500, "originalMessage": "upstream reset"},
            True,
        ),
        ("validationException", {"message": "Output blocked by content filtering policy"}, False),
    ],
)
async def test_stream_exceptions(name: str, body: dict[str, Any], retryable: bool) -> None:
    model, _ = model_for(streamed(TEXT_THEN + exception(name, body)))
    parts, error = await collect_until_error(model, hello())
    assert len(parts) == 3 and error.retryable is retryable and name in str(error)


async def test_a_stream_without_message_stop_is_retryable() -> None:
    model, _ = model_for(streamed(TEXT_THEN))
    parts, error = await collect_until_error(model, hello())
    assert len(parts) == 3 and error.retryable and "messageStop" in str(error)


async def test_connection_errors_are_retryable() -> None:
    def unreachable(request: AWSPreparedRequest) -> AWSResponse:
        raise EndpointConnectionError(endpoint_url=request.url)

    model, _ = model_for(unreachable)
    _, error = await collect_until_error(model, hello())
    assert error.retryable and "Could not connect" in str(error)


async def test_a_read_timeout_mid_stream_is_retryable_after_the_parts_so_far() -> None:
    model, _ = model_for(streamed(TEXT_STREAM, piece=100, fail_after=200))
    parts, error = await collect_until_error(model, hello())
    assert parts[0] == encode_part(hp.StreamStartPart(model_id=MODEL_ID))
    assert error.retryable and "Read timeout" in str(error)


async def test_a_consumer_that_stops_early_closes_the_stream() -> None:
    bodies: list[RecordedBody] = []

    def answer(request: AWSPreparedRequest) -> AWSResponse:
        response = streamed(TEXT_STREAM)(request)
        bodies.append(response.raw)
        return response

    model, _ = model_for(answer)
    stream = model.stream(hello())
    async for _part in stream:
        break
    await stream.aclose()  # type: ignore[attr-defined]
    assert bodies[0].closed


def test_the_default_client_never_retries_and_takes_the_region_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_REGION", "eu-west-3")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-3")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    monkeypatch.setattr(bedrock, "_client_factory", bedrock.botocore_client)  # no root: the model's own default
    model = BedrockConverseModel("amazon.nova-lite-v1:0")
    assert model.model_id == "bedrock:amazon.nova-lite-v1:0"
    client = model.client
    assert client.meta.region_name == "eu-west-3"
    assert client.meta.service_model.service_name == "bedrock-runtime"
    config = client.meta.config
    assert config.retries["total_max_attempts"] == 1
    # A function's root installs the AWS adapters' factory: outside Lambda a botocore client alike ...
    bedrock.set_client_factory(bedrock_model_client)
    assert BedrockConverseModel("amazon.nova-lite-v1:0").client.meta.config.retries["total_max_attempts"] == 1
    # ... in Lambda the lite client, set up alike.
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "chat")
    lite = BedrockConverseModel("amazon.nova-lite-v1:0").client
    assert type(lite).__name__ == "BedrockRuntimeClient"
    assert (lite.region, lite.endpoint_url) == ("eu-west-3", "https://bedrock-runtime.eu-west-3.amazonaws.com")
    assert (lite._max_attempts, lite._connect_timeout, lite._read_timeout) == (
        1,
        config.connect_timeout,
        config.read_timeout,
    )


def test_the_default_client_in_lambda_imports_no_botocore_client_machinery() -> None:
    code = (
        "import sys\n"
        "from durable_harness.aws.clients import bedrock_model_client\n"
        "from durable_harness.models.bedrock import BedrockConverseModel, set_client_factory\n"
        "set_client_factory(bedrock_model_client)  # what a function's root installs\n"
        "client = BedrockConverseModel('amazon.nova-lite-v1:0').client\n"
        "print(type(client).__name__, sorted(m for m in ('boto3', 'botocore.session', 'botocore.client',"
        " 'botocore.config', 'urllib3') if m in sys.modules))\n"
    )
    env = {**os.environ, "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "x"}
    env["AWS_LAMBDA_FUNCTION_NAME"] = "chat"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["BedrockRuntimeClient", "[]"]


# --- the lite client (what a deployed function uses) ----------------------------------------------


@pytest.mark.parametrize(
    "stream",
    [TOOLS_STREAM, REASONING_STREAM, TEXT_THEN + exception("throttlingException", {"message": "Too many tokens"})],
    ids=["tools", "reasoning", "throttled"],
)
async def test_a_turn_streams_through_the_lite_client_as_through_boto3(stream: bytes) -> None:
    """The adapter on the lite ``bedrock-runtime`` client, against a loopback server that streams the
    recorded bytes in HTTP chunks cut mid-frame, yields the parts (and the error) it yields on boto3."""
    from lambda_fastpath.aws._transport import Credentials
    from lambda_fastpath.aws.bedrock import BedrockRuntimeClient

    from tests.lambda_fastpath.aws.scripted import Reply, ScriptedServer, split

    async def run(model: BedrockConverseModel) -> tuple[list[str], tuple[str, bool] | None]:
        parts: list[str] = []
        try:
            async for part in model.stream(hello()):
                parts.append(encode_part(part))
        except ModelError as error:
            return parts, (str(error), error.retryable)
        return parts, None

    expected = await run(model_for(streamed(stream))[0])
    with ScriptedServer() as server:
        headers = {"content-type": "application/vnd.amazon.eventstream", "x-amzn-requestid": "5d1c6ffe"}
        server.script.append(Reply(200, headers, split(stream, [7, 13, 1, 64])))
        credentials = Credentials(access_key="AKIDEXAMPLE", secret_key=SECRET_KEY, token=None)
        client = BedrockRuntimeClient(
            region="us-east-1", credentials=credentials, endpoint_url=server.url, max_attempts=1
        )
        assert await run(BedrockConverseModel(MODEL_ID, client=client)) == expected
        assert server.requests[0].path.startswith("/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/")
    assert len(expected[0]) >= 3
