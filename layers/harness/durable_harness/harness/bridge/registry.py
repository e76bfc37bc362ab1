"""Where local bridges register: one file per session in the data folder, written atomically.

Layout under ``<data>/bridges/`` (mode 0700): ``<key>.json`` the registry record of the session's
bridge (mode 0600: it holds the bridge's secret), ``<key>.lock`` the lock a client holds while it
finds or starts the bridge, and ``<key>/`` the bridge's folder (the logs of its boots, its stderr).
``key`` is a hash of the session id, so any session id makes a safe file name.

A record names a live bridge only if a process with its pid exists *and* started at the recorded
time (``/proc/<pid>/stat``, field 22): a pid reused by another process after the bridge died does
not count. A stale record is removed, with the bridge's folder, and a program the dead bridge left
running (its process group, checked the same way) is killed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pydantic.alias_generators import to_camel

from ..programs import kill_group, process_start_time

REGISTRY_VERSION = 1


@dataclass(frozen=True)
class BridgeRecord:
    """What a running bridge registers (``bridges/<key>.json``)."""

    session_id: str
    pid: int
    start_time: int
    host: str
    port: int
    secret: str
    boot_id: str | None = None
    program_pid: int | None = None
    program_start_time: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The record as written (camelCase keys, with the format version)."""
        raw = asdict(self)
        return {"version": REGISTRY_VERSION, **{to_camel(k): v for k, v in raw.items()}}

    @classmethod
    def from_json(cls, raw: Any) -> BridgeRecord | None:
        """The record read back, or None if it is not one (another version, a torn or foreign file)."""
        if not isinstance(raw, dict) or raw.get("version") != REGISTRY_VERSION:
            return None
        try:
            return cls(**{name: raw[to_camel(name)] for name in cls.__dataclass_fields__ if to_camel(name) in raw})
        except TypeError:
            return None

    @property
    def url(self) -> str:
        """The bridge's base URL."""
        return f"http://{self.host}:{self.port}"


def bridges_dir(data_dir: str | Path) -> Path:
    """``<data>/bridges``, created (mode 0700) if missing."""
    path = Path(data_dir) / "bridges"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def session_key(session_id: str) -> str:
    """The file-name-safe key of a session id."""
    return hashlib.sha256(session_id.encode("utf-8")).hexdigest()[:32]


def record_path(data_dir: str | Path, session_id: str) -> Path:
    """The registry file of a session."""
    return bridges_dir(data_dir) / f"{session_key(session_id)}.json"


def session_dir(data_dir: str | Path, session_id: str) -> Path:
    """The bridge's own folder for a session (boot logs, stderr), created if missing."""
    path = bridges_dir(data_dir) / session_key(session_id)
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def lock_path(data_dir: str | Path, session_id: str) -> Path:
    """The lock file held while a client finds or starts the session's bridge."""
    return bridges_dir(data_dir) / f"{session_key(session_id)}.lock"


def is_alive(pid: int | None, start_time: int | None) -> bool:
    """Whether ``pid`` is the live process that started at ``start_time`` (not a reused pid)."""
    return pid is not None and start_time is not None and process_start_time(pid) == start_time


def write_record(data_dir: str | Path, record: BridgeRecord) -> None:
    """Write a session's record atomically (a temporary file, fsync, rename, fsync of the folder):
    a reader sees the old record or the new one, never a torn one."""
    path = record_path(data_dir, record.session_id)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, json.dumps(record.to_json()).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_record(data_dir: str | Path, session_id: str) -> BridgeRecord | None:
    """The session's record as written, alive or not (None if there is none)."""
    try:
        raw = json.loads(record_path(data_dir, session_id).read_text())
    except (OSError, ValueError):
        return None
    record = BridgeRecord.from_json(raw)
    return record if record is not None and record.session_id == session_id else None


def remove_record(data_dir: str | Path, session_id: str, *, pid: int | None = None) -> None:
    """Remove the session's record (only if it still names ``pid``, when given) and its folder."""
    if pid is not None:
        current = read_record(data_dir, session_id)
        if current is not None and current.pid != pid:
            return
    with contextlib.suppress(FileNotFoundError):
        record_path(data_dir, session_id).unlink()
    shutil.rmtree(bridges_dir(data_dir) / session_key(session_id), ignore_errors=True)


def live_record(data_dir: str | Path, session_id: str) -> BridgeRecord | None:
    """The session's record if its bridge is alive; a stale one is cleaned (see :func:`clean`)."""
    record = read_record(data_dir, session_id)
    if record is None:
        return None
    if is_alive(record.pid, record.start_time):
        return record
    clean(data_dir, record)
    return None


def clean(data_dir: str | Path, record: BridgeRecord) -> None:
    """Remove a dead bridge's record and folder, and kill the program it left running."""
    if is_alive(record.program_pid, record.program_start_time):
        assert record.program_pid is not None
        kill_group(record.program_pid)  # the program leads its own process group
    remove_record(data_dir, record.session_id, pid=record.pid)


def clean_stale(data_dir: str | Path) -> list[str]:
    """Clean every stale record in the data folder; the session ids cleaned."""
    cleaned: list[str] = []
    for path in sorted(bridges_dir(data_dir).glob("*.json")):
        try:
            record = BridgeRecord.from_json(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
        if record is not None and not is_alive(record.pid, record.start_time):
            clean(data_dir, record)
            cleaned.append(record.session_id)
    return cleaned


__all__ = [
    "BridgeRecord",
    "bridges_dir",
    "clean",
    "clean_stale",
    "is_alive",
    "live_record",
    "lock_path",
    "read_record",
    "record_path",
    "remove_record",
    "session_dir",
    "session_key",
    "write_record",
]
