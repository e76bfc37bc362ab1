"""A loopback HTTP/1.1 server that answers each request with the next of a script of replies.

Bedrock cannot run here, so this stands in for it over real HTTP: every request is recorded
(method, path, headers, body) and answered with the next :class:`Reply`, whose body goes out in
the given pieces, each as one HTTP chunk flushed on its own (so a piece may end anywhere inside an
event-stream frame), optionally waiting for a test's :class:`threading.Event` before a piece.
A botocore client and a lite client pointed at the same server read exactly the same bytes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer: status, headers, body pieces (``chunked``: sent as HTTP chunks)."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    pieces: list[bytes] = field(default_factory=list)
    chunked: bool = True
    wait: dict[int, threading.Event] = field(default_factory=dict)  # piece index -> sent once set
    reset: bool = False  # close the connection without answering
    cut: bool = False  # close the connection after the pieces, before the body's end
    pace: float = 0.0  # seconds before each piece after the first: an endpoint's pace, not a test's wait


@dataclass
class Request:
    """A request the server received."""

    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that closed a stream early resets its connection: expected, not worth a traceback


class ScriptedServer:
    """The server (``with ScriptedServer() as server``): ``server.url``, ``server.script``, ``server.requests``."""

    def __init__(self) -> None:
        self.script: list[Reply] = []
        self.requests: list[Request] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {name.lower(): value for name, value in self.headers.items()}
                server.requests.append(Request(self.command, self.path, headers, body))
                reply = server.script.pop(0) if server.script else Reply(500, pieces=[b"no reply scripted"])
                if reply.reset:
                    self.close_connection = True
                    return
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                if reply.chunked:
                    self.send_header("transfer-encoding", "chunked")
                else:
                    self.send_header("content-length", str(sum(len(p) for p in reply.pieces)))
                self.end_headers()
                self.wfile.flush()
                for index, piece in enumerate(reply.pieces):
                    gate = reply.wait.get(index)
                    if gate is not None and not gate.wait(10):
                        self.close_connection = True
                        return
                    if reply.pace and index:
                        time.sleep(reply.pace)
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if reply.chunked else piece)
                    self.wfile.flush()
                if reply.cut:
                    self.close_connection = True
                    return
                if reply.chunked:
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()

            do_GET = do_PUT = do_DELETE = do_POST  # S3's methods

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> ScriptedServer:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextmanager
def scripted_server() -> Iterator[ScriptedServer]:
    """A running :class:`ScriptedServer`, shut down afterwards."""
    with ScriptedServer() as server:
        yield server


def split(data: bytes, sizes: list[int]) -> list[bytes]:
    """``data`` cut into pieces of the given sizes in turn (cycled), the last one what remains."""
    pieces, at, i = [], 0, 0
    while at < len(data):
        size = sizes[i % len(sizes)]
        pieces.append(data[at : at + size])
        at += size
        i += 1
    return pieces
