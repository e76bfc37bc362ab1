"""The session bridge: a small process that owns one harness program for a persistent session.

It numbers every line the program writes (per *boot*: every start of the program has a new boot
id), keeps them in a log on its own disk, writes lines to the program's stdin, and lets a client
attach from a cursor and stream. Its HTTP side is the AgentCore Runtime service contract
(``POST /invocations``, ``GET /ping``), so the same code runs as a detached local process (one per
session, on loopback, with a per-session secret, registered in the data folder) and in AgentCore
Runtime. See ``docs/harness.md``, "The session bridge".

* :mod:`.app`: the bridge (ASGI) and its commands; :mod:`.program`: one boot of the program;
  :mod:`.log`: the numbered lines on disk; :mod:`.registry`: the records in the data folder;
* :mod:`.client`: :func:`find_or_start`, :class:`BridgeConnection`;
* the process that serves it: ``python -m durable_harness.server.bridge`` (:mod:`durable_harness.server.bridge`);
  its AgentCore transport: :mod:`durable_harness.aws.agentcore`.
"""

from .client import (
    Attachment,
    BridgeConnection,
    BridgeError,
    NumberedLine,
    ProgramNotRunningError,
    SessionLostError,
    find,
    find_or_start,
)

__all__ = [
    "Attachment",
    "BridgeConnection",
    "BridgeError",
    "NumberedLine",
    "ProgramNotRunningError",
    "SessionLostError",
    "find",
    "find_or_start",
]
