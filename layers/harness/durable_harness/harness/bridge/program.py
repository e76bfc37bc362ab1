"""One boot of the harness program: its process group, its numbered stdout, its stdin.

Every start of the program is a *boot* with a new id. The program runs in its own session and
process group (a kill reaches its children too) with a minimal environment; each line it writes on
stdout is numbered and appended to the boot's :class:`~.log.LineLog`; stderr goes to the bridge's
log. The boot tracks whether a turn is running: from a ``start`` or ``continue`` line written to
the program until its ``finish`` line (or its exit).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ...ids import new_id
from ..programs import kill_group, log_stderr, spawn
from .log import MAX_LINE_BYTES, LineLog

logger = logging.getLogger(__name__)

TURN_STARTS = frozenset({"start", "continue"})
READ_CHUNK = 64 * 1024


class Boot:
    """One run of the program (see the module's docstring). ``changed`` is called on every change
    a reader may wait for: new lines, the turn starting or ending, the exit."""

    def __init__(self, log_dir: Path, changed: Callable[[], None]) -> None:
        self.boot_id = new_id("boot")
        self.log = LineLog(log_dir / f"{self.boot_id}.log")
        self.proc: asyncio.subprocess.Process | None = None
        self.exit_code: int | None = None
        self.exited = asyncio.Event()
        self.busy = False
        self.readers = 0  # attaches streaming this boot's log
        self._changed = changed
        self._tasks: list[asyncio.Task[None]] = []
        self._retired = self._closed = False

    @property
    def pid(self) -> int | None:
        """The program's pid (its process group id too)."""
        return self.proc.pid if self.proc is not None else None

    @property
    def running(self) -> bool:
        """Whether the program has not exited yet."""
        return self.proc is not None and not self.exited.is_set()

    async def spawn(self, command: Sequence[str], cwd: str | None, env: Mapping[str, str]) -> None:
        """Start the program (raises ``OSError`` if it cannot be started)."""
        self.proc = await spawn(command, cwd, env)  # its own process group: a kill reaches its children, not the bridge
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._read_stdout()),
            loop.create_task(log_stderr(self.proc, logger, "program")),
            loop.create_task(self._wait()),
        ]

    async def send(self, line: Mapping[str, Any]) -> bool:
        """Write one JSON line to the program's stdin; False if it can no longer be written."""
        proc = self.proc
        if proc is None or proc.stdin is None or proc.stdin.is_closing() or not self.running:
            return False
        if line.get("type") in TURN_STARTS:
            self._set_busy(True)
        try:
            proc.stdin.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")).encode() + b"\n")
            await proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            return False
        return True

    async def end(self, grace_seconds: float) -> None:
        """Write ``destroy``, give the program ``grace_seconds`` to exit, then kill its group."""
        if self.running:
            await self.send({"type": "destroy"})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.exited.wait(), grace_seconds)
        await self.kill()

    async def kill(self) -> None:
        """SIGKILL the program's process group and wait for the boot to end."""
        if self.proc is not None:
            kill_group(self.proc.pid)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.exited.wait(), 10.0)

    def retire(self) -> None:
        """This boot is over for the bridge (another one started, or the bridge ends): its log is
        deleted once its last reader is done."""
        self._retired = True
        self.release()

    def release(self) -> None:
        """A reader is done: close and delete the log if the boot is retired and nobody reads it."""
        if self._retired and not self.readers and not self._closed:
            self._closed = True
            for task in self._tasks:
                task.cancel()
            self.log.close(remove=True)

    def _set_busy(self, busy: bool) -> None:
        if self.busy != busy:
            self.busy = busy
            self._changed()

    async def _read_stdout(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        stdout = self.proc.stdout
        buffer = bytearray()
        discarding = False  # inside an overlong line, already recorded as invalid
        while chunk := await stdout.read(READ_CHUNK):
            if discarding:
                end = chunk.find(b"\n")
                if end < 0:
                    continue
                chunk, discarding = chunk[end + 1 :], False
            scanned = len(buffer)
            buffer += chunk
            lines: list[bytes] = []
            begin = 0
            while (end := buffer.find(b"\n", scanned)) >= 0:
                lines.append(bytes(buffer[begin:end]))
                begin = scanned = end + 1
            del buffer[:begin]
            if len(buffer) > MAX_LINE_BYTES:  # recorded (as too long) now; the rest of it is skipped
                lines.append(bytes(buffer))
                buffer.clear()
                discarding = True
            if lines:
                self._append(lines)
        if buffer:
            self._append([bytes(buffer)])

    def _append(self, lines: list[bytes]) -> None:
        self.log.append(lines)
        if self.busy and any(_is_finish(raw) for raw in lines):
            self.busy = False
        self._changed()

    async def _wait(self) -> None:
        assert self.proc is not None
        code = await self.proc.wait()
        kill_group(self.proc.pid)  # the boot is over: no child of it outlives it
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._tasks[0]), 5.0)  # the lines it wrote first
        self.exit_code = code
        self.busy = False
        self.exited.set()
        logger.info("program %s (boot %s) exited with code %s", self.proc.pid, self.boot_id, code)
        self._changed()


def _is_finish(raw: bytes) -> bool:
    """Whether a program line is a ``finish`` part (which ends the turn)."""
    if b'"finish"' not in raw:  # cheap test first: most lines are not
        return False
    try:
        obj = json.loads(raw)
    except ValueError:
        return False
    return isinstance(obj, dict) and obj.get("type") == "finish"


__all__ = ["Boot"]
