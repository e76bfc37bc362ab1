"""The OpenAI Chat Completions provider against recorded wire streams.

No OpenAI account or network is available here, so the provider is replaced by a recorded
stream: each test serves the exact bytes Chat Completions sends (SSE ``data:`` chunks of
``chat.completion.chunk`` objects, the trailing usage chunk, ``[DONE]``; error bodies with the
API's ``{"error": {...}}`` shape and rate-limit headers) through :class:`httpx.MockTransport`,
httpx's own test transport, cut into small byte pieces so SSE events straddle reads. Nothing of
our code is mocked: the provider builds its real request and parses the real stream.
"""

# ruff: noqa: E501  (the recorded SSE events are verbatim one-line JSON)

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from durable_harness.errors import ModelError
from durable_harness.messages import parse_messages
from durable_harness.models.base import ModelRequest, ToolDefinition
from durable_harness.models.openai import OpenAIChatModel
from durable_harness.protocol import harness_parts as hp
from durable_harness.protocol.harness_parts import encode_part

from tests.models._loopback import assert_two_calls_share_a_connection, recorded_server

API_KEY = "sk-test-0123456789abcdefSECRET"


# --- recorded streams -----------------------------------------------------------------------------

TEXT_STREAM = b"""\
data: {"id":"chatcmpl-BXk3nQ","object":"chat.completion.chunk","created":1747000000,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_0392822090","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-BXk3nQ","object":"chat.completion.chunk","created":1747000000,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_0392822090","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-BXk3nQ","object":"chat.completion.chunk","created":1747000000,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_0392822090","choices":[{"index":0,"delta":{"content":" there"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-BXk3nQ","object":"chat.completion.chunk","created":1747000000,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_0392822090","choices":[{"index":0,"delta":{"content":" \xc3\xa9t\xc3\xa9!"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-BXk3nQ","object":"chat.completion.chunk","created":1747000000,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_0392822090","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}

data: {"id":"chatcmpl-BXk3nQ","object":"chat.completion.chunk","created":1747000000,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_0392822090","choices":[],"usage":{"prompt_tokens":19,"completion_tokens":4,"total_tokens":23,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}

data: [DONE]

"""

# DeepSeek's OpenAI-compatible API: ``reasoning_content`` deltas, usage in the finishing chunk.
REASONING_STREAM = b"""\
data: {"id":"5f2c1a9e","object":"chat.completion.chunk","created":1747000100,"model":"deepseek-reasoner","system_fingerprint":"fp_5417b77867_prod0425fp8","choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":""},"logprobs":null,"finish_reason":null}]}

data: {"id":"5f2c1a9e","object":"chat.completion.chunk","created":1747000100,"model":"deepseek-reasoner","system_fingerprint":"fp_5417b77867_prod0425fp8","choices":[{"index":0,"delta":{"content":null,"reasoning_content":"The user"},"logprobs":null,"finish_reason":null}]}

data: {"id":"5f2c1a9e","object":"chat.completion.chunk","created":1747000100,"model":"deepseek-reasoner","system_fingerprint":"fp_5417b77867_prod0425fp8","choices":[{"index":0,"delta":{"content":null,"reasoning_content":" wants 2+2."},"logprobs":null,"finish_reason":null}]}

data: {"id":"5f2c1a9e","object":"chat.completion.chunk","created":1747000100,"model":"deepseek-reasoner","system_fingerprint":"fp_5417b77867_prod0425fp8","choices":[{"index":0,"delta":{"content":"4","reasoning_content":null},"logprobs":null,"finish_reason":null}]}

data: {"id":"5f2c1a9e","object":"chat.completion.chunk","created":1747000100,"model":"deepseek-reasoner","system_fingerprint":"fp_5417b77867_prod0425fp8","choices":[{"index":0,"delta":{"content":"","reasoning_content":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":13,"completion_tokens":21,"total_tokens":34,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":18},"prompt_cache_hit_tokens":0,"prompt_cache_miss_tokens":13}}

data: [DONE]

"""

