"""The session transport of a deployed stack: the bridge's commands through AgentCore's ``InvokeAgentRuntime``.

With ``SESSION_RUNTIME=agentcore`` a persistent session's bridge runs in Amazon Bedrock AgentCore
Runtime (``--agentcore``: one microVM per ``runtimeSessionId``). :class:`AgentCoreConnection` has
the interface of the bridge's own client (:mod:`durable_harness.harness.bridge.client`:
``start``, ``send``, ``attach``, ``status``, ``ping``, ``kill``, ``destroy``, ``aclose``) and
sends the same JSON commands as the payload of ``InvokeAgentRuntime`` on the runtime
``AGENTCORE_RUNTIME_ARN`` (endpoint ``AGENTCORE_RUNTIME_QUALIFIER``, default ``DEFAULT``), the
session id as ``runtimeSessionId``.

It is an AWS adapter (the bridge and the harness know nothing of AWS; :mod:`.runtime` installs it
as the session transport) built on the lite AWS client (``aws/lite/agentcore.py``: SigV4 for
``bedrock-agentcore``, botocore's retries and errors, deadlines), not boto3: the lite transport
streams a body read by read as it arrives (botocore's ``StreamingBody.read(n)`` waits for ``n``
bytes), and the functions' cold start does not pay for botocore's client. Blocking calls run in
threads (``asyncio.to_thread``).

An attach carries ``deadlineSeconds``, at which the bridge ends the stream; the client also drops
the stream :data:`ATTACH_MARGIN_SECONDS` later whatever the bridge does (an invoke can otherwise
stay open for an hour), so an attach always ends inside the slice's budget. What the errors mean
(the classes of :mod:`durable_harness.harness.bridge.client` unless named here):

* the bridge's own answers come through unchanged: a boot that is gone (the microVM was replaced
  after an idle timeout, ``maxLifetime`` or a crash: a clean filesystem, a new bridge) raises
  ``SessionLostError``, a program that exited ``ProgramNotRunningError``, a refused command
  (``RuntimeClientError``, or the runtime's 4xx) ``BridgeError``;
* throttling, quotas, AgentCore's 5xx and dropped or stalled connections:
  :class:`SessionUnavailableError` (a :class:`~durable_harness.errors.RetryableError`: the slice is
  run again from its checkpoint);
* access denied, an unknown runtime, a rejected request: :class:`SessionConfigError` (a
  :class:`~durable_harness.errors.FatalError`: retrying gives the same).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError, ParamValidationError

from ..errors import FatalError, RetryableError
from ..harness.bridge.client import (
    ATTACH_READ_TIMEOUT_SECONDS,
    Attachment,
    BridgeError,
    SessionCommands,
    checked_answer,
)
from ..harness.bridge.transport import SessionSpec, SessionTransport, TransportFactory
from ..protocol.sse import SSEParser
from . import lite
from .lite._client import THROTTLING_CODES, TRANSIENT_CODES
from .lite.agentcore import MAX_SESSION_ID, MIN_SESSION_ID, AgentCoreClient, ResponseStream

__all__ = [
    "ATTACH_MARGIN_SECONDS", "RUNTIME_ARN_ENV", "RUNTIME_QUALIFIER_ENV", "AgentCoreConnection", "SessionConfigError",
    "SessionUnavailableError", "agentcore_factory", "runtime_session_id",
]  # fmt: skip

RUNTIME_ARN_ENV = "AGENTCORE_RUNTIME_ARN"
RUNTIME_QUALIFIER_ENV = "AGENTCORE_RUNTIME_QUALIFIER"
ATTACH_MARGIN_SECONDS = 5.0
"""How long after its ``deadlineSeconds`` an attach is dropped by the client if the stream has not ended."""
COMMAND_READ_TIMEOUT_SECONDS = 30.0
"""A command's longest silence (a ``start`` in a new microVM includes its cold start)."""
MAX_ANSWER_BYTES = 1024 * 1024
"""The largest answer of a non-streaming command (they are a few hundred bytes)."""

_RETRYABLE_CODES = THROTTLING_CODES | TRANSIENT_CODES | {
    "ServiceQuotaExceededException", "RetryableConflictException", "InternalServerException",
    "ServiceUnavailableException",
}  # fmt: skip
_SERVICE_STATUS_HEADER = "x-amzn-errortype"  # set by AgentCore on its own errors, not by the runtime's code


class SessionUnavailableError(BridgeError, RetryableError):
    """AgentCore could not be reached or refused for now (throttled, a quota, a 5xx, a dropped or
    stalled connection): run the slice again from its checkpoint."""

    shown = True  # the message names the AWS error, nothing secret


class SessionConfigError(BridgeError, FatalError):
    """AgentCore refused the invoke for good (access denied, no such runtime, a bad request): the
    stack's configuration must change."""


