"""A loopback emulation of AgentCore Runtime's data plane, in front of the real session bridge.

moto implements AgentCore's control plane only: ``InvokeAgentRuntime`` and ``StopRuntimeSession``
are not there, so the deploy tests use this instead (it stands in for AWS, nothing else is mocked).
What it does is what the AgentCore notes (``/work/shared/reference/agentcore-notes.md``) and
botocore's ``bedrock-agentcore`` model say the service does:

* ``POST /runtimes/{agentRuntimeArn}/invocations?qualifier=...`` with the session in
  ``X-Amzn-Bedrock-AgentCore-Runtime-Session-Id``: each session id gets its own "microVM", here a
  real bridge subprocess (``python -m durable_harness.server.bridge --agentcore`` over a
  command, or the packaged entry point ``agentcore_main.py`` of a session zip; a fresh temporary
  folder each), started at the session's first invoke; the payload is POSTed to its
  ``/invocations`` with the session header and the answer is streamed back as it comes (chunked);
* ``POST /runtimes/{agentRuntimeArn}/stopruntimesession``: the session's bridge is ended (SIGTERM);
* a request without SigV4 for ``bedrock-agentcore`` is a 403, an unknown runtime a 404
  ``ResourceNotFoundException``, a session id outside 33..256 characters a 400
  ``ValidationException``; a non-2xx answer of the runtime's code is relayed as a 424
  ``RuntimeClientError`` (what AWS documents for errors of the code it runs);
* :meth:`AgentCoreEmulator.lose` kills a session's bridge as a replaced microVM would vanish (the
  next invoke gets a new one: a clean filesystem, a new bridge with no boot), and
  :meth:`AgentCoreEmulator.fail` makes the next invokes fail with an AWS error.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

SESSION_HEADER = "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id"


@dataclass
class Microvm:
    """One session's bridge subprocess and the port it listens on."""

    proc: subprocess.Popen[bytes]
    port: int
    folder: tempfile.TemporaryDirectory[str]


@dataclass
class Invocation:
    """What one request to the emulation carried."""

    path: str
    qualifier: str | None
    session_id: str | None
    headers: dict[str, str]
    payload: Any


@dataclass
class _State:
    runtime_arn: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    sessions: dict[str, Microvm] = field(default_factory=dict)
    requests: list[Invocation] = field(default_factory=list)
    failures: list[tuple[int, str]] = field(default_factory=list)
    started: int = 0
    hold: threading.Event | None = None
    """Set: an invoke is answered 200 and then held, silent, until the event is set (an invoke that
    AgentCore keeps open)."""
    lock: threading.Lock = field(default_factory=threading.Lock)