# vLLM and OpenRouter name the field ``reasoning``.
REASONING_FIELD_STREAM = b"""\
data: {"id":"chatcmpl-9d1e","object":"chat.completion.chunk","created":1747000200,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9d1e","object":"chat.completion.chunk","created":1747000200,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"delta":{"reasoning":"Short."},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9d1e","object":"chat.completion.chunk","created":1747000200,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":null,"finish_reason":"length"}]}

data: {"id":"chatcmpl-9d1e","object":"chat.completion.chunk","created":1747000200,"model":"Qwen/Qwen3-8B","choices":[],"usage":{"prompt_tokens":5,"total_tokens":8,"completion_tokens":3}}

data: [DONE]

"""

# Text, then two parallel tool calls whose arguments arrive split mid-token.
TOOLS_STREAM = b"""\
data: {"id":"chatcmpl-C1qzT","object":"chat.completion.chunk","created":1747000300,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_07871e2ad8","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-C1qzT","object":"chat.completion.chunk","created":1747000300,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_07871e2ad8","choices":[{"index":0,"delta":{"content":"Checking."},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-C1qzT","object":"chat.completion.chunk","created":1747000300,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_07871e2ad8","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_Vx1aB2","type":"function","function":{"name":"get_weather","arguments":""}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-C1qzT","object":"chat.completion.chunk","created":1747000300,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_07871e2ad8","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\\"ci"}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-C1qzT","object":"chat.completion.chunk","created":1747000300,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_07871e2ad8","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"ty\\": \\"Par"}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-C1qzT","object":"chat.completion.chunk","created":1747000300,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_07871e2ad8","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"is\\"}"}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-C1qzT","object":"chat.completion.chunk","created":1747000300,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_07871e2ad8","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_Wy2cD3","type":"function","function":{"name":"get_time","arguments":""}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-C1qzT","object":"chat.completion.chunk","created":1747000300,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_07871e2ad8","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{\\"tz\\": \\"Eu"}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-C1qzT","object":"chat.completion.chunk","created":1747000300,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_07871e2ad8","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"rope/Paris\\"}"}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-C1qzT","object":"chat.completion.chunk","created":1747000300,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_07871e2ad8","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}],"usage":null}

data: {"id":"chatcmpl-C1qzT","object":"chat.completion.chunk","created":1747000300,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_07871e2ad8","choices":[],"usage":{"prompt_tokens":1310,"completion_tokens":52,"total_tokens":1362,"prompt_tokens_details":{"cached_tokens":1024,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}

data: [DONE]

"""

MID_STREAM_ERROR = b"""\
data: {"id":"chatcmpl-E9","object":"chat.completion.chunk","created":1747000400,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-E9","object":"chat.completion.chunk","created":1747000400,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"delta":{"content":"Once upon"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}

"""

TRUNCATED_STREAM = TEXT_STREAM.split(b"\n\n")[1] + b"\n\n"  # the connection dropped after one delta


# --- helpers --------------------------------------------------------------------------------------


async def _pieces(data: bytes, size: int) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


def recorded(
    body: bytes, *, status: int = 200, headers: dict[str, str] | None = None, piece: int = 29
) -> tuple[Callable[[httpx.Request], httpx.Response], list[httpx.Request]]:
    """A MockTransport handler replaying ``body``, and the list of requests it received."""
    seen: list[httpx.Request] = []
    content_type = "text/event-stream; charset=utf-8" if status == 200 else "application/json"

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        all_headers = {"content-type": content_type, "x-request-id": "req_7f3a", **(headers or {})}
        return httpx.Response(status, headers=all_headers, content=_pieces(body, piece))

    return handler, seen


def model_for(handler: Callable[[httpx.Request], httpx.Response], **options: Any) -> OpenAIChatModel:
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    options.setdefault("api_key", API_KEY)
    return OpenAIChatModel(options.pop("model", "gpt-4o-mini"), client=client, **options)


def hello() -> ModelRequest:
    return ModelRequest(messages=parse_messages([{"role": "user", "content": "Say hello"}]))


async def collect(model: OpenAIChatModel, request: ModelRequest) -> list[str]:
    return [encode_part(p) for p in [part async for part in model.stream(request)]]


