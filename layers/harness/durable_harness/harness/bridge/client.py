"""The client side of a session bridge: find (or start) a session's local bridge, attach, send.

:func:`find_or_start` returns a :class:`BridgeConnection` to the session's bridge, starting one
(detached: its own session and process group, so it outlives this process) when the registry
names none alive; stale records are cleaned on the way. A connection speaks the commands of
:mod:`.app`: ``start()`` (a boot id), ``send(line)``, ``attach(boot_id, cursor, deadline)`` (an
async iterator of :class:`NumberedLine`), ``status()``, ``ping()``, ``kill()`` and ``destroy()``. A boot id
that is no longer the bridge's raises :class:`SessionLostError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import secrets
import subprocess
import sys
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from ...protocol.sse import SSEParser
from ..programs import program_env
from . import registry
from .app import DEFAULT_GRACE_SECONDS, DEFAULT_IDLE_SECONDS, SECRET_HEADER, SESSION_HEADER

START_TIMEOUT_SECONDS = 30.0
ATTACH_READ_TIMEOUT_SECONDS = 75.0
"""Longest silence on an attach stream (the bridge sends a keep-alive frame every 20 s)."""

_launched: list[subprocess.Popen[bytes]] = []  # bridges we started: reaped once they end


class BridgeError(Exception):
    """A bridge refused a command, could not be reached, or could not be started."""


class SessionLostError(BridgeError):
    """The boot a cursor belongs to is gone (the program or the bridge was restarted): resume
    from the last checkpoint. ``boot_id`` is the bridge's current boot (None: none yet)."""

    def __init__(self, answer: Mapping[str, Any]) -> None:
        super().__init__(str(answer.get("message") or "session lost"))
        self.boot_id: str | None = answer.get("bootId")
        self.expected: str | None = answer.get("expectedBootId")


class ProgramNotRunningError(BridgeError):
    """The program has exited (``exit_code``); ``start`` begins a new boot."""

    def __init__(self, answer: Mapping[str, Any]) -> None:
        super().__init__(f"the program is not running (exit code {answer.get('exitCode')})")
        self.exit_code: int | None = answer.get("exitCode")


@dataclass(frozen=True)
class NumberedLine:
    """One line the program wrote: its ``seq`` in the boot, and the JSON value (``line``) or, for
    a line that is not UTF-8 JSON, why (``invalid``)."""

    seq: int
    line: Any = None
    invalid: str | None = None


class Attachment:
    """One attach: iterate it for the lines; afterwards ``cursor`` is the seq of the next line to
    read, ``reason`` why the stream ended (``deadline``, ``turn-end``, ``exit``, ``shutdown``; None
    if it broke off) and ``exit_code`` the program's, if it exited."""

    def __init__(self, connection: BridgeConnection, boot_id: str, cursor: int, deadline_seconds: float) -> None:
        self.connection = connection
        self.boot_id = boot_id
        self.cursor = cursor
        self.deadline_seconds = deadline_seconds
        self.reason: str | None = None
        self.exit_code: int | None = None

    def __aiter__(self) -> AsyncGenerator[NumberedLine, None]:
        return self._lines()

    async def _lines(self) -> AsyncGenerator[NumberedLine, None]:
        try:
            async with contextlib.aclosing(self._stream()) as stream:  # a break here closes the stream at once
                async for line in stream:
                    yield line
        except httpx.HTTPError as exc:  # the lines received so far count: read on from self.cursor
            raise BridgeError(f"the attach to {self.connection.url} broke off: {exc!r}") from exc

    async def _stream(self) -> AsyncGenerator[NumberedLine, None]:
        command = {"action": "attach", "bootId": self.boot_id, "cursor": self.cursor,
                   "deadlineSeconds": self.deadline_seconds}  # fmt: skip
        timeout = httpx.Timeout(10.0, read=ATTACH_READ_TIMEOUT_SECONDS)
        conn = self.connection
        async with conn.http.stream("POST", conn.url + "/invocations", json=command, headers=conn.headers,
                                    timeout=timeout) as response:  # fmt: skip
            if response.status_code != 200:
                raise BridgeError(_message(await response.aread(), response.status_code))
            parser = SSEParser()
            async for chunk in response.aiter_bytes():
                for data in parser.feed(chunk):
                    if (line := self.take(json.loads(data))) is not None:
                        yield line

    def take(self, frame: Mapping[str, Any]) -> NumberedLine | None:
        """Read one frame of the attach stream: the line it carries (None for the others, which
        move ``cursor``, ``reason`` and ``exit_code``); a ``lost`` frame raises :class:`SessionLostError`."""
        kind = frame.get("frame")
        if kind == "line":
            self.cursor = frame["seq"] + 1
            return NumberedLine(frame["seq"], frame.get("line"), frame.get("invalid"))
        if kind == "lost":
            raise SessionLostError(frame)
        if kind == "exit":
            self.exit_code = frame.get("code")
        elif kind == "end":
            self.reason = frame["reason"]
            self.cursor = frame["cursor"]
        return None