class AgentCoreEmulator:
    """The emulation's server (``url``) and its sessions; use :func:`agentcore_emulator`."""

    def __init__(self, runtime_arn: str, argv: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        """``argv``: how a microVM starts its bridge, on a loopback port (see :func:`bridge_argv`);
        ``env``: more variables of the microVM (the runtime's ``EnvironmentVariables``)."""
        self.state = _State(runtime_arn, list(argv), dict(env or {}))
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.daemon_threads = True
        self.server.state = self.state  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def requests(self) -> list[Invocation]:
        """Every request received, in order."""
        return self.state.requests

    @property
    def microvms_started(self) -> int:
        """How many session bridges were started in all."""
        return self.state.started

    def microvm(self, session_id: str) -> Microvm | None:
        """The session's live bridge, if any."""
        return self.state.sessions.get(session_id)

    def fail(self, status: int, code: str, times: int = 1) -> None:
        """The next ``times`` requests are answered with this AWS error (before reaching a bridge)."""
        with self.state.lock:
            self.state.failures += [(status, code)] * times

    def lose(self, session_id: str) -> None:
        """The session's microVM vanishes (SIGKILL of its bridge and its program)."""
        with self.state.lock:
            vm = self.state.sessions.pop(session_id)
        _end(vm, kill=True)

    def start(self) -> None:
        """Serve in a thread."""
        self._thread.start()

    def close(self) -> None:
        """Stop serving and end every session's bridge."""
        self.server.shutdown()
        self.server.server_close()
        with self.state.lock:
            vms, self.state.sessions = list(self.state.sessions.values()), {}
        for vm in vms:
            _end(vm, kill=False)


LOOPBACK = ("--host", "127.0.0.1", "--port", "0")
"""The bridge's arguments for a loopback port of its own (AgentCore's is 0.0.0.0:8080)."""


def bridge_argv(command: Sequence[str]) -> list[str]:
    """A microVM that runs the bridge module in ``--agentcore`` mode over ``command`` (on a
    loopback port of its own: AgentCore's is 0.0.0.0:8080)."""
    return [sys.executable, "-m", "durable_harness.server.bridge", "--agentcore", *LOOPBACK, "--grace-seconds",
            "5", "--", *command]  # fmt: skip


@contextmanager
def agentcore_emulator(
    runtime_arn: str, argv: Sequence[str], env: Mapping[str, str] | None = None
) -> Iterator[AgentCoreEmulator]:
    """A running emulation whose microVMs start with ``argv`` (:func:`bridge_argv`, or a session zip's
    entry point with :data:`LOOPBACK`)."""
    emulator = AgentCoreEmulator(runtime_arn, argv, env)
    emulator.start()
    try:
        yield emulator
    finally:
        emulator.close()


def _end(vm: Microvm, *, kill: bool) -> None:
    if kill:
        os.killpg(vm.proc.pid, 9)  # the bridge leads its own group: its program goes with it
    else:
        vm.proc.terminate()
    try:
        vm.proc.wait(30)
    except subprocess.TimeoutExpired:
        vm.proc.kill()
        vm.proc.wait(30)
    vm.folder.cleanup()


def _boot_microvm(state: _State) -> Microvm:
    """A new microVM: its bridge started with the emulation's argv, in a fresh folder."""
    folder = tempfile.TemporaryDirectory(prefix="microvm-")
    # A microVM has its execution role's credentials (fake here): the bridge must keep them from the program.
    env = {"PATH": os.environ.get("PATH", ""), "TMPDIR": folder.name, "AWS_ACCESS_KEY_ID": "microvm-role-key",
           "AWS_SECRET_ACCESS_KEY": "microvm-role-secret", "AWS_REGION": "us-east-1", **state.env}  # fmt: skip
    proc = subprocess.Popen(state.argv, cwd=folder.name, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, env=env, start_new_session=True)  # fmt: skip
    assert proc.stdout is not None
    ready = proc.stdout.readline()  # the bridge prints its port once it listens
    proc.stdout.close()
    if not ready:
        proc.kill()
        raise RuntimeError("the emulated microVM's bridge did not start")
    state.started += 1
    return Microvm(proc, json.loads(ready)["port"], folder)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests assert on ``requests`` instead."""

    def do_POST(self) -> None:
        state: _State = self.server.state  # type: ignore[attr-defined]
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        parts = urlsplit(self.path)
        segments = parts.path.split("/")
        qualifier = parse_qs(parts.query).get("qualifier", [None])[0]
        session = self.headers.get(SESSION_HEADER)
        try:
            payload = json.loads(body) if segments[-1] == "invocations" else body.decode()
        except ValueError:
            payload = body
        with state.lock:
            state.requests.append(Invocation(parts.path, qualifier, session, dict(self.headers), payload))
            failure = state.failures.pop(0) if state.failures else None
        if failure is not None:
            return self._error(failure[0], failure[1], "injected by the test")
        authorization = self.headers.get("Authorization", "")
        if not authorization.startswith("AWS4-HMAC-SHA256 ") or "/bedrock-agentcore/aws4_request" not in authorization:
            return self._error(403, "AccessDeniedException", "not signed with SigV4 for bedrock-agentcore")
        if len(segments) != 4 or segments[1] != "runtimes" or unquote(segments[2]) != state.runtime_arn:
            return self._error(404, "ResourceNotFoundException", f"no runtime at {parts.path}")
        if session is None or not 33 <= len(session) <= 256:
            return self._error(400, "ValidationException", "runtimeSessionId must be 33 to 256 characters")
        if segments[3] == "stopruntimesession":
            return self._stop(state, session)
        if segments[3] != "invocations":
            return self._error(404, "UnknownOperationException", parts.path)
        with state.lock:
            vm = state.sessions.get(session)
            if vm is None or vm.proc.poll() is not None:
                vm = state.sessions[session] = _boot_microvm(state)
        self._relay(vm, session, body)

    def _stop(self, state: _State, session: str) -> None:
        with state.lock:
            vm = state.sessions.pop(session, None)
        if vm is None:
            return self._error(404, "ResourceNotFoundException", f"session {session} is not running")
        _end(vm, kill=False)
        self._answer(200, b"{}", "application/json", session)

    def _relay(self, vm: Microvm, session: str, body: bytes) -> None:
        hold = self.server.state.hold  # type: ignore[attr-defined]
        if hold is not None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.flush()
            hold.wait(600)
            self.close_connection = True
            return
        upstream = http.client.HTTPConnection("127.0.0.1", vm.port, timeout=3700)
        try:
            upstream.request("POST", "/invocations", body=body, headers={
                "Content-Type": "application/json", SESSION_HEADER: session})  # fmt: skip
            answer = upstream.getresponse()
            if answer.status >= 300:
                message = json.loads(answer.read() or b"{}").get("message", "")
                message = f"Received error ({answer.status}) from runtime: {message}"
                return self._error(424, "RuntimeClientError", message)
            self.send_response(200)
            self.send_header("Content-Type", answer.getheader("Content-Type", "application/json"))
            self.send_header(SESSION_HEADER, session)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                while data := answer.read1(65536):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:  # the caller dropped the stream: so does the runtime's side
                self.close_connection = True
        finally:
            upstream.close()

    def _error(self, status: int, code: str, message: str) -> None:
        body = json.dumps({"message": message}).encode()
        self.send_response(status)
        self.send_header("x-amzn-ErrorType", f"{code}:http://internal.amazon.com/coral/com.amazon.bedrockagentcore/")
        self.send_header("x-amzn-RequestId", "emulated-request")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _answer(self, status: int, body: bytes, content_type: str, session: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header(SESSION_HEADER, session)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