async def collect_until_error(model: OpenAIChatModel, request: ModelRequest) -> tuple[list[str], ModelError]:
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
    raw_usage = json.loads(TEXT_STREAM.split(b"\n\n")[5][6:])["usage"]
    assert await collect(model_for(handler), hello()) == encoded(
        hp.StreamStartPart(model_id="gpt-4o-mini-2024-07-18"),
        hp.TextStartPart(id="text-0"),
        hp.TextDeltaPart(id="text-0", delta="Hello"),
        hp.TextDeltaPart(id="text-0", delta=" there"),
        hp.TextDeltaPart(id="text-0", delta=" été!"),
        hp.TextEndPart(id="text-0"),
        finish(
            "stop",
            "stop",
            {
                "inputTokens": {"total": 19, "noCache": 19, "cacheRead": 0},
                "outputTokens": {"total": 4, "text": 4, "reasoning": 0},
                "raw": raw_usage,
            },
        ),
    )


async def test_reasoning_content_of_a_compatible_server() -> None:
    handler, seen = recorded(REASONING_STREAM, piece=17)
    model = model_for(handler, model="deepseek-reasoner", base_url="https://api.deepseek.com/v1")
    request = hello().model_copy(update={"settings": {"max_output_tokens": 512}})
    parts = await collect(model, request)
    assert parts == encoded(
        hp.StreamStartPart(model_id="deepseek-reasoner"),
        hp.ReasoningStartPart(id="reasoning-0"),
        hp.ReasoningDeltaPart(id="reasoning-0", delta="The user"),
        hp.ReasoningDeltaPart(id="reasoning-0", delta=" wants 2+2."),
        hp.ReasoningEndPart(id="reasoning-0"),
        hp.TextStartPart(id="text-1"),
        hp.TextDeltaPart(id="text-1", delta="4"),
        hp.TextEndPart(id="text-1"),
        finish(
            "stop",
            "stop",
            {
                "inputTokens": {"total": 13, "noCache": 13, "cacheRead": 0},
                "outputTokens": {"total": 21, "text": 3, "reasoning": 18},
                "raw": {
                    "prompt_tokens": 13,
                    "completion_tokens": 21,
                    "total_tokens": 34,
                    "prompt_tokens_details": {"cached_tokens": 0},
                    "completion_tokens_details": {"reasoning_tokens": 18},
                    "prompt_cache_hit_tokens": 0,
                    "prompt_cache_miss_tokens": 13,
                },
            },
        ),
    )
    assert str(seen[0].url) == "https://api.deepseek.com/v1/chat/completions"
    body = json.loads(seen[0].content)
    assert body["max_tokens"] == 512 and "max_completion_tokens" not in body  # compatible servers


async def test_reasoning_field_and_length_finish() -> None:
    handler, _ = recorded(REASONING_FIELD_STREAM)
    parts = await collect(model_for(handler, model="Qwen/Qwen3-8B", base_url="http://localhost:8000/v1"), hello())
    assert parts == encoded(
        hp.StreamStartPart(model_id="Qwen/Qwen3-8B"),
        hp.ReasoningStartPart(id="reasoning-0"),
        hp.ReasoningDeltaPart(id="reasoning-0", delta="Short."),
        hp.ReasoningEndPart(id="reasoning-0"),
        hp.TextStartPart(id="text-1"),
        hp.TextDeltaPart(id="text-1", delta="Hi"),
        hp.TextEndPart(id="text-1"),
        finish(
            "length",
            "length",
            {
                "inputTokens": {"total": 5},
                "outputTokens": {"total": 3},
                "raw": {"prompt_tokens": 5, "total_tokens": 8, "completion_tokens": 3},
            },
        ),
    )


