"""The Anthropic Messages API provider against recorded wire streams.

No Anthropic account or network is available here, so the provider is replaced by a recorded
stream: each test serves the exact bytes the Messages API sends (``event:`` / ``data:`` SSE
events ``message_start``, ``content_block_*``, ``ping``, ``message_delta``, ``message_stop``,
``error``; error bodies of shape ``{"type": "error", "error": {...}}`` with ``retry-after``)
through :class:`httpx.MockTransport`, httpx's own test transport, cut into small byte pieces so
events straddle reads. Nothing of our code is mocked.
"""

# ruff: noqa: E501  (the recorded SSE events are verbatim one-line JSON)

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from durable_harness.errors import ModelError
from durable_harness.messages import parse_messages
from durable_harness.models.anthropic import AnthropicModel
from durable_harness.models.base import ModelRequest, ToolDefinition
from durable_harness.protocol import harness_parts as hp
from durable_harness.protocol.harness_parts import encode_part

from tests.models._loopback import assert_two_calls_share_a_connection, recorded_server

API_KEY = "sk-ant-api03-test-SECRET-0123456789"
MODEL = "claude-sonnet-4-5-20250929"
SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dlMOYdsP0gEJLx5iuiA3xgETOBi7e7b5EfgNjq"
REDACTED = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnZ5sQ7"

# --- recorded streams -----------------------------------------------------------------------------

TEXT_STREAM = b"""\
event: message_start
data: {"type":"message_start","message":{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":21,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":2,"service_tier":"standard"}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"! How can I help?"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":12}}

event: message_stop
data: {"type":"message_stop"}

"""

THINKING_STREAM = (
    b"""\
event: message_start
data: {"type":"message_start","message":{"id":"msg_01Thk","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":45,"cache_creation_input_tokens":1200,"cache_read_input_tokens":3000,"output_tokens":4,"service_tier":"standard"}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"27 * 453: 27*400=10800,"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":" 27*53=1431, sum 12231."}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":\""""
    + SIGNATURE.encode()
    + b"""\"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking","data":\""""
    + REDACTED.encode()
    + b"""\"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: content_block_start
data: {"type":"content_block_start","index":2,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"27 \xc3\x97 453 = 12,231."}}

event: content_block_stop
data: {"type":"content_block_stop","index":2}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":87}}

event: message_stop
data: {"type":"message_stop"}

"""
)

TOOLS_STREAM = b"""\
event: message_start
data: {"type":"message_start","message":{"id":"msg_014p7gG3wDgGV9EUtLvnow3U","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":472,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":2,"service_tier":"standard"}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"I'll check both."}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","name":"get_weather","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\\"ci"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"ty\\": \\"Par"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"is\\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: content_block_start
data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_01Ab2Cd3Ef4Gh5Ij6Kl7Mn8O","name":"get_time","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\\"tz\\": \\"Eu"}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"rope/Paris\\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":2}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}

event: message_stop
data: {"type":"message_stop"}

"""

JSON_TOOL_STREAM = b"""\
event: message_start
data: {"type":"message_start","message":{"id":"msg_01Json","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":380,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1,"service_tier":"standard"}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_01Js","name":"json","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\\"answ"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"er\\": \\"42\\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":14}}

event: message_stop
data: {"type":"message_stop"}

"""

MID_STREAM_ERROR = b"""\
event: message_start
data: {"type":"message_start","message":{"id":"msg_01Err","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Once upon"}}

event: error
data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":null}

"""

TRUNCATED_STREAM = b"\n\n".join(TEXT_STREAM.split(b"\n\n")[:4]) + b"\n\n"


# --- helpers --------------------------------------------------------------------------------------


async def _pieces(data: bytes, size: int) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


def recorded(
    body: bytes, *, status: int = 200, headers: dict[str, str] | None = None, piece: int = 23
) -> tuple[Callable[[httpx.Request], httpx.Response], list[httpx.Request]]:
    """A MockTransport handler replaying ``body``, and the list of requests it received."""
    seen: list[httpx.Request] = []
    content_type = "text/event-stream; charset=utf-8" if status == 200 else "application/json"

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        all_headers = {"content-type": content_type, "request-id": "req_011CSHoEeqs5C35K2UUqR7Fy", **(headers or {})}
        return httpx.Response(status, headers=all_headers, content=_pieces(body, piece))

    return handler, seen