class SessionCommands:
    """The commands of a session over its transport's :meth:`command`, the same for every one
    (:class:`BridgeConnection` on loopback, and AgentCore's connection)."""

    async def command(self, command: Mapping[str, Any], *, once: bool = False) -> dict[str, Any]:
        """One non-streaming command; its JSON answer. ``once``: a single attempt, for a transport
        that retries (a command that must not reach the program twice)."""
        raise NotImplementedError

    async def start(self) -> str:
        """Start the program unless it runs; the current boot id."""
        return str((await self.command({"action": "start"}))["bootId"])

    async def status(self) -> dict[str, Any]:
        """``bootId``, ``running``, ``busy``, ``cursor`` (lines so far), ``pid``, ``exitCode``."""
        return await self.command({"action": "status"})

    async def send(self, line: Mapping[str, Any], boot_id: str | None = None) -> None:
        """Write one line to the program's stdin (to boot ``boot_id`` only, when given): one attempt,
        as a send that failed on the way may have reached the program (the caller decides)."""
        command: dict[str, Any] = {"action": "send", "line": dict(line)}
        if boot_id is not None:
            command["bootId"] = boot_id
        await self.command(command, once=True)

    async def kill(self, boot_id: str | None = None) -> int | None:
        """Kill the program (boot ``boot_id`` only, when given); its exit code. The session stays:
        the next ``start()`` is a new boot."""
        command: dict[str, Any] = {"action": "kill"}
        if boot_id is not None:
            command["bootId"] = boot_id
        answer = await self.command(command)
        return answer.get("exitCode")


class BridgeConnection(SessionCommands):
    """Commands to one bridge (``url``, with the session's ``secret``)."""

    def __init__(self, url: str, secret: str | None, session_id: str, *, pid: int | None = None) -> None:
        self.url = url
        self.session_id = session_id
        self.pid = pid
        self.headers = {SESSION_HEADER: session_id, **({SECRET_HEADER: secret} if secret else {})}
        # Plain HTTP on loopback: no TLS context to build (about 50 ms per client) and no proxy from
        # the environment (HTTP_PROXY must never carry the session's secret elsewhere).
        self.http = httpx.AsyncClient(timeout=httpx.Timeout(30.0), verify=False, trust_env=False)

    async def command(self, command: Mapping[str, Any], *, once: bool = False) -> dict[str, Any]:
        """One non-streaming command; its JSON answer (a 4xx raises :class:`BridgeError`). Every
        command is one attempt on loopback (``once`` changes nothing)."""
        try:
            response = await self.http.post(self.url + "/invocations", json=dict(command), headers=self.headers)
        except httpx.HTTPError as exc:
            raise BridgeError(f"the bridge at {self.url} cannot be reached: {exc}") from exc
        if response.status_code != 200:
            raise BridgeError(_message(response.content, response.status_code))
        return checked_answer(response.json())

    async def ping(self) -> dict[str, Any]:
        """``GET /ping``: ``{"status": "Healthy" | "HealthyBusy", "time_of_last_update": ...}``."""
        try:
            response = await self.http.get(self.url + "/ping", headers=self.headers)
        except httpx.HTTPError as exc:
            raise BridgeError(f"the bridge at {self.url} cannot be reached: {exc}") from exc
        if response.status_code != 200:
            raise BridgeError(_message(response.content, response.status_code))
        answer: dict[str, Any] = response.json()
        return answer

    def attach(self, boot_id: str, cursor: int = 0, deadline_seconds: float = 60.0) -> Attachment:
        """The lines of boot ``boot_id`` from ``cursor`` as they come, until the deadline, the end
        of the turn or the program's exit."""
        return Attachment(self, boot_id, cursor, deadline_seconds)

    async def destroy(self) -> None:
        """End the session: the program gets ``destroy`` (then a kill after the grace), the bridge
        ends and its registry record and logs are removed."""
        await self.command({"action": "destroy"})

    async def aclose(self) -> None:
        """Close the HTTP client (the bridge goes on)."""
        await self.http.aclose()


