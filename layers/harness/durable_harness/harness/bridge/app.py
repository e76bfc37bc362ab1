"""The bridge's HTTP side: the AgentCore Runtime service contract over one harness program.

``GET /ping`` answers ``{"status": "Healthy"}`` or, while a turn runs, ``{"status": "HealthyBusy"}``,
with ``time_of_last_update`` (Unix seconds) the time of the last *change* of that status.
``POST /invocations`` takes one JSON command (``action``: ``start``, ``send``, ``attach``,
``status``, ``kill``, ``destroy``; see ``docs/harness.md``, "The session bridge"); ``attach`` answers a
``text/event-stream`` of frames, the others one JSON object. Every request must carry the
session's secret (``X-Bridge-Secret``, compared in constant time; 401 otherwise) unless the bridge
runs without one (in AgentCore, where IAM guards the invoke). A request whose
``X-Amzn-Bedrock-AgentCore-Runtime-Session-Id`` names another session is refused (400).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..programs import process_start_time, program_env
from . import registry
from .program import Boot

logger = logging.getLogger(__name__)

SECRET_HEADER = "X-Bridge-Secret"
SESSION_HEADER = "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id"
MAX_BODY_BYTES = 16 * 1024 * 1024
MAX_DEADLINE_SECONDS = 3600  # (attach's deadlineSeconds)
KEEPALIVE_SECONDS = 20.0
"""A keep-alive frame after this much silence (botocore's read timeout is 60 s)."""
DEFAULT_IDLE_SECONDS = 900.0
DEFAULT_GRACE_SECONDS = 10.0

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class BadRequest(Exception):
    """A request to answer with a 4xx and a message that says what to fix."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class BridgeConfig:
    """How a bridge runs its program (see the CLI, ``python -m durable_harness.server.bridge --help``).

    ``data_dir`` set: the bridge registers in it and keeps its logs there (locally; needs
    ``session_id``); None: logs in a temporary folder, no registry (AgentCore). ``secret`` None:
    requests need no secret (only where something else guards them). ``idle_seconds`` None or 0:
    no idle timeout. ``clock`` gives ``time_of_last_update`` (injectable for tests).
    """

    command: list[str]
    session_id: str | None = None
    data_dir: Path | None = None
    secret: str | None = None
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    pass_env: tuple[str, ...] = ()
    idle_seconds: float | None = DEFAULT_IDLE_SECONDS
    grace_seconds: float = DEFAULT_GRACE_SECONDS
    keepalive_seconds: float = KEEPALIVE_SECONDS
    clock: Callable[[], float] = time.time


class Bridge:
    """One session's bridge: an ASGI app that owns the program's boots (serve it with
    :func:`lambda_fastpath.httpd.serve`; ``stopped`` is set when the bridge has ended)."""

    def __init__(self, config: BridgeConfig) -> None:
        if not config.command:
            raise ValueError("the bridge needs the program's command")
        if config.data_dir is not None and not config.session_id:
            raise ValueError("a bridge that registers in a data folder needs the session id")
        self.config = config
        self.session_id = config.session_id
        self.boot: Boot | None = None
        self.address: tuple[str, int] | None = None
        self.stopped = asyncio.Event()
        self.stopping = False
        self._wakeup = asyncio.Event()
        self._start_lock = asyncio.Lock()
        self._attached = 0
        self._last_activity = time.monotonic()
        self._status = "Healthy"
        self._status_time = int(config.clock())
        self._watchdog: asyncio.Task[None] | None = None
        if config.data_dir is not None:
            assert config.session_id is not None
            self.log_dir = registry.session_dir(config.data_dir, config.session_id)
        else:
            self.log_dir = Path(tempfile.mkdtemp(prefix="bridge-"))

    # --- state ------------------------------------------------------------------------------------

    @property
    def attached(self) -> int:
        """How many attaches are streaming now."""
        return self._attached

    @property
    def busy(self) -> bool:
        """Whether a turn is running (``/ping`` answers ``HealthyBusy``)."""
        return self.boot is not None and self.boot.busy

    def changed(self) -> None:
        """Wake every waiter (attaches, the idle watchdog); note a change of the ping status."""
        status = "HealthyBusy" if self.busy else "Healthy"
        if status != self._status:  # time_of_last_update moves only when the status really changes
            self._status, self._status_time = status, int(self.config.clock())
        self._last_activity = time.monotonic()
        wakeup, self._wakeup = self._wakeup, asyncio.Event()
        wakeup.set()

    def ping(self) -> dict[str, Any]:
        """The ``/ping`` answer."""
        return {"status": self._status, "time_of_last_update": self._status_time}

    def listening(self, address: tuple[str, int]) -> None:
        """The server listens at ``address``: register (when there is a data folder)."""
        self.address = address
        self._register()

    def _register(self) -> None:
        if self.config.data_dir is None or self.address is None or self.stopping:
            return
        assert self.session_id is not None
        boot = self.boot
        program_pid = boot.pid if boot is not None and boot.running else None
        record = registry.BridgeRecord(
            session_id=self.session_id, pid=os.getpid(), start_time=process_start_time(os.getpid()) or 0,
            host=self.address[0], port=self.address[1], secret=self.config.secret or "",
            boot_id=boot.boot_id if boot is not None else None, program_pid=program_pid,
            program_start_time=process_start_time(program_pid) if program_pid else None,
        )  # fmt: skip
        registry.write_record(self.config.data_dir, record)

    # --- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> dict[str, Any]:
        """Start the program unless it runs: a new boot (the ``start`` command's answer)."""
        async with self._start_lock:
            if self.boot is not None and self.boot.running:
                return {"status": "running", "bootId": self.boot.boot_id, "pid": self.boot.pid}
            if self.stopping:
                raise BadRequest(409, "the bridge is ending; find or start a new one")
            boot = Boot(self.log_dir, self.changed)
            config = self.config
            try:
                env = program_env({**dict.fromkeys(config.pass_env), **config.env})
                await boot.spawn(config.command, config.cwd, env)
            except OSError as exc:
                boot.retire()
                raise BadRequest(422, f"cannot start the harness program {config.command[0]!r}: {exc}") from None
            old, self.boot = self.boot, boot
            if old is not None:
                old.retire()  # its log goes once its last reader is done; attaches to it now get "lost"
            self._register()
            self.changed()
            logger.info("program %s started (boot %s)", boot.pid, boot.boot_id)
            return {"status": "started", "bootId": boot.boot_id, "pid": boot.pid}

    async def shutdown(self, reason: str) -> None:
        """End the program (``destroy``, the grace, then a kill), the attaches, the registry record
        and the logs; then set ``stopped``."""
        if self.stopping:
            await self.stopped.wait()
            return
        self.stopping = True
        logger.info("bridge ending (%s)", reason)
        if self.boot is not None:
            await self.boot.end(self.config.grace_seconds)
        self.changed()
        with contextlib.suppress(TimeoutError):  # let the attaches send their last frames
            await asyncio.wait_for(self._detached(), 5.0)
        if self.boot is not None:
            self.boot.retire()
        if self.config.data_dir is not None and self.session_id is not None:
            registry.remove_record(self.config.data_dir, self.session_id, pid=os.getpid())
        else:
            shutil.rmtree(self.log_dir, ignore_errors=True)
        self.stopped.set()

    async def _detached(self) -> None:
        while self._attached:
            await self._wakeup.wait()

    async def _idle_watch(self) -> None:
        """End the bridge after ``idle_seconds`` with no client attached, no turn and no command."""
        idle = self.config.idle_seconds
        if not idle:
            return
        while not self.stopping:
            now = time.monotonic()
            if self._attached or self.busy:
                self._last_activity = now
            remaining = self._last_activity + idle - now
            if remaining <= 0:
                await self.shutdown("idle")
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), remaining)

    # --- ASGI -------------------------------------------------------------------------------------

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        """The ASGI entry point: the lifespan, ``GET /ping`` and ``POST /invocations``."""
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        try:
            self._check_headers(scope)
            path, method = scope["path"], scope["method"]
            if path == "/ping":
                if method != "GET":
                    raise BadRequest(405, "use GET /ping")
                await _json(send, 200, self.ping())
            elif path == "/invocations":
                if method != "POST":
                    raise BadRequest(405, "use POST /invocations with a JSON command")
                self._last_activity = time.monotonic()
                await self._invoke(await _read_json(receive), receive, send)
            else:
                raise BadRequest(404, "the bridge serves GET /ping and POST /invocations only")
        except BadRequest as exc:
            await _json(send, exc.status, {"error": exc.status, "message": str(exc)})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._watchdog = asyncio.get_running_loop().create_task(self._idle_watch())
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown("server stopped")
                if self._watchdog is not None:
                    self._watchdog.cancel()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _check_headers(self, scope: Message) -> None:
        headers = {k.decode("latin-1").lower(): v for k, v in scope.get("headers", [])}
        secret = self.config.secret
        if secret is not None:
            given = headers.get(SECRET_HEADER.lower(), b"")
            if not hmac.compare_digest(given, secret.encode()):
                raise BadRequest(401, f"this bridge needs its session's secret in the {SECRET_HEADER} header")
        session = headers.get(SESSION_HEADER.lower())
        if session is not None:
            named = session.decode("latin-1")
            if self.session_id is None:
                self.session_id = named  # AgentCore: the microVM serves the session of its first request
            elif named != self.session_id:
                raise BadRequest(400, f"the {SESSION_HEADER} header names another session than this bridge's")

    async def _invoke(self, command: dict[str, Any], receive: Receive, send: Send) -> None:
        action = command.get("action")
        if action == "start":
            await _json(send, 200, await self.start())
        elif action == "send":
            await _json(send, 200, await self._send_line(command))
        elif action == "attach":
            await self._attach(command, receive, send)
        elif action == "status":
            await _json(send, 200, self._status_answer())
        elif action == "kill":
            await _json(send, 200, await self._kill(command))
        elif action == "destroy":
            await _json(send, 200, {"status": "destroyed"})
            asyncio.get_running_loop().create_task(self.shutdown("destroy"))
        else:
            raise BadRequest(400, '"action" must be one of "start", "send", "attach", "status", "kill", "destroy"')

    async def _kill(self, command: dict[str, Any]) -> dict[str, Any]:
        """Kill the program's process group (a turn that ignored ``cancel``); the bridge stays, and
        the next ``start`` is a new boot."""
        boot_id, boot = command.get("bootId"), self.boot
        if boot_id is not None and (boot is None or boot.boot_id != boot_id):
            return self._lost(boot_id)
        if boot is None:
            return {"status": "not-running", "bootId": None, "exitCode": None}
        await boot.kill()
        return {"status": "killed", "bootId": boot.boot_id, "exitCode": boot.exit_code}

    def _status_answer(self) -> dict[str, Any]:
        boot = self.boot
        return {
            "status": "ok", "sessionId": self.session_id, "bootId": boot.boot_id if boot else None,
            "running": bool(boot and boot.running), "busy": self.busy, "cursor": boot.log.count if boot else 0,
            "pid": boot.pid if boot else None, "exitCode": boot.exit_code if boot else None,
        }  # fmt: skip

    def _lost(self, expected: Any) -> dict[str, Any]:
        current = self.boot.boot_id if self.boot is not None else None
        return {
            "status": "session-lost", "bootId": current, "expectedBootId": expected,
            "message": f"session lost: boot {expected} is gone (the program was restarted or the bridge is new; "
            f"current boot: {current}); resume from the last checkpoint",
        }  # fmt: skip

    async def _send_line(self, command: dict[str, Any]) -> dict[str, Any]:
        line, boot_id = command.get("line"), command.get("bootId")
        if not isinstance(line, dict) or not isinstance(line.get("type"), str):
            raise BadRequest(400, '"send" needs "line": a JSON object with a string "type"')
        if boot_id is not None and not isinstance(boot_id, str):
            raise BadRequest(400, '"bootId" must be a string (the id "start" returned)')
        boot = self.boot
        if boot_id is not None and (boot is None or boot.boot_id != boot_id):
            return self._lost(boot_id)
        if boot is None or not await boot.send(line):
            return {"status": "not-running", "bootId": boot.boot_id if boot else None,
                    "exitCode": boot.exit_code if boot else None}  # fmt: skip
        return {"status": "sent", "bootId": boot.boot_id}

    async def _attach(self, command: dict[str, Any], receive: Receive, send: Send) -> None:
        boot_id, cursor, deadline = command.get("bootId"), command.get("cursor", 0), command.get("deadlineSeconds")
        if not isinstance(boot_id, str):
            raise BadRequest(400, '"attach" needs "bootId": the id "start" returned')
        if not isinstance(cursor, int) or isinstance(cursor, bool) or cursor < 0:
            raise BadRequest(400, '"cursor" must be an integer >= 0 (the seq of the next line to read)')
        if not isinstance(deadline, int | float) or isinstance(deadline, bool):
            deadline = None
        if deadline is None or not 0 < deadline <= MAX_DEADLINE_SECONDS:
            raise BadRequest(400, f'"attach" needs "deadlineSeconds": a number > 0 and <= {MAX_DEADLINE_SECONDS:g}')
        boot = self.boot
        if boot is not None and boot.boot_id == boot_id and cursor > boot.log.count:
            raise BadRequest(400, f'"cursor" {cursor} is past the end of boot {boot_id} ({boot.log.count} lines)')
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        if boot is None or boot.boot_id != boot_id:
            await _frames(send, [{"frame": "lost", **self._lost(boot_id)}], more=False)
            return
        self._attached += 1
        boot.readers += 1
        try:
            await self._stream(boot, cursor, float(deadline), receive, send)
        finally:
            self._attached -= 1
            boot.readers -= 1
            boot.release()
            self.changed()

    async def _stream(self, boot: Boot, cursor: int, deadline_seconds: float, receive: Receive, send: Send) -> None:
        """Stream a boot's lines from ``cursor``, then one ``end`` frame (unless the client left)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + deadline_seconds
        gone = loop.create_task(_disconnected(receive))
        gone.add_done_callback(lambda _: self.changed())
        try:
            await _frames(send, [{"frame": "attached", "bootId": boot.boot_id, "cursor": cursor,
                                  "running": boot.running, "busy": boot.busy}])  # fmt: skip
            reason = ""
            while not gone.done():
                wakeup = self._wakeup
                records, cursor = boot.log.read(cursor)
                if records:
                    await send({"type": "http.response.body", "body": _sse(records), "more_body": True})
                    if loop.time() >= deadline:
                        reason = "deadline"
                        break
                    continue
                if boot.exited.is_set():
                    await _frames(send, [{"frame": "exit", "code": boot.exit_code, "cursor": cursor}])
                    reason = "exit"
                elif self.stopping:
                    reason = "shutdown"
                elif not boot.busy:
                    reason = "turn-end"
                elif loop.time() >= deadline:
                    reason = "deadline"
                if reason:
                    break
                timeout = min(deadline - loop.time(), self.config.keepalive_seconds)
                try:
                    await asyncio.wait_for(wakeup.wait(), max(timeout, 0))
                except TimeoutError:
                    if loop.time() < deadline:
                        await _frames(send, [{"frame": "keepalive", "cursor": cursor}])
            if not gone.done():
                await _frames(send, [{"frame": "end", "reason": reason, "cursor": cursor}], more=False)
        finally:
            gone.cancel()


SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]


def _sse(records: list[bytes]) -> bytes:
    return b"".join(b"data: " + record + b"\n\n" for record in records)


async def _frames(send: Send, frames: list[dict[str, Any]], *, more: bool = True) -> None:
    body = _sse([json.dumps(frame, separators=(",", ":")).encode() for frame in frames])
    await send({"type": "http.response.body", "body": body, "more_body": more})


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _json(send: Send, status: int, obj: Any) -> None:
    body = json.dumps(obj, separators=(",", ":")).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _read_json(receive: Receive) -> dict[str, Any]:
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise BadRequest(400, "the request ended before its body")
        body += message.get("body", b"")
        if len(body) > MAX_BODY_BYTES:
            raise BadRequest(413, f"a command is at most {MAX_BODY_BYTES} bytes")
        if not message.get("more_body", False):
            break
    try:
        command = json.loads(body)
    except ValueError:
        raise BadRequest(400, 'the body must be a JSON object, e.g. {"action": "status"}') from None
    if not isinstance(command, dict):
        raise BadRequest(400, 'the body must be a JSON object, e.g. {"action": "status"}')
    return command


__all__ = ["SECRET_HEADER", "SESSION_HEADER", "Bridge", "BridgeConfig"]
