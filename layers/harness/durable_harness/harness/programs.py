"""The processes of harness programs: their start, environment, process groups, stderr and orphans.

The one home of these rules for both the :class:`~durable_harness.harness.ProcessHarness` (a
program per turn) and the session bridge (:mod:`.bridge`, a program per boot).

A harness program runs in a session of its own (its pid is its process group's id), so that one
``killpg`` ends it together with everything it forked, on every path: the turn's end, ``stop``,
a cancel, a crash of the program, the server's shutdown. A server that is itself killed (SIGKILL,
an OOM kill) cannot do that, so every program's pid and start time are recorded in a small file
per run (:class:`ProgramRegistry`); the next process that drives the run ends that program group
before it starts another, and the start time makes sure that a reused pid is never killed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

logger = logging.getLogger(__name__)

BASE_ENV = ("PATH", "HOME", "LANG", "TZ")
"""The server's variables a program gets (besides those its harness's ``env`` names)."""


def program_env(env: Mapping[str, str | None], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """A program's environment: ``BASE_ENV`` from ``environ`` (the server's), then ``env``, where a
    value of None passes the server's own value of that variable on (when it has one)."""
    environ = os.environ if environ is None else environ
    out = {name: environ[name] for name in BASE_ENV if name in environ}
    for name, value in env.items():
        if value is not None:
            out[name] = value
        elif name in environ:
            out[name] = environ[name]
    return out


async def spawn(
    command: Sequence[str], cwd: str | None, env: Mapping[str, str], *, limit: int = 64 * 1024
) -> asyncio.subprocess.Process:
    """Start a program with pipes to its stdin, stdout and stderr (``limit``: the longest line its
    streams' ``readline`` returns; asyncio's default), in a session of its own: its pid is its
    process group's, so one ``killpg`` ends it and what it forked. Raises ``OSError`` if it cannot start."""
    return await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        env=dict(env),
        limit=limit,
        start_new_session=True,
    )


async def log_stderr(proc: asyncio.subprocess.Process, log: logging.Logger, what: str) -> None:
    """Every stderr line of the program goes to ``log`` (never to the client), until it closes;
    ``what`` names the program in each line."""
    assert proc.stderr is not None
    while True:
        try:
            line = await proc.stderr.readline()
        except (ValueError, asyncio.LimitOverrunError):
            continue
        if not line:
            return
        log.info("%s [%s] stderr: %s", what, proc.pid, line.decode("utf-8", "replace").rstrip())


def proc_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (which may hold spaces and
    parentheses): ``[0]`` the state, ``[2]`` the process group, ``[19]`` the start time (clock
    ticks since boot). None when there is no such process, or no ``/proc``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    _, found, fields = stat.rpartition(")")
    return fields.split() if found else None


def process_start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot), or None if there is no such live
    process (a zombie counts as dead)."""
    fields = proc_stat(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def start_time(pid: int) -> str | None:
    """When process ``pid`` started (an opaque token), or None when it is gone or cannot be told."""
    fields = proc_stat(pid)
    if fields is not None:
        return fields[19]
    if Path("/proc/self/stat").exists():
        return None  # Linux, and the process is gone
    try:  # not Linux: ask ps
        found = subprocess.run(["ps", "-o", "lstart=", "-p", str(pid)], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return found.stdout.strip() or None


def kill_group(pgid: int) -> bool:
    """SIGKILL the process group ``pgid``; False when no process of it is left."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    except PermissionError:  # the pgid was reused by someone else's processes: not ours to end
        logger.warning("process group %s is not ours any more; left alone", pgid)
        return False
    return True


def group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` is still there (zombies included)."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


async def end_group(proc: asyncio.subprocess.Process, wait_seconds: float = 5.0) -> None:
    """Kill a program's whole process group (it may have exited, and its children not) and reap it."""
    kill_group(proc.pid)
    try:
        await asyncio.wait_for(proc.wait(), wait_seconds)
    except TimeoutError:
        logger.error("harness program %s did not die after SIGKILL", proc.pid)


def default_registry_dir() -> Path:
    """Where programs are recorded unless the harness says otherwise: per user, in the temp folder."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"durable-harness-{uid}" / "programs"


class ProgramRegistry:
    """One file per run whose program is running: ``{"pid", "start"}``. Run ids are unique, so
    servers on different data folders may share the folder."""

    def __init__(self, folder: str | Path | None = None) -> None:
        self.folder = Path(folder) if folder is not None else default_registry_dir()

    def _path(self, run_id: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in run_id)
        return self.folder / f"{safe}.json"

    def record(self, run_id: str, pid: int) -> None:
        """Remember the program of ``run_id`` (written before it reads its first line)."""
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = self._path(run_id)
        temp = path.with_suffix(f".{os.getpid()}.tmp")
        temp.write_text(json.dumps({"pid": pid, "start": start_time(pid)}))
        temp.replace(path)

    def forget(self, run_id: str, pid: int) -> None:
        """The program of ``run_id`` is gone: drop its record (unless a newer program's)."""
        path = self._path(run_id)
        try:
            if json.loads(path.read_text()).get("pid") == pid:
                path.unlink()
        except (OSError, ValueError):
            pass

    async def end_orphan(self, run_id: str, timeout: float = 10.0) -> None:
        """End the program a dead server left running for ``run_id`` (and all its group)."""
        path = self._path(run_id)
        try:
            if not _ours(self.folder) or not _ours(path):
                logger.warning("%s is not this user's alone: its program records are not trusted", path)
                return
            record = json.loads(path.read_text())
            pid, started = int(record["pid"]), record.get("start")
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError):
            path.unlink(missing_ok=True)
            return
        leader = start_time(pid)
        if started is not None and leader is not None and leader != started:
            path.unlink(missing_ok=True)  # the pid is someone else's now
            return
        if leader is None and not group_alive(pid):
            path.unlink(missing_ok=True)
            return
        logger.warning("run %s: ending its harness program %s, left running by a server that died", run_id, pid)
        deadline = time.monotonic() + timeout
        while kill_group(pid) and _has_live_member(pid) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)  # SIGKILL is asynchronous: wait until the group is gone
        path.unlink(missing_ok=True)


def _ours(path: Path) -> bool:
    """Whether only this user can have written ``path`` (another user's record could name our pids)."""
    if not hasattr(os, "getuid"):
        return True
    info = path.stat()
    return info.st_uid == os.getuid() and not info.st_mode & 0o022


def _has_live_member(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (zombies are done: whoever adopted them reaps them)."""
    if not sys.platform.startswith("linux"):
        return group_alive(pgid)
    for entry in Path("/proc").glob("[0-9]*"):
        fields = proc_stat(int(entry.name))
        if fields is not None and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


__all__ = [
    "BASE_ENV",
    "ProgramRegistry",
    "end_group",
    "kill_group",
    "log_stderr",
    "proc_stat",
    "process_start_time",
    "program_env",
    "spawn",
    "start_time",
]