async def test_two_tool_calls_with_arguments_split_mid_token() -> None:
    handler, _ = recorded(TOOLS_STREAM, piece=41)
    parts = await collect(model_for(handler, model="gpt-4o"), hello())
    raw_usage = json.loads(TOOLS_STREAM.split(b"\n\n")[10][6:])["usage"]
    assert parts == encoded(
        hp.StreamStartPart(model_id="gpt-4o-2024-08-06"),
        hp.TextStartPart(id="text-0"),
        hp.TextDeltaPart(id="text-0", delta="Checking."),
        hp.TextEndPart(id="text-0"),
        hp.ToolInputStartPart(id="call_Vx1aB2", tool_name="get_weather"),
        hp.ToolInputDeltaPart(id="call_Vx1aB2", delta='{"ci'),
        hp.ToolInputDeltaPart(id="call_Vx1aB2", delta='ty": "Par'),
        hp.ToolInputDeltaPart(id="call_Vx1aB2", delta='is"}'),
        hp.ToolInputStartPart(id="call_Wy2cD3", tool_name="get_time"),
        hp.ToolInputDeltaPart(id="call_Wy2cD3", delta='{"tz": "Eu'),
        hp.ToolInputDeltaPart(id="call_Wy2cD3", delta='rope/Paris"}'),
        hp.ToolInputEndPart(id="call_Vx1aB2"),
        hp.ToolCallPart(tool_call_id="call_Vx1aB2", tool_name="get_weather", input='{"city": "Paris"}'),
        hp.ToolInputEndPart(id="call_Wy2cD3"),
        hp.ToolCallPart(tool_call_id="call_Wy2cD3", tool_name="get_time", input='{"tz": "Europe/Paris"}'),
        finish(
            "tool-calls",
            "tool_calls",
            {
                "inputTokens": {"total": 1310, "noCache": 286, "cacheRead": 1024},
                "outputTokens": {"total": 52, "text": 52, "reasoning": 0},
                "raw": raw_usage,
            },
        ),
    )


# --- the request ----------------------------------------------------------------------------------

PNG = "data:image/png;base64,iVBORw0KGgo="
PDF = "data:application/pdf;base64,JVBERi0xLjQK"


