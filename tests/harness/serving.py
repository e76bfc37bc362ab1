"""The real local server (``durable-harness serve``) in a child process, for the harness tests that
kill it or run it as another user."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]


def wait_until(condition: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """Poll ``condition`` until it is truthy (its value), failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
    return value


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def python_for_others() -> tuple[str, dict[str, str]]:
    """An interpreter another user can run, and the environment that gives it this one's packages:
    this one when its folders are open to others, else the system's of the same version."""
    real = Path(sys.executable).resolve()
    if all(os.stat(folder).st_mode & 0o001 for folder in real.parents):
        return sys.executable, {}
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [(Path(f"/usr/bin/python{version}"), sysconfig.get_paths()["purelib"])]
    # No system interpreter of this version (e.g. the 3.12 run on a 3.11 system): the system's own,
    # with the packages of this checkout's venv of its version (`make test` made one), runs the same
    # library code; the version does not matter to what these tests check.
    for system in sorted(Path("/usr/bin").glob("python3.[0-9]*")):
        if system.name.removeprefix("python").replace(".", "").isdigit():
            candidates += [(system, str(site)) for site in ROOT.glob(f".venv*/lib/{system.name}/site-packages")]
    for system, site in candidates:
        if system.exists() and any(Path(site).glob("durable_harness-*.dist-info")):  # the kit's venv
            return str(system), {"PYTHONPATH": os.pathsep.join([site, str(ROOT / "layers" / "harness")])}
    raise AssertionError(f"no interpreter another user can run ({real} is in a private folder)")


class Server:
    """``durable-harness serve`` with ``agent`` over ``data_dir``; ``user`` runs it as that user."""

    def __init__(
        self,
        agent: str,
        data_dir: Path,
        env: Mapping[str, str],
        *,
        user: str | None = None,
        python: str = sys.executable,
    ) -> None:
        self.agent, self.data_dir, self.env, self.user, self.python = agent, data_dir, dict(env), user, python
        self.proc: subprocess.Popen[bytes] | None = None
        self.base = ""

    def start(self) -> Server:
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SERVE_WEB_PAGE": "0", **self.env}
        command = [self.python, "-m", "durable_harness", "serve", "--port", str(port),
                   "--data-dir", str(self.data_dir), "--agent", self.agent, "--log-level", "warning"]  # fmt: skip
        self.proc = subprocess.Popen(command, cwd=ROOT, env=env, user=self.user, stdout=subprocess.DEVNULL)
        wait_until(self._ready, "the server to answer")
        return self

    def _ready(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, "the server exited"
        try:
            return httpx.get(f"{self.base}/health", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def kill(self) -> None:
        """SIGKILL: the server dies without a chance to clean up (a crash, an OOM kill)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def start_run(self, text: str) -> str:
        """POST a chat turn and return its run id without reading the stream (the run goes on)."""
        message = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}
        with httpx.stream("POST", f"{self.base}/api/chat", json={"messages": [message]}, timeout=30) as response:
            assert response.status_code == 200, response.read()
            return str(response.headers["x-workflow-run-id"])

    def finished(self, run_id: str) -> dict[str, Any]:
        """Wait until the run ends; its result."""
        status = wait_until(lambda: self._status(run_id) in ("finished", "failed", "cancelled"), "the run to end")
        assert status
        result: dict[str, Any] = httpx.get(f"{self.base}/api/runs/{run_id}/result", timeout=30).json()
        return result

    def _status(self, run_id: str) -> str:
        response = httpx.get(f"{self.base}/api/runs/{run_id}", timeout=30)
        return str(response.json().get("status")) if response.status_code == 200 else ""