def model_for(handler: Callable[[httpx.Request], httpx.Response], **options: Any) -> AnthropicModel:
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    options.setdefault("api_key", API_KEY)
    return AnthropicModel(options.pop("model", MODEL), client=client, **options)


def hello(**update: Any) -> ModelRequest:
    return ModelRequest(messages=parse_messages([{"role": "user", "content": "Say hello"}])).model_copy(update=update)


async def collect(model: AnthropicModel, request: ModelRequest) -> list[str]:
    return [encode_part(p) for p in [part async for part in model.stream(request)]]


async def collect_until_error(model: AnthropicModel, request: ModelRequest) -> tuple[list[str], ModelError]:
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
    handler, _ = recorded(TEXT_STREAM)
    assert await collect(model_for(handler), hello()) == encoded(
        hp.StreamStartPart(model_id=MODEL),
        hp.TextStartPart(id="text-0"),
        hp.TextDeltaPart(id="text-0", delta="Hello"),
        hp.TextDeltaPart(id="text-0", delta="! How can I help?"),
        hp.TextEndPart(id="text-0"),
        finish(
            "stop",
            "end_turn",
            {
                "inputTokens": {"total": 21, "noCache": 21, "cacheRead": 0, "cacheWrite": 0},
                "outputTokens": {"total": 12},
                "raw": {
                    "input_tokens": 21,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 0,
                    "output_tokens": 12,
                    "service_tier": "standard",
                },
            },
        ),
    )


async def test_thinking_with_signature_and_redacted_thinking() -> None:
    handler, _ = recorded(THINKING_STREAM, piece=31)
    assert await collect(model_for(handler), hello()) == encoded(
        hp.StreamStartPart(model_id=MODEL),
        hp.ReasoningStartPart(id="reasoning-0"),
        hp.ReasoningDeltaPart(id="reasoning-0", delta="27 * 453: 27*400=10800,"),
        hp.ReasoningDeltaPart(id="reasoning-0", delta=" 27*53=1431, sum 12231."),
        hp.ReasoningEndPart(id="reasoning-0", harness_metadata={"anthropic": {"signature": SIGNATURE}}),
        hp.ReasoningStartPart(id="reasoning-1"),
        hp.ReasoningEndPart(id="reasoning-1", harness_metadata={"anthropic": {"redactedData": REDACTED}}),
        hp.TextStartPart(id="text-2"),
        hp.TextDeltaPart(id="text-2", delta="27 \u00d7 453 = 12,231."),
        hp.TextEndPart(id="text-2"),
        finish(
            "stop",
            "end_turn",
            {
                "inputTokens": {"total": 4245, "noCache": 45, "cacheRead": 3000, "cacheWrite": 1200},
                "outputTokens": {"total": 87},
                "raw": {
                    "input_tokens": 45,
                    "cache_creation_input_tokens": 1200,
                    "cache_read_input_tokens": 3000,
                    "output_tokens": 87,
                    "service_tier": "standard",
                },
            },
        ),
    )


async def test_two_tool_calls_with_input_split_mid_token() -> None:
    handler, _ = recorded(TOOLS_STREAM, piece=37)
    parts = await collect(model_for(handler), hello())
    assert parts[:-1] == encoded(
        hp.StreamStartPart(model_id=MODEL),
        hp.TextStartPart(id="text-0"),
        hp.TextDeltaPart(id="text-0", delta="I'll check both."),
        hp.TextEndPart(id="text-0"),
        hp.ToolInputStartPart(id="toolu_01T1x1fJ34qAmk2tNTrN7Up6", tool_name="get_weather"),
        hp.ToolInputDeltaPart(id="toolu_01T1x1fJ34qAmk2tNTrN7Up6", delta='{"ci'),
        hp.ToolInputDeltaPart(id="toolu_01T1x1fJ34qAmk2tNTrN7Up6", delta='ty": "Par'),
        hp.ToolInputDeltaPart(id="toolu_01T1x1fJ34qAmk2tNTrN7Up6", delta='is"}'),
        hp.ToolInputEndPart(id="toolu_01T1x1fJ34qAmk2tNTrN7Up6"),
        hp.ToolCallPart(
            tool_call_id="toolu_01T1x1fJ34qAmk2tNTrN7Up6", tool_name="get_weather", input='{"city": "Paris"}'
        ),
        hp.ToolInputStartPart(id="toolu_01Ab2Cd3Ef4Gh5Ij6Kl7Mn8O", tool_name="get_time"),
        hp.ToolInputDeltaPart(id="toolu_01Ab2Cd3Ef4Gh5Ij6Kl7Mn8O", delta='{"tz": "Eu'),
        hp.ToolInputDeltaPart(id="toolu_01Ab2Cd3Ef4Gh5Ij6Kl7Mn8O", delta='rope/Paris"}'),
        hp.ToolInputEndPart(id="toolu_01Ab2Cd3Ef4Gh5Ij6Kl7Mn8O"),
        hp.ToolCallPart(
            tool_call_id="toolu_01Ab2Cd3Ef4Gh5Ij6Kl7Mn8O", tool_name="get_time", input='{"tz": "Europe/Paris"}'
        ),
    )
    last = json.loads(parts[-1])
    assert last["finishReason"] == {"unified": "tool-calls", "raw": "tool_use"}
    assert last["totalUsage"]["inputTokens"]["total"] == 472 and last["totalUsage"]["outputTokens"] == {"total": 89}