def runtime_session_id(session_id: str) -> str:
    """The ``runtimeSessionId`` of a session: the id itself when it is 33 to 256 characters, else
    the id padded (or, over 256, replaced) with its SHA-256, so that one session always gets one id."""
    if MIN_SESSION_ID <= len(session_id) <= MAX_SESSION_ID:
        return session_id
    digest = hashlib.sha256(session_id.encode()).hexdigest()
    return f"{session_id}-{digest}" if len(session_id) < MIN_SESSION_ID else f"session-{digest}"


def _translate(exc: Exception, what: str) -> BridgeError:
    """The session transport's error for a failed call to AgentCore."""
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code, message = str(error.get("Code", "")), str(error.get("Message", ""))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        headers = exc.response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
        if code in _RETRYABLE_CODES or status >= 500:
            return SessionUnavailableError(f"{what}: AgentCore answered {code or status}: {message}")
        if code == "RuntimeClientError" or _SERVICE_STATUS_HEADER not in headers:
            # The bridge's own refusal (AgentCore relays a runtime's error as RuntimeClientError).
            return BridgeError(f"{what}: the session's bridge answered {status}: {message}")
        return SessionConfigError(f"{what}: AgentCore refused the invoke ({code}): {message}")
    if isinstance(exc, ParamValidationError):
        return SessionConfigError(f"{what}: {exc}")
    return SessionUnavailableError(f"{what}: AgentCore could not be reached: {exc}")


class AgentCoreConnection(SessionCommands):
    """Commands to one session's bridge in AgentCore Runtime (see the module's docstring)."""

    def __init__(
        self,
        runtime_arn: str,
        session_id: str,
        *,
        qualifier: str | None = "DEFAULT",
        env: Mapping[str, str] = os.environ,
    ) -> None:
        self.url = runtime_arn  # (BridgeConnection's name for where the bridge is: in messages)
        self.runtime_arn = runtime_arn
        self.session_id = session_id
        self.runtime_session_id = runtime_session_id(session_id)
        self.qualifier = qualifier
        self.pid: int | None = None  # (a microVM's process is not ours to see)
        # Commands other than send are idempotent (start starts only when nothing runs, a kill or
        # a destroy of a boot twice is the same, status and attach read): botocore's retries. A
        # send that failed on the way may have reached the program: one attempt, the caller decides.
        self._client = self._make(env, read_timeout=COMMAND_READ_TIMEOUT_SECONDS)
        self._once = self._make(env, read_timeout=COMMAND_READ_TIMEOUT_SECONDS, max_attempts=1)
        self._streams = self._make(env, read_timeout=ATTACH_READ_TIMEOUT_SECONDS)

    @staticmethod
    def _make(env: Mapping[str, str], **settings: Any) -> AgentCoreClient:
        client = lite.client("bedrock-agentcore", env=env, **settings)
        if not isinstance(client, AgentCoreClient):
            raise SessionConfigError(
                "SESSION_RUNTIME=agentcore needs AWS credentials in the environment (as Lambda sets them) "
                "and a Region of the aws or aws-cn partition"
            )
        return client

    @classmethod
    def from_env(cls, session_id: str, env: Mapping[str, str] = os.environ) -> AgentCoreConnection:
        """A connection to the runtime the stack made (``AGENTCORE_RUNTIME_ARN``, ``AGENTCORE_RUNTIME_QUALIFIER``)."""
        arn = env.get(RUNTIME_ARN_ENV, "")
        if not arn:
            raise SessionConfigError(f"SESSION_RUNTIME=agentcore needs {RUNTIME_ARN_ENV}: the runtime's ARN")
        return cls(arn, session_id, qualifier=env.get(RUNTIME_QUALIFIER_ENV) or "DEFAULT", env=env)

    # --- calls ------------------------------------------------------------------------------------

    def invoke(self, command: Mapping[str, Any], client: AgentCoreClient | None = None) -> ResponseStream:
        """``InvokeAgentRuntime`` with ``command`` as the payload (blocking): the unread response body."""
        arguments: dict[str, Any] = {
            "agentRuntimeArn": self.runtime_arn, "runtimeSessionId": self.runtime_session_id,
            "payload": json.dumps(dict(command), separators=(",", ":")).encode(),
            "contentType": "application/json",
            "accept": "text/event-stream" if command.get("action") == "attach" else "application/json",
        }  # fmt: skip
        if self.qualifier:
            arguments["qualifier"] = self.qualifier
        try:
            body: ResponseStream = (client or self._client).invoke_agent_runtime(**arguments)["response"]
        except (ClientError, BotoCoreError) as exc:
            raise _translate(exc, f"{command.get('action')} on session {self.session_id}") from exc
        return body

    def _command(self, command: Mapping[str, Any], client: AgentCoreClient | None) -> dict[str, Any]:
        body = self.invoke(command, client)
        what = f"{command.get('action')} on session {self.session_id}"
        data = bytearray()
        try:
            while chunk := body.read():
                data += chunk
                if len(data) > MAX_ANSWER_BYTES:
                    raise SessionUnavailableError(f"{what}: the answer is larger than {MAX_ANSWER_BYTES} bytes")
        except BotoCoreError as exc:
            raise _translate(exc, what) from exc
        finally:
            body.close()
        try:
            answer = json.loads(data)
        except ValueError:
            raise BridgeError(f"{what}: the answer is not JSON") from None
        if not isinstance(answer, dict):
            raise BridgeError(f"{what}: the answer is not a JSON object")
        return answer

    async def command(self, command: Mapping[str, Any], *, once: bool = False) -> dict[str, Any]:
        """One non-streaming command; its JSON answer (errors as in the module's docstring);
        ``once``: a single attempt (a command that must not reach the program twice)."""
        answer = await asyncio.to_thread(self._command, command, self._once if once else None)
        return checked_answer(answer)

    # --- BridgeConnection's interface -------------------------------------------------------------

    async def ping(self) -> dict[str, Any]:
        """``{"status": "Healthy" | "HealthyBusy"}`` from the ``status`` command: ``GET /ping`` is
        AgentCore's own (it keeps a busy session alive), not reachable through the invoke."""
        status = await self.status()
        return {"status": "HealthyBusy" if status.get("busy") else "Healthy"}

    def attach(self, boot_id: str, cursor: int = 0, deadline_seconds: float = 60.0) -> AgentCoreAttachment:
        """The lines of boot ``boot_id`` from ``cursor`` as they come, until the deadline (plus at
        most :data:`ATTACH_MARGIN_SECONDS`), the end of the turn or the program's exit."""
        return AgentCoreAttachment(self, boot_id, cursor, deadline_seconds)

    async def destroy(self) -> None:
        """End the session: ``destroy`` to the bridge (the program is told, then killed after the
        grace), then ``StopRuntimeSession`` so that the microVM ends now, not at its idle timeout."""
        await self.command({"action": "destroy"})
        await asyncio.to_thread(self._stop)

    def _stop(self) -> None:
        arguments = {"agentRuntimeArn": self.runtime_arn, "runtimeSessionId": self.runtime_session_id}
        if self.qualifier:
            arguments["qualifier"] = self.qualifier
        try:
            self._client.stop_runtime_session(**arguments)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ResourceNotFoundException":  # already ended
                raise _translate(exc, f"stop of session {self.session_id}") from exc
        except BotoCoreError as exc:
            raise _translate(exc, f"stop of session {self.session_id}") from exc

    async def aclose(self) -> None:
        """Nothing to close: the lite client's connections are pooled per thread."""


