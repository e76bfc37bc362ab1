"""Amazon Bedrock AgentCore's data plane for the lite client: ``invoke_agent_runtime`` and ``stop_runtime_session``.

As botocore's ``bedrock-agentcore`` model has them (REST-JSON, signed for ``bedrock-agentcore``):

* ``InvokeAgentRuntime``: ``POST /runtimes/{agentRuntimeArn}/invocations?qualifier=...``, the ARN
  percent-encoded with nothing kept but ``-._~`` (as botocore renders a URI label), the payload as
  the body, ``runtimeSessionId`` in ``X-Amzn-Bedrock-AgentCore-Runtime-Session-Id`` (33 to 256
  characters), ``contentType`` / ``accept`` in ``Content-Type`` / ``Accept``. The response's body
  is the runtime's own answer, streamed (``text/event-stream`` for the bridge's ``attach``): it is
  returned unread as ``response`` (:class:`ResponseStream`: ``read``, ``iter_lines``, ``close``).
* ``StopRuntimeSession``: ``POST /runtimes/{agentRuntimeArn}/stopruntimesession``, the session id
  in the same header, ``{"clientToken": ...}`` as the body.

Errors are the base client's REST-JSON ``ClientError`` (``x-amzn-ErrorType``, ``message``):
``ValidationException`` (400), ``AccessDeniedException`` (403), ``ResourceNotFoundException``
(404), ``RetryableConflictException`` (409), ``RuntimeClientError`` (424: the runtime's own code
failed or answered an error), ``ThrottlingException`` (429), ``ServiceQuotaExceededException``
(402), ``InternalServerException`` (500). ``RetryableConflictException`` is retried as the model
marks it; the rest as botocore's standard mode does.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any, ClassVar
from urllib.parse import quote

from botocore.exceptions import ParamValidationError

from ._client import LiteClient
from ._transport import Response

__all__ = ["MIN_SESSION_ID", "AgentCoreClient", "ResponseStream"]

MIN_SESSION_ID = 33
MAX_SESSION_ID = 256
"""The length limits of ``runtimeSessionId`` (the model's ``SessionType``)."""

_INVOKE = frozenset({"agentRuntimeArn", "runtimeSessionId", "payload", "qualifier", "contentType", "accept"})
_STOP = frozenset({"agentRuntimeArn", "runtimeSessionId", "qualifier", "clientToken"})


class ResponseStream:
    """A streamed response body, as botocore's ``StreamingBody`` is read: ``read``, ``iter_lines``, ``close``.

    ``restart_deadline(seconds)`` gives the rest of the body that long from now (the lite
    transport's per-attempt deadline otherwise ends a long stream)."""

    def __init__(self, response: Response) -> None:
        self._response = response
        self._pending = b""

    def read(self, amt: int = 65536) -> bytes:
        """Up to ``amt`` bytes as soon as any arrived; ``b""`` at the end."""
        if self._pending:
            data, self._pending = self._pending[:amt], self._pending[amt:]
            return data
        return self._response.read(amt)

    def iter_lines(self) -> Iterator[bytes]:
        """The body's lines (without their ``\\n`` or ``\\r\\n``), each as soon as it is complete."""
        buffer = b""
        while data := self.read():
            buffer += data
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                yield line.removesuffix(b"\r")
        if buffer:
            yield buffer

    def restart_deadline(self, seconds: float) -> None:
        """Give the body's next reads ``seconds`` from now (each still waits at most the read timeout)."""
        self._response.restart_deadline(seconds)

    def close(self) -> None:
        """Stop reading (the connection goes with a body not read to its end)."""
        self._response.close()


class AgentCoreClient(LiteClient):
    """The ``bedrock-agentcore`` data-plane operations the session transport calls, as boto3 has them."""

    _modeled_retryable: ClassVar[frozenset[str]] = frozenset({"RetryableConflictException"})

    def invoke_agent_runtime(self, **kwargs: Any) -> dict[str, Any]:
        """``InvokeAgentRuntime``: ``{"response": ResponseStream, "contentType", "runtimeSessionId",
        "statusCode", "ResponseMetadata"}``; the body is left to the caller to read and close."""
        _check(kwargs, _INVOKE, ("agentRuntimeArn", "payload"))
        payload = kwargs["payload"]
        body = payload.encode() if isinstance(payload, str) else bytes(payload)
        headers = {"Content-Type": kwargs.get("contentType", "application/json")}
        if "accept" in kwargs:
            headers["Accept"] = kwargs["accept"]
        session = kwargs.get("runtimeSessionId") or str(uuid.uuid4())  # botocore fills the idempotency token so
        headers["X-Amzn-Bedrock-AgentCore-Runtime-Session-Id"] = session
        response = self._request(
            "InvokeAgentRuntime", "POST", _runtime_path(kwargs["agentRuntimeArn"], "invocations"),
            query=_qualifier(kwargs), headers=headers, body=body, stream=True,
        )  # fmt: skip
        return {
            "ResponseMetadata": self._response_metadata(response),
            "contentType": response.headers.get("content-type", ""),
            "runtimeSessionId": response.headers.get("x-amzn-bedrock-agentcore-runtime-session-id", session),
            "statusCode": response.status,
            "response": ResponseStream(response),
        }

    def stop_runtime_session(self, **kwargs: Any) -> dict[str, Any]:
        """``StopRuntimeSession``: ``{"runtimeSessionId", "statusCode", "ResponseMetadata"}``."""
        _check(kwargs, _STOP, ("agentRuntimeArn", "runtimeSessionId"))
        session = kwargs["runtimeSessionId"]
        headers = {"Content-Type": "application/json", "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id": session}
        body = json.dumps({"clientToken": kwargs.get("clientToken") or str(uuid.uuid4())}).encode()
        response = self._request(
            "StopRuntimeSession", "POST", _runtime_path(kwargs["agentRuntimeArn"], "stopruntimesession"),
            query=_qualifier(kwargs), headers=headers, body=body,
        )  # fmt: skip
        return {
            "ResponseMetadata": self._response_metadata(response),
            "runtimeSessionId": response.headers.get("x-amzn-bedrock-agentcore-runtime-session-id", session),
            "statusCode": response.status,
        }


def _check(kwargs: dict[str, Any], members: frozenset[str], required: tuple[str, ...]) -> None:
    """botocore's parameter validation for what these operations take (before anything is sent)."""
    unknown = sorted(set(kwargs) - members)
    if unknown:
        raise TypeError(f"unexpected keyword argument(s): {', '.join(unknown)}")
    for name in required:
        if name not in kwargs:
            raise ParamValidationError(report=f'Missing required parameter in input: "{name}"')
    session = kwargs.get("runtimeSessionId")
    if session is not None and not MIN_SESSION_ID <= len(session) <= MAX_SESSION_ID:
        raise ParamValidationError(
            report=f"Invalid length for parameter runtimeSessionId, value: {len(session)}, "
            f"valid min length: {MIN_SESSION_ID}, valid max length: {MAX_SESSION_ID}"
        )


def _runtime_path(arn: str, action: str) -> str:
    return f"/runtimes/{quote(arn, safe='-._~')}/{action}"


def _qualifier(kwargs: dict[str, Any]) -> list[tuple[str, str]]:
    return [("qualifier", kwargs["qualifier"])] if kwargs.get("qualifier") else []