async def test_structured_output_arrives_as_text_from_the_forced_json_tool() -> None:
    handler, seen = recorded(JSON_TOOL_STREAM)
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    parts = await collect(model_for(handler), hello(response_format=schema))
    assert parts[:-1] == encoded(
        hp.StreamStartPart(model_id=MODEL),
        hp.TextStartPart(id="text-0"),
        hp.TextDeltaPart(id="text-0", delta='{"answ'),
        hp.TextDeltaPart(id="text-0", delta='er": "42"}'),
        hp.TextEndPart(id="text-0"),
    )
    assert json.loads(parts[-1])["finishReason"] == {"unified": "stop", "raw": "tool_use"}
    body = json.loads(seen[0].content)
    assert body["tools"] == [{"name": "json", "description": "Respond with a JSON object.", "input_schema": schema}]
    assert body["tool_choice"] == {"type": "tool", "name": "json"}


# --- the request ----------------------------------------------------------------------------------

PNG_B64 = "iVBORw0KGgo="
PDF_B64 = "JVBERi0xLjQK"


def full_request(**update: Any) -> ModelRequest:
    messages = parse_messages(
        [
            {"role": "system", "content": "Answer in French."},
            {"role": "user", "content": "Look at these."},
            {
                "role": "user",
                "content": [
                    {
                        "type": "file",
                        "mediaType": "image/png",
                        "data": {"type": "url", "url": f"data:image/png;base64,{PNG_B64}"},
                    },
                    {
                        "type": "file",
                        "mediaType": "application/pdf",
                        "data": {"type": "url", "url": f"data:application/pdf;base64,{PDF_B64}"},
                        "filename": "report.pdf",
                    },
                    {"type": "file", "mediaType": "image/jpeg", "data": {"type": "url", "url": "https://x.test/a.jpg"}},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "reasoning",
                        "text": "Need weather.",
                        "providerOptions": {"anthropic": {"signature": SIGNATURE}},
                    },
                    {"type": "reasoning", "text": "", "providerOptions": {"anthropic": {"redactedData": REDACTED}}},
                    {"type": "reasoning", "text": "unsigned reasoning from another provider"},
                    {"type": "text", "text": "Checking."},
                    {
                        "type": "tool-call",
                        "toolCallId": "toolu_1",
                        "toolName": "get_weather",
                        "input": {"city": "Paris"},
                    },
                    {"type": "tool-call", "toolCallId": "toolu_2", "toolName": "get_time", "input": '{"tz":"CET"}'},
                    {"type": "tool-call", "toolCallId": "toolu_3", "toolName": "lookup", "input": "{not json"},
                    {"type": "tool-approval-request", "approvalId": "appr_1", "toolCallId": "toolu_3"},
                ],
            },
            {
                "role": "tool",
                "content": [
                    {"type": "tool-approval-response", "approvalId": "appr_1", "approved": True},
                    {
                        "type": "tool-result",
                        "toolCallId": "toolu_1",
                        "toolName": "get_weather",
                        "output": {"type": "json", "value": {"tempC": 21}},
                    },
                    {
                        "type": "tool-result",
                        "toolCallId": "toolu_2",
                        "toolName": "get_time",
                        "output": {"type": "error-text", "value": "Error: unknown zone"},
                    },
                    {
                        "type": "tool-result",
                        "toolCallId": "toolu_3",
                        "toolName": "lookup",
                        "output": {"type": "error-json", "value": {"code": 7}},
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
        settings={
            "max_output_tokens": 2048,
            "temperature": 1,
            "top_k": 5,
            "stop_sequences": ["END"],
            "seed": 3,
            "anthropic": {"thinking": {"type": "enabled", "budget_tokens": 1024}},
        },
    )
    return base.model_copy(update=update)


async def test_request_body_maps_messages_tools_and_settings() -> None:
    handler, seen = recorded(TEXT_STREAM)
    parts = await collect(model_for(handler), full_request())
    (request,) = seen
    assert str(request.url) == "https://api.anthropic.com/v1/messages"
    assert request.headers["x-api-key"] == API_KEY
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in request.headers
    assert json.loads(request.content) == {
        "model": MODEL,
        "max_tokens": 2048,
        "system": [{"type": "text", "text": "You are terse."}, {"type": "text", "text": "Answer in French."}],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Look at these."},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}},
                    {
                        "type": "document",
                        "source": {"type": "base64", "media_type": "application/pdf", "data": PDF_B64},
                        "title": "report.pdf",
                    },
                    {"type": "image", "source": {"type": "url", "url": "https://x.test/a.jpg"}},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Need weather.", "signature": SIGNATURE},
                    {"type": "redacted_thinking", "data": REDACTED},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "get_time", "input": {"tz": "CET"}},
                    {"type": "tool_use", "id": "toolu_3", "name": "lookup", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": '{"tempC":21}'},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "content": "Error: unknown zone",
                        "is_error": True,
                    },
                    {"type": "tool_result", "tool_use_id": "toolu_3", "content": '{"code":7}', "is_error": True},
                    {"type": "text", "text": "And now?"},
                ],
            },
        ],
        "tools": [
            {
                "name": "get_weather",
                "description": "Weather of a city",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
            {"name": "get_time", "input_schema": {"type": "object", "properties": {}}},
        ],
        "tool_choice": {"type": "any"},
        "temperature": 1,
        "top_k": 5,
        "stop_sequences": ["END"],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "stream": True,
    }
    assert parts[0] == encode_part(
        hp.StreamStartPart(model_id=MODEL, warnings=[hp.UnsupportedSettingWarning(setting="seed")])
    )