def full_request(**update: Any) -> ModelRequest:
    messages = parse_messages(
        [
            {"role": "system", "content": "Answer in French."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is in this image and this file?"},
                    {"type": "file", "mediaType": "image/png", "data": {"type": "url", "url": PNG}},
                    {
                        "type": "file",
                        "mediaType": "application/pdf",
                        "data": {"type": "url", "url": PDF},
                        "filename": "report.pdf",
                    },
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "reasoning", "text": "I should look things up."},
                    {"type": "text", "text": "Let me check."},
                    {
                        "type": "tool-call",
                        "toolCallId": "call_1",
                        "toolName": "get_weather",
                        "input": {"city": "Paris"},
                    },
                    {"type": "tool-call", "toolCallId": "call_2", "toolName": "get_time", "input": {"tz": "CET"}},
                    {"type": "tool-call", "toolCallId": "call_3", "toolName": "search", "input": {"q": "x"}},
                    {"type": "tool-call", "toolCallId": "call_4", "toolName": "delete", "input": {}},
                    {"type": "tool-approval-request", "approvalId": "appr_1", "toolCallId": "call_4"},
                ],
            },
            {
                "role": "tool",
                "content": [
                    {"type": "tool-approval-response", "approvalId": "appr_1", "approved": False},
                    {
                        "type": "tool-result",
                        "toolCallId": "call_1",
                        "toolName": "get_weather",
                        "output": {"type": "json", "value": {"tempC": 21, "sky": "clear"}},
                    },
                    {
                        "type": "tool-result",
                        "toolCallId": "call_2",
                        "toolName": "get_time",
                        "output": {"type": "error-text", "value": "Error: unknown zone CET"},
                    },
                    {
                        "type": "tool-result",
                        "toolCallId": "call_3",
                        "toolName": "search",
                        "output": {"type": "text", "value": "no hits"},
                    },
                    {
                        "type": "tool-result",
                        "toolCallId": "call_4",
                        "toolName": "delete",
                        "output": {"type": "execution-denied", "reason": "Not allowed"},
                    },
                ],
            },
            {"role": "user", "content": "Thanks"},
        ]
    )
    base = ModelRequest(
        instructions="You are terse.",
        messages=messages,
        tools=[
            ToolDefinition(
                name="get_weather",
                description="Weather of a city",
                input_schema={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            ),
            ToolDefinition(name="get_time"),
        ],
        tool_choice={"type": "tool", "toolName": "get_weather"},
        response_format={"type": "object", "properties": {"answer": {"type": "string"}}},
        settings={
            "max_output_tokens": 256,
            "temperature": 0.2,
            "top_p": 0.9,
            "stop_sequences": ["END"],
            "seed": 7,
            "top_k": 40,
            "openai": {"parallel_tool_calls": False},
        },
    )
    return base.model_copy(update=update)


async def test_request_body_maps_messages_tools_choice_and_format() -> None:
    handler, seen = recorded(TEXT_STREAM)
    parts = await collect(model_for(handler, model="gpt-4o"), full_request())
    (request,) = seen
    assert request.method == "POST" and str(request.url) == "https://api.openai.com/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.headers["content-type"] == "application/json"
    assert json.loads(request.content) == {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "system", "content": "Answer in French."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is in this image and this file?"},
                    {"type": "image_url", "image_url": {"url": PNG}},
                    {"type": "file", "file": {"filename": "report.pdf", "file_data": PDF}},
                ],
            },
            {
                "role": "assistant",
                "content": "Let me check.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    },
                    {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": '{"tz":"CET"}'}},
                    {"id": "call_3", "type": "function", "function": {"name": "search", "arguments": '{"q":"x"}'}},
                    {"id": "call_4", "type": "function", "function": {"name": "delete", "arguments": "{}"}},
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": '{"tempC":21,"sky":"clear"}'},
            {"role": "tool", "tool_call_id": "call_2", "content": "Error: unknown zone CET"},
            {"role": "tool", "tool_call_id": "call_3", "content": "no hits"},
            {"role": "tool", "tool_call_id": "call_4", "content": "Not allowed"},
            {"role": "user", "content": "Thanks"},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Weather of a city",
                    "parameters": {
                        "type": "object",
                        "properties": {"city": {"type": "string"}},
                        "required": ["city"],
                    },
                },
            },
            {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}},
        ],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": "output",
                "schema": {"type": "object", "properties": {"answer": {"type": "string"}}},
                "strict": False,
            },
        },
        "max_completion_tokens": 256,
        "temperature": 0.2,
        "top_p": 0.9,
        "stop": ["END"],
        "seed": 7,
        "parallel_tool_calls": False,
    }
    # top_k has no Chat Completions equivalent: the stream says so.
    assert parts[0] == encode_part(
        hp.StreamStartPart(model_id="gpt-4o-mini-2024-07-18", warnings=[hp.UnsupportedSettingWarning(setting="top_k")])
    )


@pytest.mark.parametrize(
    ("choice", "expected"),
    [("auto", "auto"), ("none", "none"), ("required", "required")],
)
async def test_tool_choice_mapping(choice: str, expected: str) -> None:
    handler, seen = recorded(TEXT_STREAM)
    request = full_request(tool_choice=choice, response_format=None, settings={})
    await collect(model_for(handler), request)
    body = json.loads(seen[0].content)
    assert body["tool_choice"] == expected and "response_format" not in body


async def test_no_tools_sends_no_tool_choice() -> None:
    handler, seen = recorded(TEXT_STREAM)
    await collect(model_for(handler), hello())
    body = json.loads(seen[0].content)
    assert "tools" not in body and "tool_choice" not in body
    assert body["messages"] == [{"role": "user", "content": "Say hello"}]


# --- errors ---------------------------------------------------------------------------------------


async def test_http_400_is_not_retryable_and_carries_the_message() -> None:
    body = (
        b'{\n  "error": {\n    "message": "Invalid schema for function \'get_weather\': \'strin\' is not valid '
        b'under any of the given schemas.",\n    "type": "invalid_request_error",\n    "param": '
        b'"tools[0].function.parameters",\n    "code": "invalid_function_parameters"\n  }\n}'
    )
    handler, _ = recorded(body, status=400)
    parts, error = await collect_until_error(model_for(handler), hello())
    assert parts == []
    assert not error.retryable and error.status_code == 400 and error.retry_after is None
    assert str(error) == (
        "OpenAI API error 400 (invalid_request_error): Invalid schema for function 'get_weather': "
        "'strin' is not valid under any of the given schemas."
    )


