"""Local data is private: the kit creates its folders 0700 and its files 0600 (and keeps the mode of
what it did not create)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import httpx
from durable_harness.cli import _local_approval_secret
from durable_harness.demo import build_demo_agent
from durable_harness.server.local import build_local_kit
from durable_harness.storage._private import make_private_dirs

from tests.support import parse_sse_body, serve, user_message


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_every_folder_and_file_the_local_kit_creates_is_private(tmp_path: Path) -> None:
    old_umask = os.umask(0o022)  # the usual umask: without care, files would be world-readable
    try:
        data = tmp_path / "new" / "deeper" / "data"
        os.environ.pop("TOOL_APPROVAL_SECRET", None)
        _local_approval_secret(str(data))
        kit = build_local_kit(build_demo_agent(delay=0), data, static_dir=None)
        with serve(kit.app) as url:
            body = json.dumps({"messages": [user_message("What is the weather in Paris?")]})
            chunks = parse_sse_body(httpx.post(f"{url}/api/chat", content=body, timeout=30).content)
        assert chunks[-1]["type"] == "finish"
        folders = [tmp_path / "new", tmp_path / "new" / "deeper", *[p for p in data.rglob("*") if p.is_dir()], data]
        # Looked at while SQLite still has its WAL file (it removes it with the last connection).
        folder_modes = {str(p): oct(mode(p)) for p in folders}
        file_modes = {p.name: oct(mode(p)) for p in data.rglob("*") if p.is_file()}
        kit.store.close()
    finally:
        os.umask(old_umask)
        os.environ.pop("TOOL_APPROVAL_SECRET", None)
    assert {"runs.sqlite3", "runs.sqlite3-wal", "approval-secret", "lock", "fence"} <= file_modes.keys(), file_modes
    assert any(n.endswith(".jsonl") for n in file_modes), file_modes
    assert {p: m for p, m in folder_modes.items() if m != "0o700"} == {}
    assert {p: m for p, m in file_modes.items() if m != "0o600"} == {}


def test_existing_folders_keep_their_mode(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    make_private_dirs(shared / "data")
    assert mode(shared) == 0o755 and mode(shared / "data") == 0o700