@pytest.mark.parametrize(
    ("choice", "with_format", "expected"),
    [
        ("auto", False, {"type": "auto"}),
        ("none", False, {"type": "none"}),
        ("required", False, {"type": "any"}),
        ({"type": "tool", "toolName": "get_time"}, False, {"type": "tool", "name": "get_time"}),
        ("auto", True, {"type": "any"}),
        ("none", True, {"type": "tool", "name": "json"}),
        ({"type": "tool", "toolName": "get_time"}, True, {"type": "tool", "name": "get_time"}),
    ],
)
async def test_tool_choice_mapping(choice: Any, with_format: bool, expected: dict[str, str]) -> None:
    handler, seen = recorded(TEXT_STREAM)
    schema = {"type": "object"} if with_format else None
    await collect(model_for(handler), full_request(tool_choice=choice, response_format=schema, settings={}))
    body = json.loads(seen[0].content)
    assert body["tool_choice"] == expected
    assert [t["name"] for t in body["tools"]] == ["get_weather", "get_time"] + (["json"] if with_format else [])
    assert body["max_tokens"] == 4096


async def test_a_signed_reasoning_part_from_the_stream_goes_back_as_a_thinking_block() -> None:
    handler, seen = recorded(THINKING_STREAM)
    model = model_for(handler)
    parts = [p async for p in model.stream(hello())]
    end = next(p for p in parts if isinstance(p, hp.ReasoningEndPart) and p.id == "reasoning-0")
    # The agent loop stores a reasoning-end's harness metadata as the reasoning part's providerOptions.
    follow_up = parse_messages(
        [
            {"role": "user", "content": "Say hello"},
            {
                "role": "assistant",
                "content": [
                    {"type": "reasoning", "text": "27 * 453", "providerOptions": end.harness_metadata},
                    {"type": "text", "text": "12,231"},
                ],
            },
            {"role": "user", "content": "Thanks"},
        ]
    )
    await collect(model, ModelRequest(messages=follow_up))
    assert json.loads(seen[1].content)["messages"][1] == {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "27 * 453", "signature": SIGNATURE},
            {"type": "text", "text": "12,231"},
        ],
    }


# --- errors ---------------------------------------------------------------------------------------