class AgentCoreAttachment(Attachment):
    """One attach through ``InvokeAgentRuntime``: the bridge's frames, read as they arrive."""

    connection: AgentCoreConnection  # type: ignore[assignment]

    def __init__(self, connection: AgentCoreConnection, boot_id: str, cursor: int, deadline_seconds: float) -> None:
        super().__init__(connection, boot_id, cursor, deadline_seconds)  # type: ignore[arg-type]

    async def _lines(self) -> AsyncGenerator[Any, None]:
        conn = self.connection
        command = {"action": "attach", "bootId": self.boot_id, "cursor": self.cursor,
                   "deadlineSeconds": self.deadline_seconds}  # fmt: skip
        what = f"attach to session {conn.session_id}"
        loop = asyncio.get_running_loop()
        hard_end = loop.time() + self.deadline_seconds + ATTACH_MARGIN_SECONDS
        body = await asyncio.to_thread(conn.invoke, command, conn._streams)
        # The lite transport's deadline becomes the attach's own: a stream still open then is dropped.
        body.restart_deadline(max(hard_end - loop.time(), 0.001))
        parser = SSEParser()
        try:
            while chunk := await asyncio.to_thread(body.read):
                for data in parser.feed(chunk):
                    if (line := self.take(json.loads(data))) is not None:
                        yield line
        except BotoCoreError as exc:
            if loop.time() >= hard_end:  # our own cap: the slice goes on from self.cursor
                self.reason = "deadline"
                return
            raise _translate(exc, f"{what} broke off") from exc
        finally:
            body.close()


def agentcore_factory(env: Mapping[str, str] = os.environ) -> TransportFactory:
    """The deployed ``TransportFactory`` (:mod:`durable_harness.harness.bridge.transport`) of
    ``SESSION_RUNTIME=agentcore``.

    The program, its environment and the idle timeout are the runtime's (packaged in its code, its
    ``EnvironmentVariables``, its lifecycle settings: ``docs/harness.md``), so of a
    ``SessionSpec`` only the session id is used: AgentCore starts the session's
    microVM, and its bridge, at the first invoke."""

    async def connect(spec: SessionSpec) -> SessionTransport:
        return AgentCoreConnection.from_env(spec.session_id, env)

    return connect


def _satisfies(connection: AgentCoreConnection) -> SessionTransport:
    return connection  # mypy checks here that the AgentCore connection satisfies the protocol
