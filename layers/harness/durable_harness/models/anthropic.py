"""Anthropic's Messages API as a :class:`LanguageModel`.

One streamed ``POST {base_url}/v1/messages`` per model call. Its events become harness parts:

* ``message_start`` -> ``stream-start`` (and the input usage);
* ``content_block_start`` / ``content_block_delta`` / ``content_block_stop`` of a ``text``
  block -> ``text-*``; of a ``thinking`` block -> ``reasoning-*`` whose ``reasoning-end`` carries
  ``harnessMetadata {"anthropic": {"signature": ...}}``; of a ``redacted_thinking`` block -> an
  empty reasoning block whose end carries ``{"anthropic": {"redactedData": ...}}``; of a
  ``tool_use`` block -> ``tool-input-start`` / ``tool-input-delta`` / ``tool-input-end`` +
  ``tool-call``;
* ``message_delta`` -> stop reason and output usage; ``message_stop`` -> the ``finish`` part;
* an ``error`` event -> :class:`~durable_harness.errors.ModelError` (``overloaded_error``,
  ``api_error``, ``rate_limit_error`` and ``timeout_error`` are retryable).

The agent loop copies a ``reasoning-end``'s harness metadata into the reasoning part's
``providerOptions``, so a signed thinking block goes back to Anthropic unchanged next step.

Structured output (``response_format``) uses a forced tool, as the AI SDK does: a tool named
``json`` whose input schema is the response schema is added, ``tool_choice`` forces it (or forces
*some* tool when the agent has tools of its own), and the ``json`` tool's streamed input is
yielded as text. Anthropic rejects forced tool use while extended thinking is on.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx

from ..errors import ModelError
from ..messages import (
    AssistantMessage,
    ErrorJsonOutput,
    ErrorTextOutput,
    FilePart,
    FileReferenceData,
    ModelMessage,
    ReasoningPart,
    SystemMessage,
    TextPart,
    ToolCallContent,
    ToolMessage,
    ToolResultContent,
    UserMessage,
)
from ..protocol import harness_parts as hp
from ..wire import ProviderMetadata
from .base import ModelRequest, ModelStreamPart
from .provider_utils import (
    ApiKey,
    HttpModel,
    add_turn,
    cached_usage,
    copy_settings,
    drain,
    error_detail,
    finish_part,
    forced_tool,
    merge_provider_settings,
    parse_data_url,
    redact,
    tool_input_object,
    tool_output_text,
    tool_spec,
    unsupported_settings,
)

DEFAULT_BASE_URL = "https://api.anthropic.com"
JSON_TOOL = "json"
"""The name of the tool that carries a structured (``response_format``) answer."""

_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool-calls",
    "refusal": "content-filter",
}
_SETTINGS = {name: name for name in ("temperature", "top_p", "top_k", "stop_sequences")}
"""The standard settings sent as they are (``max_output_tokens`` is ``max_tokens``, always sent)."""
_RETRYABLE_ERRORS = frozenset({"overloaded_error", "api_error", "rate_limit_error", "timeout_error"})


class AnthropicModel(HttpModel):
    """A Claude model through the Messages API.

    ``api_key`` defaults to the Secrets Manager secret named by ``ANTHROPIC_API_KEY_SECRET_ARN``
    (as deployed), else to ``ANTHROPIC_API_KEY``, looked up at each call (see :class:`ApiKey`;
    a key is required for the default ``base_url``);
    ``max_tokens`` is used when the request's settings carry no ``max_output_tokens``. Pass
    ``client`` to share an :class:`httpx.AsyncClient`; otherwise one client per event loop is made,
    without retries. ``headers`` (e.g. ``anthropic-beta``) are added to every request.
    """

    provider = "Anthropic"
    default_base_url = DEFAULT_BASE_URL

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        client: httpx.AsyncClient | None = None,
        max_tokens: int = 4096,
        anthropic_version: str = "2023-06-01",
        headers: dict[str, str] | None = None,
    ) -> None:
        key = ApiKey("Anthropic", "ANTHROPIC_API_KEY", api_key, parameter="AnthropicApiKeySecretArn")
        super().__init__(
            model, key, base_url or os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL, client, headers
        )
        self.max_tokens = max_tokens
        self.anthropic_version = anthropic_version

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body of the Messages API request for ``request``."""
        system, messages = convert_messages(request)
        settings = request.settings
        body: dict[str, Any] = {"model": self.model, "max_tokens": settings.get("max_output_tokens") or self.max_tokens}
        if system:
            body["system"] = system
        body["messages"] = messages
        tools = [tool_spec(t, "input_schema") for t in request.tools]
        choice = request.tool_choice
        tool_choice: dict[str, Any] | None = None
        if tools:
            if isinstance(choice, dict):
                tool_choice = {"type": "tool", "name": forced_tool(choice)}
            else:
                tool_choice = {"type": {"auto": "auto", "none": "none", "required": "any"}[choice]}
        if request.response_format is not None:
            tools.append(
                {
                    "name": JSON_TOOL,
                    "description": "Respond with a JSON object.",
                    "input_schema": request.response_format,
                }
            )
            if tool_choice is None or tool_choice["type"] == "none":
                tool_choice = {"type": "tool", "name": JSON_TOOL}
            elif tool_choice["type"] == "auto":
                tool_choice = {"type": "any"}
        if tools:
            body["tools"] = tools
            body["tool_choice"] = tool_choice
        copy_settings(body, settings, _SETTINGS)
        merge_provider_settings(body, settings.get("anthropic"))
        body["stream"] = True
        return body

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamPart]:
        """Call the model once and yield its parts."""
        body = self.request_body(request)
        warnings = unsupported_settings(request.settings, {"max_output_tokens", *_SETTINGS})
        api_key = await self.api_key()
        headers = {
            "content-type": "application/json",
            "accept": "text/event-stream",
            "anthropic-version": self.anthropic_version,
            **self.headers,
        }
        if api_key:
            headers["x-api-key"] = api_key
        secrets = (api_key,)
        state = _StreamState(default_model=self.model, warnings=warnings, json_mode=request.response_format is not None)
        async with contextlib.aclosing(self.post_sse("/v1/messages", headers, secrets, json=body)) as events:
            async for data in events:
                for part in state.on_event(data, secrets):
                    yield part
                if state.stopped:
                    await drain(events)  # read to its end: the connection goes back to the pool
                    break
        if not state.stopped:
            raise ModelError("Anthropic stream ended before message_stop", retryable=True)


