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

The module also holds the small HTTP helpers the Anthropic provider shares (SSE reading, error
mapping, ``Retry-After`` parsing, ``data:`` URLs).
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import json
import os
import time
import weakref
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote_to_bytes

import httpx

from ..errors import ModelError
from ..ids import new_id
from ..messages import (
    AssistantMessage,
    ErrorJsonOutput,
    ErrorTextOutput,
    ExecutionDeniedOutput,
    FilePart,
    FileReferenceData,
    JsonOutput,
    ModelMessage,
    SystemMessage,
    TextOutput,
    TextPart,
    ToolCallPart,
    ToolMessage,
    ToolResultOutput,
    ToolResultPart,
    UserMessage,
)
from ..protocol import harness_parts as hp
from ..protocol.sse import SSEParser
from ..protocol.wire import compact_json
from .base import ModelRequest, ModelStreamPart

DEFAULT_BASE_URL = "https://api.openai.com/v1"

STANDARD_SETTINGS = frozenset(
    {
        "max_output_tokens",
        "temperature",
        "top_p",
        "top_k",
        "stop_sequences",
        "seed",
        "presence_penalty",
        "frequency_penalty",
    }
)
"""Provider-neutral keys of ``ModelRequest.settings``."""

PROVIDER_SETTINGS = frozenset({"openai", "anthropic", "bedrock"})
"""Keys of ``ModelRequest.settings`` holding one provider's extra request fields."""

DEFAULT_TIMEOUT = httpx.Timeout(connect=10.0, read=600.0, write=60.0, pool=30.0)
"""Timeouts of the HTTP client a provider makes for itself (long reads: reasoning can be silent)."""

# --- shared HTTP helpers --------------------------------------------------------------------------


def is_retryable_status(status: int) -> bool:
    """Whether calling again may succeed after this HTTP status (408, 409, 429, 5xx)."""
    return status in (408, 409, 429) or status >= 500


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """The server's retry hint in seconds: ``retry-after-ms``, else ``Retry-After`` (seconds or date)."""
    lower = {k.lower(): v for k, v in headers.items()}
    millis = lower.get("retry-after-ms")
    if millis:
        try:
            value = float(millis) / 1000.0
            if value >= 0:
                return value
        except ValueError:
            pass
    text = lower.get("retry-after")
    if not text:
        return None
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with every secret replaced by ``***``."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return text


def error_detail(body: bytes) -> tuple[str | None, str]:
    """``(error type, message)`` of an error body in OpenAI or Anthropic shape (or its raw text)."""
    try:
        data = json.loads(body)
    except ValueError:
        text = body.decode("utf-8", errors="replace").strip()
        return None, text[:500] or "(empty body)"
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        kind = error.get("type") or error.get("code")
        message = error.get("message")
        return (str(kind) if kind else None), str(message) if message else compact_json(error)
    if isinstance(error, str):
        return None, error
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        return None, data["message"]
    return None, compact_json(data)[:500]


def http_error(provider: str, response: httpx.Response, body: bytes, secrets: Iterable[str | None]) -> ModelError:
    """The :class:`ModelError` of a non-2xx response."""
    kind, message = error_detail(body)
    status = response.status_code
    label = f"{provider} API error {status}" + (f" ({kind})" if kind else "")
    return ModelError(
        redact(f"{label}: {message}", secrets),
        retryable=is_retryable_status(status),
        status_code=status,
        retry_after=retry_after_seconds(response.headers),
    )


def transport_error(provider: str, exc: httpx.HTTPError, secrets: Iterable[str | None]) -> ModelError:
    """The retryable :class:`ModelError` of a timeout or a failed/dropped connection."""
    what = "timed out" if isinstance(exc, httpx.TimeoutException) else "connection failed"
    detail = str(exc) or type(exc).__name__
    return ModelError(redact(f"{provider} request {what}: {detail}", secrets), retryable=True)


async def iter_sse_data(response: httpx.Response) -> AsyncIterator[str]:
    """The ``data`` of each server-sent event of a streamed response (``[DONE]`` included)."""
    parser = SSEParser(skip_done=False)
    async for chunk in response.aiter_bytes():
        for data in parser.feed(chunk):
            yield data
    for data in parser.close():
        yield data


def parse_data_url(url: str) -> tuple[str, bytes] | None:
    """``(media type, bytes)`` of a ``data:`` URL, or None for any other URL."""
    if not url.startswith("data:"):
        return None
    header, sep, payload = url[5:].partition(",")
    if not sep:
        raise ModelError("malformed data: URL in a file part")
    params = header.split(";")
    media_type = params[0] or "text/plain"
    if "base64" in params[1:]:
        try:
            return media_type, base64.b64decode(payload, validate=False)
        except ValueError as exc:
            raise ModelError(f"malformed base64 in a data: URL: {exc}") from None
    return media_type, unquote_to_bytes(payload)


def tool_output_text(output: ToolResultOutput) -> str:
    """A tool result as the text sent to a model: text as is, JSON as compact JSON text."""
    if isinstance(output, TextOutput | ErrorTextOutput):
        return output.value
    if isinstance(output, JsonOutput | ErrorJsonOutput):
        return compact_json(output.value)
    if isinstance(output, ExecutionDeniedOutput):
        return output.reason or "Tool execution denied."
    raise ModelError(f"unsupported tool output type {getattr(output, 'type', output)!r}")


def tool_input_text(value: Any) -> str:
    """A tool call's input as JSON text (a string input is already raw JSON text)."""
    return value if isinstance(value, str) else compact_json(value)


