"""HTTP and message helpers the model providers share: SSE reading, error mapping, ``Retry-After``
parsing, ``data:`` URLs, key redaction, tool input/output text, settings checks, client caching,
where API keys come from (:class:`ApiKey`), and the base of the HTTP providers (:class:`HttpModel`)."""

from __future__ import annotations

import asyncio
import base64
import email.utils
import json
import logging
import os
import time
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from contextlib import suppress
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import unquote_to_bytes

from ..errors import ModelError, SecretError, SecretUnavailableError
from ..messages import (
    ErrorJsonOutput,
    ErrorTextOutput,
    ExecutionDeniedOutput,
    JsonOutput,
    TextOutput,
    ToolResultOutput,
)
from ..protocol import harness_parts as hp
from ..protocol.sse import SSEParser
from ..secretsmanager import DEFAULT_MAX_AGE, read_secret
from ..wire import compact_json

logger = logging.getLogger(__name__)

if TYPE_CHECKING:  # httpx is imported where a request is made: the Bedrock provider never needs it
    import httpx

    from .base import ToolDefinition

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

DEFAULT_TIMEOUTS: Mapping[str, float] = {"connect": 10.0, "read": 600.0, "write": 60.0, "pool": 30.0}
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
    import httpx

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


DRAIN_SECONDS = 0.25
"""The longest a model call reads its response after the protocol's last event (see :func:`drain`):
the body's end follows in the same packet or one round trip later; a server that holds the stream
open must not hold every step with it."""


async def drain(events: AsyncIterator[str], seconds: float = DRAIN_SECONDS) -> None:
    """Read what a streamed response still sends after the protocol's last event (``[DONE]``,
    ``message_stop``): the end of its chunked body, in the same packet or the next one.

    httpx hands a connection back to its pool only when the response was read to its end; one
    closed unread is closed with it, so every model call would open a new TCP (and TLS)
    connection, milliseconds on loopback and a round trip or more to a provider. Bounded by
    ``seconds`` (a server that keeps the stream open costs that connection, as before), and
    nothing read or failing here matters: the call's content is complete."""
    with suppress(TimeoutError, ModelError):
        async with asyncio.timeout(seconds):
            async for _ in events:
                pass


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


def copy_settings(target: dict[str, Any], settings: Mapping[str, Any], names: Mapping[str, str]) -> None:
    """Set the standard ``settings`` that have a value in ``target``, under the provider's ``names``."""
    target.update({theirs: settings[ours] for ours, theirs in names.items() if settings.get(ours) is not None})


def tool_spec(tool: ToolDefinition, schema_key: str, schema: Any = None) -> dict[str, Any]:
    """A tool as a provider declares it: its name, its description if it has one, and its input
    schema (or ``schema``, the provider's wrapping of it) under ``schema_key``."""
    spec: dict[str, Any] = {"name": tool.name}
    if tool.description:
        spec["description"] = tool.description
    spec[schema_key] = tool.input_schema if schema is None else schema
    return spec


def finish_part(
    raw: str | None, reasons: Mapping[str, str], usage: hp.Usage, unified: str | None = None
) -> hp.FinishPart:
    """The ``finish`` part of the provider's stop reason ``raw``, unified through ``reasons`` (else
    ``"other"``) unless ``unified`` is given."""
    unified = unified or (reasons.get(raw, "other") if raw else "other")
    return hp.FinishPart(
        finish_reason=hp.FinishReason(unified=unified, raw=raw),  # type: ignore[arg-type]
        total_usage=usage,
    )


def cached_usage(raw: dict[str, Any], fresh_key: str, read_key: str, write_key: str, output_key: str) -> hp.Usage:
    """The usage in ``raw`` of a provider that counts cache reads and writes apart from the fresh
    input tokens (Anthropic, Bedrock; the keys are its names of the counts): the input total is their sum."""
    fresh, read, write = raw.get(fresh_key), raw.get(read_key), raw.get(write_key)
    counts = [v for v in (fresh, read, write) if isinstance(v, int)]
    return hp.Usage(
        input_tokens=hp.InputTokens(
            total=sum(counts) if counts else None, no_cache=fresh, cache_read=read, cache_write=write
        ),
        output_tokens=hp.OutputTokens(total=raw.get(output_key)),
        raw=raw or None,
    )


def merge_provider_settings(body: dict[str, Any], extra: Any) -> None:
    """Merge ``settings[<provider>]`` into a request body; a ``None`` value removes that key."""
    if not isinstance(extra, dict):
        return
    for key, value in extra.items():
        if value is None:
            body.pop(key, None)
        else:
            body[key] = value


def forced_tool(choice: Mapping[str, str]) -> str | None:
    """The tool a ``tool_choice`` object forces: its ``toolName`` (the AI SDK's), ``tool_name`` or ``name``."""
    return choice.get("toolName") or choice.get("tool_name") or choice.get("name")