async def test_http_429_with_retry_after_ms_is_retryable() -> None:
    body = (
        b'{"error":{"message":"Rate limit reached for gpt-4o in organization org-abc on tokens per min (TPM): '
        b'Limit 30000, Used 29950, Requested 812. Please try again in 1.524s.","type":"tokens",'
        b'"param":null,"code":"rate_limit_exceeded"}}'
    )
    headers = {"retry-after-ms": "1524", "retry-after": "2", "x-ratelimit-remaining-tokens": "0"}
    handler, _ = recorded(body, status=429, headers=headers)
    _, error = await collect_until_error(model_for(handler), hello())
    assert error.retryable and error.status_code == 429 and error.retry_after == pytest.approx(1.524)
    assert "Rate limit reached for gpt-4o" in str(error)


@pytest.mark.parametrize(("retry_after", "expected"), [("7", 7.0), ("date in 30 s", 30.0)])
async def test_http_429_with_retry_after_seconds_or_date(retry_after: str, expected: float) -> None:
    if retry_after.startswith("date"):
        retry_after = email.utils.formatdate(time.time() + 30, usegmt=True)
    body = b'{"error":{"message":"Too many requests","type":"requests","param":null,"code":"rate_limit_exceeded"}}'
    handler, _ = recorded(body, status=429, headers={"retry-after": retry_after})
    _, error = await collect_until_error(model_for(handler), hello())
    assert error.retryable and error.retry_after == pytest.approx(expected, abs=2)


@pytest.mark.parametrize("status", [500, 502, 503])
async def test_server_errors_are_retryable(status: int) -> None:
    body = b'{"error":{"message":"The server had an error processing your request.","type":"server_error"}}'
    handler, _ = recorded(body, status=status)
    _, error = await collect_until_error(model_for(handler), hello())
    assert error.retryable and error.status_code == status


async def test_a_non_json_error_body_is_reported_as_text() -> None:
    handler, _ = recorded(b"<html><body>502 Bad Gateway</body></html>", status=502)
    _, error = await collect_until_error(model_for(handler), hello())
    assert error.retryable and "502 Bad Gateway" in str(error)


async def test_error_event_mid_stream_after_text() -> None:
    handler, _ = recorded(MID_STREAM_ERROR)
    parts, error = await collect_until_error(model_for(handler), hello())
    assert parts == encoded(
        hp.StreamStartPart(model_id="gpt-4o-2024-08-06"),
        hp.TextStartPart(id="text-0"),
        hp.TextDeltaPart(id="text-0", delta="Once upon"),
    )
    assert error.retryable
    assert str(error) == (
        "OpenAI stream error (server_error): The server had an error while processing your request. Sorry about that!"
    )


async def test_a_stream_cut_before_the_finish_is_retryable() -> None:
    handler, _ = recorded(TRUNCATED_STREAM)
    parts, error = await collect_until_error(model_for(handler), hello())
    assert [json.loads(p)["type"] for p in parts] == ["stream-start", "text-start", "text-delta"]
    assert error.retryable and "ended before" in str(error)


@pytest.mark.parametrize(
    "exc", [httpx.ConnectError("[Errno 111] Connection refused"), httpx.ReadTimeout("The read operation timed out")]
)
async def test_connection_errors_and_timeouts_are_retryable(exc: httpx.HTTPError) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc

    _, error = await collect_until_error(model_for(handler), hello())
    assert error.retryable and error.status_code is None


async def test_the_api_key_never_appears_in_an_error() -> None:
    body = (
        b'{"error":{"message":"Incorrect API key provided: ' + API_KEY.encode() + b". You can find your API key at "
        b'https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,'
        b'"code":"invalid_api_key"}}'
    )
    handler, _ = recorded(body, status=401)
    _, error = await collect_until_error(model_for(handler), hello())
    assert not error.retryable and error.status_code == 401
    assert API_KEY not in str(error) and "Incorrect API key provided: ***" in str(error)

    def refusing(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"proxy rejected Bearer {API_KEY}")

    _, error = await collect_until_error(model_for(refusing), hello())
    assert API_KEY not in str(error) and error.retryable


