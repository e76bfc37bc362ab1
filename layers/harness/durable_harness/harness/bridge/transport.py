"""The session transport: what a persistent :class:`~durable_harness.harness.process.ProcessHarness`
needs of a connection to its session's bridge, and the factory a deployment replaces.

* :class:`SessionTransport`: the commands of one session (``start``, ``send``, ``attach``,
  ``status``, ``kill``, ``destroy``, ``aclose``). :class:`~.client.BridgeConnection` (a local
  bridge on loopback) satisfies it; a deployed client (AgentCore's ``InvokeAgentRuntime`` with the
  session id as ``runtimeSessionId``) must too, and must raise the same errors:
  :class:`~.client.SessionLostError` for a boot id that is no longer the session's (from any
  command given a boot id, and from iterating an attach), :class:`~.client.ProgramNotRunningError`
  for ``send`` to a program that has exited, :class:`~.client.BridgeError` for anything else
  (unreachable, refused).
* :class:`SessionAttachment`: one attach; iterating it yields :class:`~.client.NumberedLine`;
  afterwards ``cursor`` is the seq of the next line to read and ``reason`` why it ended
  (``deadline``, ``turn-end``, ``exit``, ``shutdown``; None if it broke off: read on from
  ``cursor``), ``exit_code`` the program's if it exited.
* :class:`SessionSpec`: what the harness asks a factory for (the session id, the program and its
  environment, the idle timeout and the grace).
* :data:`TransportFactory`: ``async (spec) -> SessionTransport``, finding the session's bridge or
  starting one. :func:`local_factory` (``find_or_start`` in the data folder) is the local one.

The deployment chooses with the environment variable ``SESSION_RUNTIME`` (:data:`SESSION_RUNTIME_ENV`):
``none`` (the default) or ``agentcore`` (set by the stack's ``SessionRuntime`` template parameter).
Deployed with ``none`` (``AWS_LAMBDA_FUNCTION_NAME`` is set), a persistent harness is refused at
start-up (:func:`check_session_runtime`). With ``agentcore`` the deployed side installs its
factory with :func:`set_transport_factory` before the first slice; locally (the variable unset
or ``none``, no Lambda) :func:`local_factory` of the runner's data folder is used.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ...errors import AgentConfigError
from .client import BridgeConnection, BridgeError, NumberedLine, ProgramNotRunningError, SessionLostError, find_or_start

SESSION_RUNTIME_ENV = "SESSION_RUNTIME"
"""``none`` (default) or ``agentcore``: where persistent sessions run when deployed."""
SESSION_RUNTIMES = ("none", "agentcore")


@runtime_checkable
class SessionAttachment(Protocol):
    """One attach to a boot: iterate it for the lines (see the module docstring)."""

    cursor: int
    reason: str | None
    exit_code: int | None

    def __aiter__(self) -> AsyncIterator[NumberedLine]:
        """The lines from the attach's cursor, as they come."""
        ...


@runtime_checkable
class SessionTransport(Protocol):
    """The commands of one session's bridge (:class:`~.client.BridgeConnection` satisfies it)."""

    session_id: str

    async def start(self) -> str:
        """Start the program unless it runs; the current boot id."""
        ...

    async def send(self, line: Mapping[str, Any], boot_id: str | None = None) -> None:
        """Write one line to the program's stdin (to boot ``boot_id`` only, when given)."""
        ...

    def attach(self, boot_id: str, cursor: int = 0, deadline_seconds: float = 60.0) -> SessionAttachment:
        """The lines of boot ``boot_id`` from ``cursor`` until the deadline, the end of the turn
        (the program wrote ``finish`` and nothing more is logged) or the program's exit."""
        ...

    async def status(self) -> dict[str, Any]:
        """``bootId``, ``running``, ``busy``, ``cursor`` (lines so far), ``pid``, ``exitCode``."""
        ...

    async def kill(self, boot_id: str | None = None) -> int | None:
        """Kill the program (boot ``boot_id`` only, when given); its exit code. The session stays."""
        ...

    async def destroy(self) -> None:
        """End the session: the program gets ``destroy`` (then a kill after the grace)."""
        ...

    async def aclose(self) -> None:
        """Release the client side (the session goes on)."""
        ...


@dataclass(frozen=True)
class SessionSpec:
    """What a harness asks a :data:`TransportFactory` for: the session ``session_id`` running
    ``command`` in ``cwd`` with ``env`` (the program's whole environment beyond the bridge's
    minimal one), ended after ``idle_seconds`` without use (None: never); ``grace_seconds`` is how
    long the program may take to exit after ``destroy``."""

    session_id: str
    command: Sequence[str]
    cwd: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    idle_seconds: float | None = None
    grace_seconds: float = 10.0


TransportFactory = Callable[[SessionSpec], Awaitable[SessionTransport]]
"""Find the session's bridge, or start one: ``async (spec) -> SessionTransport``."""

_factory: TransportFactory | None = None


def local_factory(data_dir: str | Path) -> TransportFactory:
    """Sessions as detached local bridges registered in ``data_dir`` (:func:`~.client.find_or_start`)."""

    async def connect(spec: SessionSpec) -> SessionTransport:
        return await find_or_start(
            data_dir, spec.session_id, spec.command, cwd=spec.cwd, env=dict(spec.env),
            idle_seconds=spec.idle_seconds, grace_seconds=spec.grace_seconds,
        )  # fmt: skip

    return connect


def set_transport_factory(factory: TransportFactory | None) -> None:
    """Install the deployment's factory (None: back to the local one)."""
    global _factory
    _factory = factory


def session_runtime(environ: Mapping[str, str] | None = None) -> str:
    """``SESSION_RUNTIME`` (``none`` when unset); AgentConfigError for any other value."""
    value = (os.environ if environ is None else environ).get(SESSION_RUNTIME_ENV, "").strip() or "none"
    if value not in SESSION_RUNTIMES:
        raise AgentConfigError(f"{SESSION_RUNTIME_ENV} must be one of {', '.join(SESSION_RUNTIMES)}, not {value!r}")
    return value


def check_session_runtime(environ: Mapping[str, str] | None = None) -> None:
    """Refuse a persistent harness deployed without a session runtime (one clear line)."""
    env = os.environ if environ is None else environ
    if env.get("AWS_LAMBDA_FUNCTION_NAME") and session_runtime(env) == "none":
        raise AgentConfigError(
            'ProcessHarness(session="persistent") needs a session runtime when deployed: '
            'deploy with the SessionRuntime parameter set to agentcore, or use session="slice"'
        )


def transport_factory(data_dir: str | Path) -> TransportFactory:
    """The factory to use: the deployment's if one is installed, else the local one in ``data_dir``."""
    return _factory if _factory is not None else local_factory(data_dir)


__all__ = [
    "SESSION_RUNTIMES",
    "SESSION_RUNTIME_ENV",
    "BridgeError",
    "ProgramNotRunningError",
    "SessionAttachment",
    "SessionLostError",
    "SessionSpec",
    "SessionTransport",
    "TransportFactory",
    "check_session_runtime",
    "local_factory",
    "session_runtime",
    "set_transport_factory",
    "transport_factory",
]


def _satisfies(connection: BridgeConnection) -> SessionTransport:
    return connection  # mypy checks here that the local connection satisfies the protocol