def add_turn(messages: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    """Append ``blocks`` as a ``role`` message, or to the last message when it has that role (the
    Messages and Converse APIs want the roles to alternate)."""
    if messages and messages[-1]["role"] == role:
        messages[-1]["content"] += blocks
    else:
        messages.append({"role": role, "content": blocks})


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
        import httpx

        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None or client.is_closed:
            # httpx never retries by itself (transport retries default to 0).
            client = httpx.AsyncClient(timeout=httpx.Timeout(**DEFAULT_TIMEOUTS))
            self._clients[loop] = client
        return client

    async def aclose(self) -> None:
        """Close the running loop's client, if one was made."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()


# --- API keys -------------------------------------------------------------------------------------


class ApiKey:
    """A provider's API key, looked up at each model call (not when the model is made).

    In order: the key given to the model (``api_key=``); the Secrets Manager secret whose ARN is in
    ``<env_var>_SECRET_ARN`` (deployed: the template's ``<Provider>ApiKeySecretArn``), read through
    :func:`~durable_harness.secretsmanager.read_secret` and cached for ``max_age`` seconds, so a
    rotated key is picked up without a redeploy; the environment variable ``env_var`` (local runs).

    The secret holds the key itself as plain text. The key is never logged, and ``repr`` never
    shows it; reading failures become :class:`ModelError`, retryable when Secrets Manager was
    throttled or unreachable.
    """

    def __init__(
        self, provider: str, env_var: str, value: str | None = None, *, parameter: str, max_age: int = DEFAULT_MAX_AGE
    ) -> None:
        self.provider = provider
        self.env_var = env_var
        self.parameter = parameter
        self.max_age = max_age
        self._value = value

    def __repr__(self) -> str:
        return f"ApiKey({self.provider!r}, env_var={self.env_var!r})"

    @property
    def secret_env_var(self) -> str:
        """The variable naming the secret that holds the key (``OPENAI_API_KEY_SECRET_ARN``, ...)."""
        return f"{self.env_var}_SECRET_ARN"

    def missing(self) -> ModelError:
        """The error of a call that needs a key and has none."""
        return ModelError(
            f"{self.provider} API key missing: set {self.env_var}, or {self.secret_env_var} to a Secrets Manager "
            f"secret holding it (deployed: the template's {self.parameter}), or pass api_key="
        )

    async def aget(self) -> str | None:
        """:meth:`get`, off the event loop when it may call Secrets Manager."""
        if self._value is None and os.environ.get(self.secret_env_var, "").strip():
            return await asyncio.to_thread(self.get)
        return self.get()

    def get(self) -> str | None:
        """The key, or None when none is configured."""
        if self._value is not None:
            return self._value or None
        secret_id = os.environ.get(self.secret_env_var, "").strip()
        if not secret_id:
            return os.environ.get(self.env_var) or None
        where = f"{self.provider} API key: the Secrets Manager secret in {self.secret_env_var}"
        try:
            key = read_secret(secret_id, max_age=self.max_age).strip()
        except SecretUnavailableError as exc:
            logger.warning("reading the %s API key failed: %s", self.provider, exc)
            raise ModelError(f"{where} could not be read now ({exc.code}).", retryable=True) from None
        except SecretError as exc:
            logger.warning("reading the %s API key failed: %s", self.provider, exc)
            raise ModelError(
                f"{where} could not be read ({exc.code}): check that the secret exists in this region and that "
                f"this function may read it (the template's {self.parameter} grants it)."
            ) from None
        if not key:
            raise ModelError(f"{where} is empty: store the key itself as its value.")
        if key.startswith("{"):
            # Never quoted: the JSON may well hold the key.
            raise ModelError(f"{where} holds JSON: store the key itself as its value, as plain text.")
        return key


# --- the HTTP providers' base ---------------------------------------------------------------------


class HttpModel:
    """What the HTTP model providers share: the model name, the API key (:class:`ApiKey`), the base
    URL, the headers added to every request, the HTTP client (given, or one per event loop without
    retries), and the streamed POST whose errors become :class:`ModelError` with the key redacted."""

    provider: ClassVar[str]
    """The provider's name in errors (``"OpenAI"``); lower-cased, the prefix of :attr:`model_id`."""
    default_base_url: ClassVar[str]
    """The provider's own API: calling it needs a key."""

    def __init__(
        self, model: str, api_key: ApiKey, base_url: str, client: httpx.AsyncClient | None,
        headers: dict[str, str] | None,
    ) -> None:  # fmt: skip
        self.model = model
        self._api_key = api_key
        self.base_url = base_url.rstrip("/")
        self.headers = dict(headers or {})
        self._client = client
        self._clients = ClientCache()

    @property
    def model_id(self) -> str:
        """``"<provider>:<model>"``, e.g. ``"openai:gpt-4o"``."""
        return f"{self.provider.lower()}:{self.model}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.model!r}, base_url={self.base_url!r})"

    async def aclose(self) -> None:
        """Close the HTTP client this model made for the running loop (a given client is left open)."""
        await self._clients.aclose()

    async def api_key(self) -> str | None:
        """The key of this call; :class:`ModelError` when the provider's own API would get none."""
        api_key = await self._api_key.aget()
        if not api_key and self.base_url == self.default_base_url:
            raise self._api_key.missing()
        return api_key

    async def post_sse(
        self, path: str, headers: dict[str, str], secrets: tuple[str | None, ...], **body: Any
    ) -> AsyncGenerator[str, None]:
        """The ``data`` of each event of the streamed ``POST {base_url}{path}`` (``body``: httpx's
        ``json=`` or ``content=``). Read it inside :func:`contextlib.aclosing`, so that stopping
        early closes the response."""
        import httpx

        client = self._client or self._clients.get()
        try:
            async with client.stream("POST", f"{self.base_url}{path}", headers=headers, **body) as response:
                if response.status_code >= 400:
                    raise http_error(self.provider, response, await response.aread(), secrets)
                async for data in iter_sse_data(response):
                    yield data
        except httpx.HTTPError as exc:
            raise transport_error(self.provider, exc, secrets) from None
