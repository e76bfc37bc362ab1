"""Durable waits across a SIGKILL of the local server (issue 21): a sleep that ends while the server
is down fires once at start-up (the SQLite timer table); an event wait survives the kill and the
signed URL completes the run on the new server; the recorded step never runs twice.

Real server processes (``durable-harness serve``) on loopback, killed with SIGKILL.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import message_of, parse_sse_body, user_message

ROOT = Path(__file__).resolve().parents[2]
BOUND = 60.0
AGENT = "tests.waits.wait_agent:build_agent"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """``durable-harness serve`` with the wait agent, on a fixed port and data folder."""

    def __init__(self, data: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        self.data = data
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **env}
        self.base = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = [sys.executable, "-m", "durable_harness", "serve", "--host", "127.0.0.1", "--port", str(self.port),
                "--data-dir", str(self.data), "--agent", AGENT, "--log-level", "warning"]  # fmt: skip
        self.process = subprocess.Popen(args, cwd=ROOT, env=self.env, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + BOUND
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.base}/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.05)
        raise AssertionError("the server did not start")

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(BOUND)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(BOUND)


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[Server, Path]]:
    folder = tmp_path / "waits"
    folder.mkdir()
    env = {"WAIT_DIR": str(folder), "TOOL_APPROVAL_SECRET": "r" * 40, "NAP_SECONDS": "2"}
    server = Server(tmp_path / "data", env)
    server.start()
    try:
        yield server, folder
    finally:
        server.stop()


def post_turn(server: Server, text: str) -> str:
    """POST a chat turn and return its run id once the run parks (the response is left behind)."""
    body = {"id": "chat-1", "messages": [user_message(text)]}
    with httpx.stream("POST", f"{server.base}/api/chat", json=body, timeout=BOUND) as response:
        run_id = response.headers["x-workflow-run-id"]  # the run goes on without its first response
    status(server, run_id, "awaiting_event")
    return run_id


def status(server: Server, run_id: str, want: str) -> dict[str, Any]:
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        try:
            body = httpx.get(f"{server.base}/api/runs/{run_id}", timeout=5).json()
        except httpx.TransportError:
            body = {}
        if body.get("status") == want:
            return body
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} never reached {want}")


def replay(server: Server, run_id: str) -> list[dict[str, Any]]:
    return parse_sse_body(httpx.get(f"{server.base}/api/chat/{run_id}/stream?startIndex=0", timeout=BOUND).content)


def lines(folder: Path) -> list[str]:
    return (folder / "effects.log").read_text().splitlines()


def test_a_sleep_that_ends_while_the_server_is_down_fires_once_at_start_up(setup: tuple[Server, Path]) -> None:
    server, folder = setup
    run_id = post_turn(server, "take a nap")
    waiting = status(server, run_id, "awaiting_event")["waitingFor"]
    assert [w["kind"] for w in waiting] == ["sleep"]
    server.kill()
    while time.time() * 1000 < waiting[0]["deadline"]:  # the sleep ends while the server is down
        time.sleep(0.05)
    server.start()
    status(server, run_id, "finished")
    assert lines(folder) == ["napping n1", "woke n1"]
    chunks = replay(server, run_id)
    assert [c["type"] for c in chunks].count("finish") == 1 and chunks[-1]["type"] == "finish"
    tool = next(p for p in message_of(chunks)["parts"] if p["type"] == "tool-nap")
    assert tool["output"] == {"slept": True, "label": "n1"}


def test_an_event_wait_survives_a_sigkill_and_the_signed_url_completes_it(setup: tuple[Server, Path]) -> None:
    server, folder = setup
    run_id = post_turn(server, "build it")
    hook = (folder / "url.txt").read_text()
    server.kill()
    server.start()
    assert status(server, run_id, "awaiting_event")["waitingFor"][0]["name"] == "build-done"
    assert httpx.post(hook, json={"status": "passed"}, timeout=BOUND).status_code == 202
    status(server, run_id, "finished")
    assert lines(folder) == ["started acme/app"]
    tool = next(p for p in message_of(replay(server, run_id))["parts"] if p["type"] == "tool-run_build")
    assert tool["output"] == {"build": "build-1", "status": "passed"}
