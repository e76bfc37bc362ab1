"""OpenAI Chat Completions (and any OpenAI-compatible server) as a :class:`LanguageModel`.

One streamed ``POST {base_url}/chat/completions`` per model call, with ``stream: true`` and
``stream_options.include_usage``. The SSE ``data:`` chunks become harness stream parts:

* ``delta.content`` (and ``delta.refusal``) -> ``text-start`` / ``text-delta`` / ``text-end``;
* ``delta.reasoning_content`` or ``delta.reasoning`` (DeepSeek, vLLM, OpenRouter, ...) ->
  ``reasoning-*`` parts;
* ``delta.tool_calls[index]`` -> ``tool-input-start`` at a call's first delta, ``tool-input-delta``
  for each argument piece, then ``tool-input-end`` + ``tool-call`` when the choice finishes;
* ``finish_reason`` and the trailing ``usage`` chunk -> one ``finish`` part.

Errors raise :class:`~durable_harness.errors.ModelError` (retryable for 408/409/429/5xx, timeouts
and dropped connections; ``retry_after`` from ``retry-after-ms`` / ``Retry-After``). The provider
never retries by itself. The API key is sent only in the ``Authorization`` header and is
redacted from every error message.

The HTTP helpers shared with the other providers live in :mod:`.provider_utils`.
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
from ..ids import new_id
from ..messages import (
    AssistantMessage,
    FilePart,
    FileReferenceData,
    ModelMessage,
    SystemMessage,
    TextPart,
    ToolCallContent,
    ToolMessage,
    ToolResultContent,
    UserMessage,
)
from ..protocol import harness_parts as hp
from .base import ModelRequest, ModelStreamPart
from .provider_utils import (
    STANDARD_SETTINGS,
    ApiKey,
    HttpModel,
    copy_settings,
    drain,
    error_detail,
    finish_part,
    forced_tool,
    merge_provider_settings,
    parse_data_url,
    redact,
    tool_input_text,
    tool_output_text,
    tool_spec,
    unsupported_settings,
)

DEFAULT_BASE_URL = "https://api.openai.com/v1"

_FINISH_REASONS = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool-calls",
    "function_call": "tool-calls",
    "content_filter": "content-filter",
}
_SETTINGS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "stop_sequences": "stop",
    "seed": "seed",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
}
"""The standard settings sent as they are, by their Chat Completions names (``max_output_tokens``
is sent too, under a name that depends on the server)."""
_CLIENT_ERROR_TYPES = frozenset(
    {"invalid_request_error", "authentication_error", "permission_error", "not_found_error", "invalid_api_key"}
)


class OpenAIChatModel(HttpModel):
    """A Chat Completions model of OpenAI or of any OpenAI-compatible server (``base_url``).

    ``api_key`` defaults to the Secrets Manager secret named by ``OPENAI_API_KEY_SECRET_ARN`` (as
    deployed), else to ``OPENAI_API_KEY``, looked up at each call (see :class:`ApiKey`);
    ``base_url`` defaults to ``OPENAI_BASE_URL`` (else ``https://api.openai.com/v1``). A key is
    required only for the default base URL. Pass
    ``client`` to share an :class:`httpx.AsyncClient` (its timeouts apply); otherwise one client
    per event loop is made, without retries. ``headers`` are added to every request.
    """

    provider = "OpenAI"
    default_base_url = DEFAULT_BASE_URL

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        client: httpx.AsyncClient | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        key = ApiKey("OpenAI", "OPENAI_API_KEY", api_key, parameter="OpenAIApiKeySecretArn")
        super().__init__(model, key, base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL, client, headers)

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body of the Chat Completions request for ``request``."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": convert_messages(request),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            body["tools"] = [{"type": "function", "function": tool_spec(t, "parameters")} for t in request.tools]
            body["tool_choice"] = _tool_choice(request.tool_choice)
        if request.response_format is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "output", "schema": request.response_format, "strict": False},
            }
        settings = request.settings
        if settings.get("max_output_tokens") is not None:
            key = "max_completion_tokens" if self.base_url == DEFAULT_BASE_URL else "max_tokens"
            body[key] = settings["max_output_tokens"]
        copy_settings(body, settings, _SETTINGS)
        merge_provider_settings(body, settings.get("openai"))
        return body

    def request_content(self, request: ModelRequest) -> bytes:
        """The request's body as sent: :meth:`request_body` in compact UTF-8 JSON (as httpx writes
        ``json=``), encoded once here so that what a step spends encoding its request is one call."""
        body = json.dumps(self.request_body(request), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        return body.encode("utf-8")

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamPart]:
        """Call the model once and yield its parts."""
        content = self.request_content(request)
        warnings = unsupported_settings(request.settings, STANDARD_SETTINGS - {"top_k"})
        api_key = await self.api_key()
        headers = {"content-type": "application/json", "accept": "text/event-stream", **self.headers}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        secrets = (api_key,)
        state = _StreamState(default_model=self.model, warnings=warnings)
        async with contextlib.aclosing(self.post_sse("/chat/completions", headers, secrets, content=content)) as events:
            async for data in events:
                if data == "[DONE]":
                    state.done = True
                    await drain(events)  # read to its end: the connection goes back to the pool
                    break
                for part in state.on_chunk(data, secrets):
                    yield part
        for part in state.on_end():
            yield part


def _tool_choice(choice: str | dict[str, str]) -> Any:
    if isinstance(choice, dict):
        return {"type": "function", "function": {"name": forced_tool(choice)}}
    return choice


# --- messages -------------------------------------------------------------------------------------


def convert_messages(request: ModelRequest) -> list[dict[str, Any]]:
    """Model messages as Chat Completions messages (approval parts dropped)."""
    out: list[dict[str, Any]] = []
    if request.instructions:
        out.append({"role": "system", "content": request.instructions})
    for message in request.messages:
        out += _convert(message)
    return out


def _convert(message: ModelMessage) -> list[dict[str, Any]]:
    if isinstance(message, SystemMessage):
        return [{"role": "system", "content": message.content}]
    if isinstance(message, UserMessage):
        if len(message.content) == 1 and isinstance(message.content[0], TextPart):
            return [{"role": "user", "content": message.content[0].text}]
        return [{"role": "user", "content": [_user_part(p) for p in message.content]}]
    if isinstance(message, AssistantMessage):
        text = "".join(p.text for p in message.content if isinstance(p, TextPart))
        calls = [
            {
                "id": p.tool_call_id,
                "type": "function",
                "function": {"name": p.tool_name, "arguments": tool_input_text(p.input)},
            }
            for p in message.content
            if isinstance(p, ToolCallContent) and not p.provider_executed
        ]
        if not text and not calls:
            return []  # reasoning, files and approval requests are not sent back
        result: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            result["tool_calls"] = calls
        return [result]
    if isinstance(message, ToolMessage):
        return [
            {"role": "tool", "tool_call_id": p.tool_call_id, "content": tool_output_text(p.output)}
            for p in message.content
            if isinstance(p, ToolResultContent)
        ]
    raise ModelError(f"unsupported message role {getattr(message, 'role', message)!r}")


_AUDIO_FORMATS = {"audio/wav": "wav", "audio/x-wav": "wav", "audio/mpeg": "mp3", "audio/mp3": "mp3"}


def _user_part(part: TextPart | FilePart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    media_type = part.media_type
    if isinstance(part.data, FileReferenceData):
        file_id = part.data.reference.get("openai")
        if file_id is None:
            raise ModelError("a file reference sent to OpenAI needs an 'openai' file id")
        if media_type.startswith("image/"):
            return {"type": "image_url", "image_url": {"url": file_id}}
        return {"type": "file", "file": {"file_id": file_id}}
    url = part.data.url
    if media_type.startswith("image/"):
        image: dict[str, Any] = {"url": url}
        detail = (part.provider_options or {}).get("openai", {}).get("imageDetail")
        if detail:
            image["detail"] = detail
        return {"type": "image_url", "image_url": image}
    decoded = parse_data_url(url)
    if decoded is None:
        raise ModelError(f"OpenAI takes {media_type} files only as data: URLs")
    if media_type == "application/pdf":
        return {"type": "file", "file": {"filename": part.filename or "document.pdf", "file_data": url}}
    if media_type in _AUDIO_FORMATS:
        data = base64.b64encode(decoded[1]).decode("ascii")
        return {"type": "input_audio", "input_audio": {"data": data, "format": _AUDIO_FORMATS[media_type]}}
    if media_type.startswith("text/"):
        return {"type": "text", "text": decoded[1].decode("utf-8", errors="replace")}
    raise ModelError(f"file media type {media_type!r} is not supported by OpenAI chat completions")


# --- the stream -----------------------------------------------------------------------------------


@dataclass
class _Call:
    id: str
    name: str | None
    arguments: str = ""
    started: bool = False
    pending: list[str] = field(default_factory=list)


@dataclass
class _StreamState:
    default_model: str
    warnings: list[hp.CallWarning]
    started: bool = False
    done: bool = False
    open_kind: str | None = None  # "text" | "reasoning"
    open_id: str = ""
    blocks: int = 0
    calls: dict[Any, _Call] = field(default_factory=dict)
    finish_raw: str | None = None
    finished_calls: bool = False
    usage: dict[str, Any] | None = None

    def on_chunk(self, data: str, secrets: Iterable[str | None]) -> list[ModelStreamPart]:
        try:
            chunk = json.loads(data)
        except ValueError:
            # The raw line is not quoted: it could echo anything, the API key included.
            raise ModelError(
                f"OpenAI stream sent a line that is not JSON ({len(data)} characters).", retryable=True
            ) from None
        if not isinstance(chunk, dict):
            return []
        error = chunk.get("error")
        if error:
            kind, message = error_detail(json.dumps({"error": error}).encode())
            retryable = kind not in _CLIENT_ERROR_TYPES
            label = "OpenAI stream error" + (f" ({kind})" if kind else "")
            raise ModelError(redact(f"{label}: {message}", secrets), retryable=retryable)
        parts: list[ModelStreamPart] = []
        if not self.started:
            self.started = True
            model = chunk.get("model") or self.default_model
            parts.append(hp.StreamStartPart(model_id=model, warnings=self.warnings or None))
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                parts += self._block("reasoning", reasoning)
            for key in ("content", "refusal"):
                piece = delta.get(key)
                if isinstance(piece, str) and piece:
                    parts += self._block("text", piece)
            for tool_delta in delta.get("tool_calls") or []:
                parts += self._tool_delta(tool_delta)
            if choice.get("finish_reason"):
                self.finish_raw = choice["finish_reason"]
                parts += self._close_all()
        return parts

    def on_end(self) -> list[ModelStreamPart]:
        if not self.done and self.finish_raw is None:
            raise ModelError("OpenAI stream ended before the response finished", retryable=True)
        return [*self._close_all(), finish_part(self.finish_raw, _FINISH_REASONS, _usage(self.usage))]

    def _close_open(self) -> list[ModelStreamPart]:
        if self.open_kind is None:
            return []
        kind, self.open_kind = self.open_kind, None
        if kind == "text":
            return [hp.TextEndPart(id=self.open_id)]
        return [hp.ReasoningEndPart(id=self.open_id)]

    def _block(self, kind: str, delta: str) -> list[ModelStreamPart]:
        parts: list[ModelStreamPart] = []
        if self.open_kind != kind:
            parts += self._close_open()
            self.open_kind, self.open_id = kind, f"{kind}-{self.blocks}"
            self.blocks += 1
            parts.append(
                hp.TextStartPart(id=self.open_id) if kind == "text" else hp.ReasoningStartPart(id=self.open_id)
            )
        if kind == "text":
            parts.append(hp.TextDeltaPart(id=self.open_id, delta=delta))
        else:
            parts.append(hp.ReasoningDeltaPart(id=self.open_id, delta=delta))
        return parts

    def _tool_delta(self, tool_delta: Any) -> list[ModelStreamPart]:
        if not isinstance(tool_delta, dict):
            return []
        function = tool_delta.get("function") or {}
        key = tool_delta.get("index", tool_delta.get("id"))
        call = self.calls.get(key)
        call_id = tool_delta.get("id")
        if call is not None and call_id and call_id != call.id:
            key, call = (key, call_id), None  # a server that reuses an index for a new call
        parts: list[ModelStreamPart] = []
        if call is None:
            parts += self._close_open()
            call = _Call(id=call_id or new_id("call"), name=function.get("name"))
            self.calls[key] = call
        elif not call.name and function.get("name"):
            call.name = function["name"]
        pieces = function.get("arguments")
        if isinstance(pieces, str) and pieces:
            call.arguments += pieces
            call.pending.append(pieces)
        if call.name and not call.started:
            call.started = True
            parts.append(hp.ToolInputStartPart(id=call.id, tool_name=call.name))
        if call.started:
            parts += [hp.ToolInputDeltaPart(id=call.id, delta=piece) for piece in call.pending]
            call.pending = []
        return parts

    def _close_all(self) -> list[ModelStreamPart]:
        parts = self._close_open()
        if self.finished_calls:
            return parts
        self.finished_calls = True
        for call in self.calls.values():
            if not call.name:
                raise ModelError("OpenAI stream sent a tool call without a function name", retryable=True)
            parts.append(hp.ToolInputEndPart(id=call.id))
            parts.append(hp.ToolCallPart(tool_call_id=call.id, tool_name=call.name, input=call.arguments or "{}"))
        return parts


def _usage(raw: dict[str, Any] | None) -> hp.Usage:
    if not raw:
        return hp.Usage(input_tokens=hp.InputTokens(), output_tokens=hp.OutputTokens())
    prompt = raw.get("prompt_tokens")
    completion = raw.get("completion_tokens")
    cached = (raw.get("prompt_tokens_details") or {}).get("cached_tokens")
    reasoning = (raw.get("completion_tokens_details") or {}).get("reasoning_tokens")
    return hp.Usage(
        input_tokens=hp.InputTokens(
            total=prompt,
            no_cache=prompt - cached if isinstance(prompt, int) and isinstance(cached, int) else None,
            cache_read=cached,
        ),
        output_tokens=hp.OutputTokens(
            total=completion,
            text=completion - reasoning if isinstance(completion, int) and isinstance(reasoning, int) else None,
            reasoning=reasoning,
        ),
        raw=raw,
    )