def tool_input_object(value: Any) -> dict[str, Any]:
    """A tool call's input as the JSON object Anthropic and Bedrock require (``{}`` if it is none)."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


def merge_provider_settings(body: dict[str, Any], extra: Any) -> None:
    """Merge ``settings[<provider>]`` into a request body; a ``None`` value removes that key."""
    if not isinstance(extra, dict):
        return
    for key, value in extra.items():
        if value is None:
            body.pop(key, None)
        else:
            body[key] = value


def unsupported_settings(settings: Mapping[str, Any], supported: Iterable[str]) -> list[hp.CallWarning]:
    """Warnings for the standard settings this provider ignores and for unknown keys."""
    allowed = set(supported) | PROVIDER_SETTINGS
    return [
        hp.UnsupportedSettingWarning(setting=key)
        for key, value in settings.items()
        if key not in allowed and value is not None
    ]


class ClientCache:
    """One :class:`httpx.AsyncClient` per event loop (a pool must not outlive its loop)."""

    def __init__(self) -> None:
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary()
        )

    def get(self) -> httpx.AsyncClient:
        """The client of the running loop, made on first use."""
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None or client.is_closed:
            # httpx never retries by itself (transport retries default to 0).
            client = httpx.AsyncClient(timeout=DEFAULT_TIMEOUT)
            self._clients[loop] = client
        return client

    async def aclose(self) -> None:
        """Close the running loop's client, if one was made."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()


# --- the model ------------------------------------------------------------------------------------

_FINISH_REASONS = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool-calls",
    "function_call": "tool-calls",
    "content_filter": "content-filter",
}
_CLIENT_ERROR_TYPES = frozenset(
    {"invalid_request_error", "authentication_error", "permission_error", "not_found_error", "invalid_api_key"}
)


class OpenAIChatModel:
    """A Chat Completions model of OpenAI or of any OpenAI-compatible server (``base_url``).

    ``api_key`` defaults to ``OPENAI_API_KEY`` and ``base_url`` to ``OPENAI_BASE_URL`` (else
    ``https://api.openai.com/v1``); a key is required only for the default base URL. Pass
    ``client`` to share an :class:`httpx.AsyncClient` (its timeouts apply); otherwise one client
    per event loop is made, without retries. ``headers`` are added to every request.
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        client: httpx.AsyncClient | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.model = model
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        self.headers = dict(headers or {})
        self._client = client
        self._clients = ClientCache()

    @property
    def model_id(self) -> str:
        """``"openai:<model>"``."""
        return f"openai:{self.model}"

    def __repr__(self) -> str:
        return f"OpenAIChatModel({self.model!r}, base_url={self.base_url!r})"

    async def aclose(self) -> None:
        """Close the HTTP client this model made for the running loop (a given client is left open)."""
        await self._clients.aclose()

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body of the Chat Completions request for ``request``."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": convert_messages(request),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        **({"description": t.description} if t.description else {}),
                        "parameters": t.input_schema,
                    },
                }
                for t in request.tools
            ]
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
        for ours, theirs in (
            ("temperature", "temperature"),
            ("top_p", "top_p"),
            ("stop_sequences", "stop"),
            ("seed", "seed"),
            ("presence_penalty", "presence_penalty"),
            ("frequency_penalty", "frequency_penalty"),
        ):
            if settings.get(ours) is not None:
                body[theirs] = settings[ours]
        merge_provider_settings(body, settings.get("openai"))
        return body

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamPart]:
        """Call the model once and yield its parts."""
        body = self.request_body(request)
        warnings = unsupported_settings(request.settings, STANDARD_SETTINGS - {"top_k"})
        if not self.api_key and self.base_url == DEFAULT_BASE_URL:
            raise ModelError("OpenAI API key missing: set OPENAI_API_KEY or pass api_key=")
        headers = {"content-type": "application/json", "accept": "text/event-stream", **self.headers}
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        client = self._client or self._clients.get()
        secrets = (self.api_key,)
        try:
            async with client.stream(
                "POST", f"{self.base_url}/chat/completions", json=body, headers=headers
            ) as response:
                if response.status_code >= 400:
                    raise http_error("OpenAI", response, await response.aread(), secrets)
                state = _StreamState(default_model=self.model, warnings=warnings)
                async for data in iter_sse_data(response):
                    if data == "[DONE]":
                        state.done = True
                        break
                    for part in state.on_chunk(data, secrets):
                        yield part
                for part in state.on_end():
                    yield part
        except httpx.HTTPError as exc:
            raise transport_error("OpenAI", exc, secrets) from None


def _tool_choice(choice: str | dict[str, str]) -> Any:
    if isinstance(choice, dict):
        name = choice.get("toolName") or choice.get("tool_name") or choice.get("name")
        return {"type": "function", "function": {"name": name}}
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
            if isinstance(p, ToolCallPart) and not p.provider_executed
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
            if isinstance(p, ToolResultPart)
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
            raise ModelError(f"OpenAI stream sent invalid JSON: {data[:200]}", retryable=True) from None
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
        parts = self._close_all()
        raw = self.finish_raw
        unified = _FINISH_REASONS.get(raw, "other") if raw else "other"
        parts.append(
            hp.FinishPart(
                finish_reason=hp.FinishReason(unified=unified, raw=raw),  # type: ignore[arg-type]
                total_usage=_usage(self.usage),
            )
        )
        return parts

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
