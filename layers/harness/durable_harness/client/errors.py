"""The errors of the chat client: every one says what went wrong in one line, without a traceback."""

from __future__ import annotations

import json
from typing import Any

import httpx

from ..errors import HarnessError


class ChatClientError(HarnessError):
    """Base class of every error the chat client raises."""


class ResponseError(ChatClientError):
    """The server answered with a non-2xx status; ``code`` and ``message`` come from its JSON error.

    The server's errors are ``{"error": {"code": "...", "message": "..."}}``; for any other body
    ``code`` is empty and ``message`` is the start of the body text.
    """

    def __init__(self, status: int, message: str, *, code: str = "", method: str = "", url: str = "") -> None:
        """An error for ``status``; ``method`` and ``url`` name the request that got it."""
        self.status = status
        self.code = code
        self.message = message
        self.method = method
        self.url = url
        label = f"HTTP {status}" + (f" ({code})" if code else "")
        super().__init__(f"{label}: {message}" if message else label)

    @classmethod
    def from_response(cls, response: httpx.Response, body: bytes) -> ResponseError:
        """The error for ``response`` (whose body, already read, is ``body``)."""
        code, message = "", ""
        try:
            data: Any = json.loads(body)
        except ValueError:
            data = None
        error = data.get("error") if isinstance(data, dict) else None
        if isinstance(error, dict):
            code = str(error.get("code") or "")
            message = str(error.get("message") or "")
        elif isinstance(error, str):
            message = error
        if not message:
            text = body.decode("utf-8", "replace").strip()
            message = " ".join(text.split())[:300] or (response.reason_phrase or "")
        request = response.request
        return cls(response.status_code, message, code=code, method=request.method, url=str(request.url))


class NetworkError(ChatClientError):
    """The server could not be reached, or the connection failed before a response arrived."""


class StreamError(ChatClientError):
    """A chat stream cannot go on: no run id in the response, or a position the client cannot resume."""


class ReconnectLimitError(StreamError):
    """The stream ended without ``finish`` and reconnecting made no progress ``attempts`` times in a row."""

    def __init__(self, message: str, *, attempts: int, start_index: int, last_error: str | None) -> None:
        """The error after ``attempts`` fruitless reconnects at ``start_index``."""
        super().__init__(message)
        self.attempts = attempts
        self.start_index = start_index
        self.last_error = last_error


def describe_transport_error(exc: httpx.RequestError, url: str) -> str:
    """A one-line description of a network failure (httpx's messages can be empty or cryptic)."""
    detail = str(exc).strip() or type(exc).__name__
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect to {url}: {detail}"
    if isinstance(exc, httpx.TimeoutException):
        return f"timed out talking to {url} ({type(exc).__name__})"
    return f"connection to {url} failed: {detail}"