def checked_answer(answer: dict[str, Any]) -> dict[str, Any]:
    """A command's JSON answer, or the error it stands for (:class:`SessionLostError`,
    :class:`ProgramNotRunningError`)."""
    if answer.get("status") == "session-lost":
        raise SessionLostError(answer)
    if answer.get("status") == "not-running":
        raise ProgramNotRunningError(answer)
    return answer


def _message(body: bytes, status: int) -> str:
    try:
        return f"bridge answered {status}: {json.loads(body)['message']}"
    except (ValueError, KeyError, TypeError):
        return f"bridge answered {status}"


def _reap() -> None:
    for proc in list(_launched):
        if proc.poll() is not None:
            _launched.remove(proc)


def find(data_dir: str | Path, session_id: str) -> BridgeConnection | None:
    """A connection to the session's registered bridge if it is alive (a stale record is cleaned)."""
    record = registry.live_record(data_dir, session_id)
    if record is None:
        return None
    return BridgeConnection(record.url, record.secret or None, session_id, pid=record.pid)


async def find_or_start(
    data_dir: str | Path,
    session_id: str,
    command: Sequence[str],
    *,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    pass_env: Sequence[str] = (),
    idle_seconds: float | None = DEFAULT_IDLE_SECONDS,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    start_timeout: float = START_TIMEOUT_SECONDS,
) -> BridgeConnection:
    """The session's bridge: the registered one if it answers, else a new detached one running
    ``command`` (with a minimal environment plus ``env`` and the variables named in ``pass_env``).
    A lock file keeps two clients from starting two bridges for one session."""
    _reap()
    fd = os.open(registry.lock_path(data_dir, session_id), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)
        connection = find(data_dir, session_id)
        if connection is not None:
            try:
                await connection.ping()
                return connection
            except BridgeError:  # alive but not answering (ending, or stuck): replace it
                await connection.aclose()
                record = registry.read_record(data_dir, session_id)
                if record is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(record.pid, 9)
                    registry.clean(data_dir, record)
        return await _launch(data_dir, session_id, command, cwd, env or {}, pass_env, idle_seconds,
                             grace_seconds, start_timeout)  # fmt: skip
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


async def _launch(
    data_dir: str | Path,
    session_id: str,
    command: Sequence[str],
    cwd: str | None,
    env: Mapping[str, str],
    pass_env: Sequence[str],
    idle_seconds: float | None,
    grace_seconds: float,
    start_timeout: float,
) -> BridgeConnection:
    secret = secrets.token_urlsafe(32)
    folder = registry.session_dir(data_dir, session_id)
    argv = [sys.executable, "-m", "durable_harness.server.bridge", "--session", session_id, "--data",
            str(data_dir), "--idle-seconds", str(idle_seconds or 0), "--grace-seconds", str(grace_seconds),
            "--config-stdin"]  # fmt: skip
    if cwd is not None:
        argv += ["--cwd", cwd]
    for name in pass_env:
        argv += ["--pass-env", name]
    with open(folder / "bridge.log", "ab") as stderr:
        proc = subprocess.Popen(  # our own module, no shell
            [*argv, "--", *command], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
            env=program_env(dict.fromkeys(("PYTHONPATH", *pass_env))), start_new_session=True, close_fds=True,
        )  # fmt: skip
    _launched.append(proc)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps({"secret": secret, "env": dict(env)}).encode() + b"\n")
    proc.stdin.close()
    try:
        ready = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), start_timeout)
    except TimeoutError:
        proc.kill()
        ready = b""
    proc.stdout.close()
    record = registry.read_record(data_dir, session_id)
    if not ready or record is None or record.pid != proc.pid:
        proc.kill()
        tail = (folder / "bridge.log").read_text(errors="replace")[-2000:] if folder.exists() else ""
        raise BridgeError(f"the bridge for session {session_id} did not start: {tail.strip() or 'no output'}")
    return BridgeConnection(record.url, secret, session_id, pid=proc.pid)