# --- messages -------------------------------------------------------------------------------------


def convert_messages(request: ModelRequest) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(system blocks, messages)`` of the Messages API for ``request``.

    System messages (wherever they are) join the instructions in ``system``; tool messages become
    user messages of ``tool_result`` blocks; consecutive messages of one role are merged, as the
    API requires alternating roles. Approval parts, provider-executed calls and reasoning without
    an Anthropic signature are dropped.
    """
    system: list[dict[str, Any]] = []
    if request.instructions:
        system.append({"type": "text", "text": request.instructions})
    messages: list[dict[str, Any]] = []
    for message in request.messages:
        if isinstance(message, SystemMessage):
            system.append(_with_cache({"type": "text", "text": message.content}, message.provider_options))
            continue
        role, blocks = _convert(message)
        if not blocks:
            continue
        if message.provider_options:
            blocks[-1] = _with_cache(blocks[-1], message.provider_options)
        add_turn(messages, role, blocks)
    return system, messages


def _with_cache(block: dict[str, Any], options: ProviderMetadata | None) -> dict[str, Any]:
    anthropic = (options or {}).get("anthropic") or {}
    cache = anthropic.get("cacheControl") or anthropic.get("cache_control")
    return {**block, "cache_control": cache} if cache else block


def _convert(message: ModelMessage) -> tuple[str, list[dict[str, Any]]]:
    if isinstance(message, UserMessage):
        return "user", [_with_cache(_user_block(p), p.provider_options) for p in message.content]
    if isinstance(message, AssistantMessage):
        blocks: list[dict[str, Any]] = []
        for part in message.content:
            if isinstance(part, TextPart):
                if part.text:
                    blocks.append(_with_cache({"type": "text", "text": part.text}, part.provider_options))
            elif isinstance(part, ReasoningPart):
                anthropic = (part.provider_options or {}).get("anthropic") or {}
                if anthropic.get("signature"):
                    blocks.append({"type": "thinking", "thinking": part.text, "signature": anthropic["signature"]})
                elif anthropic.get("redactedData"):
                    blocks.append({"type": "redacted_thinking", "data": anthropic["redactedData"]})
            elif isinstance(part, ToolCallContent) and not part.provider_executed:
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": part.tool_call_id,
                        "name": part.tool_name,
                        "input": tool_input_object(part.input),
                    }
                )
        return "assistant", blocks
    if isinstance(message, ToolMessage):
        results: list[dict[str, Any]] = []
        for result in message.content:
            if not isinstance(result, ToolResultContent):
                continue
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": result.tool_call_id,
                "content": tool_output_text(result.output),
            }
            if isinstance(result.output, ErrorTextOutput | ErrorJsonOutput):
                block["is_error"] = True
            results.append(_with_cache(block, result.provider_options))
        return "user", results
    raise ModelError(f"unsupported message role {getattr(message, 'role', message)!r}")


def _user_block(part: TextPart | FilePart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    media_type = part.media_type
    kind = "image" if media_type.startswith("image/") else "document"
    if isinstance(part.data, FileReferenceData):
        file_id = part.data.reference.get("anthropic")
        if file_id is None:
            raise ModelError("a file reference sent to Anthropic needs an 'anthropic' file id")
        return {"type": kind, "source": {"type": "file", "file_id": file_id}}
    url = part.data.url
    decoded = parse_data_url(url)
    if decoded is None:
        if kind == "image" or media_type == "application/pdf":
            return {"type": kind, "source": {"type": "url", "url": url}}
        raise ModelError(f"Anthropic takes {media_type} files only as data: URLs")
    if kind == "image" or media_type == "application/pdf":
        data = base64.b64encode(decoded[1]).decode("ascii")
        block: dict[str, Any] = {"type": kind, "source": {"type": "base64", "media_type": media_type, "data": data}}
    elif media_type.startswith("text/"):
        text = decoded[1].decode("utf-8", errors="replace")
        block = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": text}}
    else:
        raise ModelError(f"file media type {media_type!r} is not supported by Anthropic")
    if kind == "document" and part.filename:
        block["title"] = part.filename
    return block


# --- the stream -----------------------------------------------------------------------------------


@dataclass
class _Block:
    kind: str  # "text" | "reasoning" | "redacted" | "tool" | "json" | "other"
    id: str
    name: str = ""
    input: str = ""
    signature: str = ""
    data: str = ""


@dataclass
class _StreamState:
    default_model: str
    warnings: list[hp.CallWarning]
    json_mode: bool
    blocks: dict[int, _Block] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)
    stop_reason: str | None = None
    tool_calls: int = 0
    stopped: bool = False

    def on_event(self, data: str, secrets: Iterable[str | None]) -> list[ModelStreamPart]:
        try:
            event = json.loads(data)
        except ValueError:
            # The raw line is not quoted: it could echo anything, the API key included.
            raise ModelError(
                f"Anthropic stream sent a line that is not JSON ({len(data)} characters).", retryable=True
            ) from None
        kind = event.get("type") if isinstance(event, dict) else None
        if kind == "message_start":
            message = event.get("message") or {}
            self.usage.update(message.get("usage") or {})
            model = message.get("model") or self.default_model
            return [hp.StreamStartPart(model_id=model, warnings=self.warnings or None)]
        if kind == "content_block_start":
            return self._start(int(event.get("index", 0)), event.get("content_block") or {})
        if kind == "content_block_delta":
            return self._delta(int(event.get("index", 0)), event.get("delta") or {})
        if kind == "content_block_stop":
            return self._stop(int(event.get("index", 0)))
        if kind == "message_delta":
            self.stop_reason = (event.get("delta") or {}).get("stop_reason") or self.stop_reason
            self.usage.update({k: v for k, v in (event.get("usage") or {}).items() if v is not None})
            return []
        if kind == "message_stop":
            self.stopped = True
            return [self._finish()]
        if kind == "error":
            error_type, message = error_detail(data.encode())
            label = "Anthropic stream error" + (f" ({error_type})" if error_type else "")
            raise ModelError(redact(f"{label}: {message}", secrets), retryable=error_type in _RETRYABLE_ERRORS)
        return []  # ping and future event types

    def _start(self, index: int, content: dict[str, Any]) -> list[ModelStreamPart]:
        kind = content.get("type")
        if kind == "text":
            block = self.blocks[index] = _Block("text", f"text-{index}")
            parts: list[ModelStreamPart] = [hp.TextStartPart(id=block.id)]
            if content.get("text"):
                parts.append(hp.TextDeltaPart(id=block.id, delta=content["text"]))
            return parts
        if kind == "thinking":
            block = self.blocks[index] = _Block("reasoning", f"reasoning-{index}")
            block.signature = content.get("signature") or ""
            parts = [hp.ReasoningStartPart(id=block.id)]
            if content.get("thinking"):
                parts.append(hp.ReasoningDeltaPart(id=block.id, delta=content["thinking"]))
            return parts
        if kind == "redacted_thinking":
            block = self.blocks[index] = _Block("redacted", f"reasoning-{index}", data=content.get("data") or "")
            return [hp.ReasoningStartPart(id=block.id)]
        if kind == "tool_use":
            name = content.get("name") or ""
            if self.json_mode and name == JSON_TOOL:
                block = self.blocks[index] = _Block("json", f"text-{index}")
                return [hp.TextStartPart(id=block.id)]
            block = self.blocks[index] = _Block("tool", content.get("id") or f"toolu-{index}", name=name)
            return [hp.ToolInputStartPart(id=block.id, tool_name=name)]
        self.blocks[index] = _Block("other", str(index))  # server tools, citations, ...
        return []

    def _delta(self, index: int, delta: dict[str, Any]) -> list[ModelStreamPart]:
        block = self.blocks.get(index)
        if block is None:
            return []
        kind = delta.get("type")
        if kind == "text_delta" and block.kind == "text" and delta.get("text"):
            return [hp.TextDeltaPart(id=block.id, delta=delta["text"])]
        if kind == "thinking_delta" and block.kind == "reasoning" and delta.get("thinking"):
            return [hp.ReasoningDeltaPart(id=block.id, delta=delta["thinking"])]
        if kind == "signature_delta" and block.kind == "reasoning":
            block.signature += delta.get("signature") or ""
            return []
        if kind == "input_json_delta" and block.kind in ("tool", "json"):
            piece = delta.get("partial_json") or ""
            if not piece:
                return []
            block.input += piece
            if block.kind == "json":
                return [hp.TextDeltaPart(id=block.id, delta=piece)]
            return [hp.ToolInputDeltaPart(id=block.id, delta=piece)]
        return []

    def _stop(self, index: int) -> list[ModelStreamPart]:
        block = self.blocks.pop(index, None)
        if block is None or block.kind == "other":
            return []
        if block.kind in ("text", "json"):
            return [hp.TextEndPart(id=block.id)]
        if block.kind == "reasoning":
            meta = {"anthropic": {"signature": block.signature}} if block.signature else None
            return [hp.ReasoningEndPart(id=block.id, harness_metadata=meta)]
        if block.kind == "redacted":
            return [hp.ReasoningEndPart(id=block.id, harness_metadata={"anthropic": {"redactedData": block.data}})]
        self.tool_calls += 1
        return [
            hp.ToolInputEndPart(id=block.id),
            hp.ToolCallPart(tool_call_id=block.id, tool_name=block.name, input=block.input or "{}"),
        ]

    def _finish(self) -> hp.FinishPart:
        raw, usage = self.stop_reason, self.usage
        # No tool call of the agent's: the structured answer came as the json tool's input, a stop.
        answered = self.json_mode and not self.tool_calls and _STOP_REASONS.get(raw or "") == "tool-calls"
        total = cached_usage(
            usage, "input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens", "output_tokens"
        )
        return finish_part(raw, _STOP_REASONS, total, unified="stop" if answered else None)