async def test_a_missing_key_fails_before_any_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    handler, seen = recorded(TEXT_STREAM)
    model = OpenAIChatModel("gpt-4o", client=httpx.AsyncClient(transport=httpx.MockTransport(handler)))
    _, error = await collect_until_error(model, hello())
    assert not error.retryable and "OPENAI_API_KEY" in str(error) and seen == []


async def test_environment_configures_key_and_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1/")
    handler, seen = recorded(TEXT_STREAM)
    model = OpenAIChatModel("llama3.2", client=httpx.AsyncClient(transport=httpx.MockTransport(handler)))
    assert model.model_id == "openai:llama3.2"
    await collect(model, hello())
    assert str(seen[0].url) == "http://127.0.0.1:11434/v1/chat/completions"
    assert seen[0].headers["authorization"] == f"Bearer {API_KEY}"


# --- more of the request --------------------------------------------------------------------------


async def test_audio_text_and_referenced_files() -> None:
    handler, seen = recorded(TEXT_STREAM)
    request = ModelRequest(
        messages=parse_messages(
            [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "file",
                            "mediaType": "audio/wav",
                            "data": {"type": "url", "url": "data:audio/wav;base64,UklGRg=="},
                        },
                        {
                            "type": "file",
                            "mediaType": "text/plain",
                            "data": {"type": "url", "url": "data:text/plain,hi%20there"},
                        },
                        {
                            "type": "file",
                            "mediaType": "application/pdf",
                            "data": {"type": "reference", "reference": {"openai": "file-abc"}},
                        },
                    ],
                }
            ]
        )
    )
    await collect(model_for(handler), request)
    assert json.loads(seen[0].content)["messages"][0]["content"] == [
        {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
        {"type": "text", "text": "hi there"},
        {"type": "file", "file": {"file_id": "file-abc"}},
    ]


async def test_an_unsupported_file_fails_without_a_request() -> None:
    handler, seen = recorded(TEXT_STREAM)
    request = ModelRequest(
        messages=parse_messages(
            [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "file",
                            "mediaType": "video/mp4",
                            "data": {"type": "url", "url": "data:video/mp4;base64,AAAA"},
                        }
                    ],
                }
            ]
        )
    )
    _, error = await collect_until_error(model_for(handler), request)
    assert not error.retryable and "video/mp4" in str(error) and seen == []


async def test_provider_settings_can_remove_a_default_field() -> None:
    handler, seen = recorded(TEXT_STREAM)
    request = hello().model_copy(update={"settings": {"openai": {"stream_options": None, "user": "u-1"}}})
    await collect(model_for(handler, base_url="http://localhost:8080/v1"), request)
    body = json.loads(seen[0].content)
    assert "stream_options" not in body and body["user"] == "u-1" and body["stream"] is True


async def test_without_a_client_one_client_per_event_loop_is_made_and_closed() -> None:
    model = OpenAIChatModel("gpt-4o", api_key=API_KEY)
    first = model._clients.get()
    assert model._clients.get() is first and not first.is_closed
    await model.aclose()
    assert first.is_closed and model._clients.get() is not first
    await model.aclose()


async def test_the_body_is_encoded_once_and_sent_as_httpx_would_send_it() -> None:
    handler, seen = recorded(TEXT_STREAM)
    model = model_for(handler, model="gpt-4o")
    request = full_request()
    await collect(model, request)
    (sent,) = seen
    content = model.request_content(request)
    assert sent.content == content == httpx.Request("POST", "https://x", json=model.request_body(request)).content
    assert sent.headers["content-length"] == str(len(content))


async def test_consecutive_calls_reuse_one_connection() -> None:
    # A real server on loopback (a MockTransport has no connections). The stream is read to its
    # end after [DONE], so httpx keeps the connection: before, each call opened a new one.
    with recorded_server(TEXT_STREAM) as (url, server):
        model = OpenAIChatModel("gpt-4o-mini", api_key=API_KEY, base_url=f"{url}/v1")
        await assert_two_calls_share_a_connection(model, server, lambda: collect(model, hello()))