async def test_http_400_is_not_retryable_and_carries_the_message() -> None:
    body = (
        b'{"type":"error","error":{"type":"invalid_request_error","message":"messages.1.content.0.tool_use.input: '
        b'Input should be a valid dictionary"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}'
    )
    handler, _ = recorded(body, status=400)
    parts, error = await collect_until_error(model_for(handler), hello())
    assert parts == [] and not error.retryable and error.status_code == 400
    assert str(error) == (
        "Anthropic API error 400 (invalid_request_error): "
        "messages.1.content.0.tool_use.input: Input should be a valid dictionary"
    )


async def test_http_429_with_retry_after_is_retryable() -> None:
    body = (
        b'{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit '
        b'for your organization of 30,000 input tokens per minute."},"request_id":"req_011CRate"}'
    )
    headers = {"retry-after": "17", "anthropic-ratelimit-input-tokens-remaining": "0"}
    handler, _ = recorded(body, status=429, headers=headers)
    _, error = await collect_until_error(model_for(handler), hello())
    assert error.retryable and error.status_code == 429 and error.retry_after == 17.0


@pytest.mark.parametrize(
    ("status", "kind", "message"),
    [(529, "overloaded_error", "Overloaded"), (500, "api_error", "Internal server error")],
)
async def test_overloaded_and_server_errors_are_retryable(status: int, kind: str, message: str) -> None:
    body = json.dumps({"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_1"}).encode()
    handler, _ = recorded(body, status=status)
    _, error = await collect_until_error(model_for(handler), hello())
    assert error.retryable and error.status_code == status
    assert str(error) == f"Anthropic API error {status} ({kind}): {message}"


async def test_overloaded_error_event_mid_stream_after_text() -> None:
    handler, _ = recorded(MID_STREAM_ERROR)
    parts, error = await collect_until_error(model_for(handler), hello())
    assert parts == encoded(
        hp.StreamStartPart(model_id=MODEL),
        hp.TextStartPart(id="text-0"),
        hp.TextDeltaPart(id="text-0", delta="Once upon"),
    )
    assert error.retryable and str(error) == "Anthropic stream error (overloaded_error): Overloaded"


async def test_an_invalid_request_error_event_is_not_retryable() -> None:
    body = MID_STREAM_ERROR.replace(b"overloaded_error", b"invalid_request_error")
    handler, _ = recorded(body)
    _, error = await collect_until_error(model_for(handler), hello())
    assert not error.retryable


async def test_a_stream_cut_before_message_stop_is_retryable() -> None:
    handler, _ = recorded(TRUNCATED_STREAM)
    parts, error = await collect_until_error(model_for(handler), hello())
    assert [json.loads(p)["type"] for p in parts] == ["stream-start", "text-start", "text-delta"]
    assert error.retryable and "message_stop" in str(error)


async def test_timeouts_are_retryable() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectTimeout("timed out")

    _, error = await collect_until_error(model_for(handler), hello())
    assert error.retryable and error.status_code is None


async def test_the_api_key_never_appears_in_an_error() -> None:
    body = (
        b'{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key: '
        + API_KEY.encode()
        + b'"},"request_id":"req_011CAuth"}'
    )
    handler, _ = recorded(body, status=401)
    _, error = await collect_until_error(model_for(handler), hello())
    assert not error.retryable and error.status_code == 401
    assert API_KEY not in str(error) and "invalid x-api-key: ***" in str(error)


async def test_a_missing_key_fails_before_any_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    handler, seen = recorded(TEXT_STREAM)
    model = AnthropicModel(MODEL, client=httpx.AsyncClient(transport=httpx.MockTransport(handler)))
    _, error = await collect_until_error(model, hello())
    assert not error.retryable and "ANTHROPIC_API_KEY" in str(error) and seen == []


async def test_the_key_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    handler, seen = recorded(TEXT_STREAM)
    model = AnthropicModel(MODEL, client=httpx.AsyncClient(transport=httpx.MockTransport(handler)))
    assert model.model_id == f"anthropic:{MODEL}"
    await collect(model, hello())
    assert seen[0].headers["x-api-key"] == API_KEY


async def test_consecutive_calls_reuse_one_connection() -> None:
    # A real server on loopback (a MockTransport has no connections). The stream is read to its
    # end after message_stop, so httpx keeps the connection: before, each call opened a new one.
    with recorded_server(TEXT_STREAM) as (url, server):
        model = AnthropicModel(MODEL, api_key=API_KEY, base_url=url)
        await assert_two_calls_share_a_connection(model, server, lambda: collect(model, hello()))
