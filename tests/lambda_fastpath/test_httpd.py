"""The chat function's HTTP/1.1 server (lambda_fastpath.httpd), as the Lambda Web Adapter uses it.

Real sockets on loopback. The adapter's side is played by httpx (a keep-alive pool, bodies with
Content-Length, streamed reads, connections dropped mid-response, as hyper does for the adapter)
and by raw sockets where a test needs bytes no client library sends (chunked bodies with
``Expect: 100-continue``, pipelining, garbage). The chat app itself over this server is tested in
test_http.py, tests/reliability/test_client_drops.py and the Node suite (tests/node/test/aws.test.js).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from lambda_fastpath import httpd

from tests.support import serve


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait until ``condition()`` holds (polled), or fail."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


class Probe:
    """An ASGI app that records what the server gives it.

    * ``/echo``: the whole body read, then JSON about the request;
    * ``/stream``: one chunk, then waits for ``release()`` (or the disconnect), then more chunks;
    * ``/big?n=N``: N bytes in 64 KiB chunks, counting what ``send`` accepted;
    * ``/fail-before`` and ``/fail-after``: raises before and after the response starts;
    * ``/early``: answers before reading the body.
    """

    def __init__(self) -> None:
        self.lifespan: list[str] = []
        self.disconnects: list[str] = []
        self.sent = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self.gate: asyncio.Event | None = None
        self.after_disconnect_sends_ok = threading.Event()

    def release(self) -> None:
        assert self.loop is not None and self.gate is not None
        self.loop.call_soon_threadsafe(self.gate.set)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.loop = asyncio.get_running_loop()
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                self.lifespan.append(message["type"])
                await send({"type": message["type"] + ".complete"})
                if message["type"] == "lifespan.shutdown":
                    return
        path = scope["path"]
        if path == "/early":
            await send({"type": "http.response.start", "status": 413, "headers": [(b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})
            return
        body = b""
        while True:
            message = await receive()
            assert message["type"] == "http.request"
            body += message["body"]
            if not message["more_body"]:
                break
        if path.startswith("/echo"):
            info = {
                "method": scope["method"], "path": path, "raw_path": scope["raw_path"].decode(),
                "query": scope["query_string"].decode(), "length": len(body),
                "sha256": hashlib.sha256(body).hexdigest(), "client_port": scope["client"][1],
                "http_version": scope["http_version"],
                "headers": [[k.decode(), v.decode()] for k, v in scope["headers"]],
            }  # fmt: skip
            data = json.dumps(info).encode()
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": data})
        elif path == "/stream":
            self.gate = asyncio.Event()
            headers = [(b"content-type", b"text/event-stream")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": b"data: first\n\n", "more_body": True})
            waiter = asyncio.ensure_future(receive())
            gate = asyncio.ensure_future(self.gate.wait())
            await asyncio.wait({waiter, gate}, return_when=asyncio.FIRST_COMPLETED)
            if waiter.done():
                self.disconnects.append(waiter.result()["type"])
                # Sending to a lost connection does nothing (no error), as with uvicorn.
                await send({"type": "http.response.body", "body": b"data: late\n\n", "more_body": True})
                await send({"type": "http.response.body", "body": b""})
                self.after_disconnect_sends_ok.set()
                gate.cancel()
                return
            await send({"type": "http.response.body", "body": b"data: second\n\n", "more_body": True})
            await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})
            waiter.cancel()
        elif path == "/quiet":  # as the chat app does when its client went away: no end to the response
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"data: first\n\n", "more_body": True})
            self.disconnects.append((await receive())["type"])
        elif path == "/big":
            total = int(scope["query_string"].decode().split("=")[1])
            await send({"type": "http.response.start", "status": 200, "headers": []})
            piece = b"x" * 65536
            while self.sent < total:
                await send({"type": "http.response.body", "body": piece, "more_body": True})
                self.sent += len(piece)
            await send({"type": "http.response.body", "body": b""})
        elif path == "/fail-before":
            raise RuntimeError("the app failed before its response")
        elif path == "/fail-after":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"partial", "more_body": True})
            raise RuntimeError("the app failed mid-response")


@pytest.fixture
def probe() -> Probe:
    return Probe()


@pytest.fixture
def url(probe: Probe) -> Iterator[str]:
    with serve(probe, server="httpd") as base:
        yield base


def raw(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    return sock


def read_response(sock: socket.socket) -> tuple[bytes, bytes]:
    """One response with a Content-Length: its head and its body."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    fields = dict(line.split(b":", 1) for line in head.split(b"\r\n")[1:])
    length = int(fields[b"content-length"])
    while len(body) < length:
        body += sock.recv(65536)
    return head, body


def read_until_closed(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_requests_share_a_keep_alive_connection(url: str) -> None:
    with httpx.Client(limits=httpx.Limits(max_connections=1)) as client:
        ports = set()
        for i in range(5):
            body = bytes(range(256)) * (i * 100)
            info = client.post(f"{url}/echo?i={i}", content=body).json()
            assert info["length"] == len(body) and info["sha256"] == hashlib.sha256(body).hexdigest()
            assert info["query"] == f"i={i}" and info["method"] == "POST" and info["http_version"] == "1.1"
            ports.add(info["client_port"])
    assert len(ports) == 1


def test_a_chunked_body_and_a_large_one_arrive_whole(url: str) -> None:
    big = b"0123456789abcdef" * 65536  # 1 MiB: reading pauses and resumes as the app takes it

    def pieces() -> Iterator[bytes]:
        for i in range(0, len(big), 100_000):
            yield big[i : i + 100_000]

    with httpx.Client() as client:
        chunked = client.post(f"{url}/echo", content=pieces()).json()  # a generator: chunked encoding
        sized = client.post(f"{url}/echo", content=big).json()
    for info in (chunked, sized):
        assert info["length"] == len(big) and info["sha256"] == hashlib.sha256(big).hexdigest()
    assert ["transfer-encoding", "chunked"] in chunked["headers"]


def test_the_path_is_decoded_and_the_raw_path_kept(url: str) -> None:
    info = httpx.get(f"{url}/echo/a%20b/%E2%9C%93?x=%20").json()
    assert info["path"] == "/echo/a b/✓" and info["raw_path"] == "/echo/a%20b/%E2%9C%93" and info["query"] == "x=%20"


def test_a_response_streams_chunk_by_chunk(url: str, probe: Probe) -> None:
    with httpx.Client() as client, client.stream("POST", f"{url}/stream") as response:
        assert response.headers["transfer-encoding"] == "chunked"
        chunks = response.iter_raw()
        assert next(chunks) == b"data: first\n\n"  # before the app is released: it was sent as it came
        probe.release()
        rest = b"".join(chunks)
    assert rest == b"data: second\n\ndata: [DONE]\n\n"
    assert probe.disconnects == []


def test_a_dropped_connection_reaches_the_app_as_a_disconnect(url: str, probe: Probe) -> None:
    with httpx.Client() as client, client.stream("POST", f"{url}/stream") as response:
        assert next(response.iter_raw()) == b"data: first\n\n"
    # Leaving the block unread closes the connection, as the adapter does when its client goes away.
    wait_for(lambda: probe.disconnects == ["http.disconnect"])
    assert probe.after_disconnect_sends_ok.wait(10)


def test_an_app_may_leave_a_response_to_a_lost_connection_unfinished(
    url: str, probe: Probe, caplog: pytest.LogCaptureFixture
) -> None:
    with httpx.Client() as client, client.stream("POST", f"{url}/quiet") as response:
        assert next(response.iter_raw()) == b"data: first\n\n"
    wait_for(lambda: probe.disconnects == ["http.disconnect"])
    assert httpx.get(f"{url}/echo").status_code == 200  # served after the app returned
    assert not [r for r in caplog.records if r.name == httpd.__name__]  # nothing to report: the client left


def test_send_waits_while_the_peer_does_not_read(url: str, probe: Probe) -> None:
    total = 64 * 1024 * 1024
    sock = raw(url)
    sock.sendall(b"GET /big?n=%d HTTP/1.1\r\nhost: x\r\n\r\n" % total)

    def stalled() -> bool:
        before = probe.sent
        time.sleep(0.2)
        return 0 < before == probe.sent

    wait_for(stalled)
    assert probe.sent < total // 2  # flow control: the app waits instead of buffering 64 MiB
    received, tail = 0, b""
    while not tail.endswith(b"\r\n0\r\n\r\n"):  # the last chunk of a chunked body
        chunk = sock.recv(1 << 20)
        assert chunk
        received, tail = received + len(chunk), (tail + chunk)[-16:]
    assert probe.sent == total and received > total
    sock.close()


def test_expect_100_continue_is_answered_when_the_app_reads(url: str) -> None:
    sock = raw(url)
    sock.sendall(b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\nexpect: 100-continue\r\n\r\n")
    assert sock.recv(1000) == b"HTTP/1.1 100 Continue\r\n\r\n"
    sock.sendall(b"hello")
    head, body = read_response(sock)
    assert head.startswith(b"HTTP/1.1 200 ") and json.loads(body)["length"] == 5
    sock.close()


def test_an_early_answer_skips_the_continue_and_keeps_the_connection(url: str) -> None:
    sock = raw(url)
    sock.sendall(b"POST /early HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\nexpect: 100-continue\r\n\r\n")
    assert read_response(sock)[0].startswith(b"HTTP/1.1 413 ")
    sock.sendall(b"abc" + b"GET /echo HTTP/1.1\r\nhost: x\r\n\r\n")  # the body is dropped, the next request served
    head, body = read_response(sock)
    assert head.startswith(b"HTTP/1.1 200 ") and json.loads(body)["method"] == "GET"
    sock.close()


def test_pipelined_requests_are_answered_in_order(url: str) -> None:
    sock = raw(url)
    sock.sendall(b"".join(b"GET /echo?n=%d HTTP/1.1\r\nhost: x\r\n\r\n" % i for i in range(3)))
    sock.sendall(b"GET /echo?n=last HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    data = read_until_closed(sock)
    assert [json.loads(part.split(b"\r\n\r\n")[1])["query"] for part in data.split(b"HTTP/1.1 200 OK")[1:]] == [
        "n=0", "n=1", "n=2", "n=last"
    ]  # fmt: skip


def test_a_malformed_request_gets_a_400_and_the_connection_closes(url: str) -> None:
    for garbage in (b"NOT HTTP AT ALL\r\n\r\n", b"GET / HTTP/1.1\r\nbad header\r\n\r\n",
                    b"GET /\xff HTTP/1.1\r\nhost: x\r\n\r\n"):  # fmt: skip
        sock = raw(url)
        sock.sendall(garbage)
        data = read_until_closed(sock)
        assert data.startswith(b"HTTP/1.1 400 ") and data.endswith(b"Invalid HTTP request."), garbage
        sock.close()


def test_an_http_1_0_request_is_answered_and_closed(url: str) -> None:
    sock = raw(url)
    sock.sendall(b"GET /echo HTTP/1.0\r\n\r\n")
    head, _, body = read_until_closed(sock).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and json.loads(body)["http_version"] == "1.0"
    sock.close()


def test_app_errors_are_a_500_before_the_response_and_a_cut_body_after(url: str) -> None:
    with httpx.Client() as client:
        response = client.post(f"{url}/fail-before")
        assert response.status_code == 500 and response.text == "Internal Server Error"
        assert response.headers["connection"] == "close"
        with pytest.raises(httpx.RemoteProtocolError), client.stream("POST", f"{url}/fail-after") as cut:
            cut.read()  # the chunked body never ends: the client knows it was cut
        assert client.get(f"{url}/echo").status_code == 200  # the server goes on


def test_an_idle_connection_is_closed_after_the_keep_alive_time(probe: Probe) -> None:
    with serve(probe, server="httpd", keep_alive=0.2) as base:
        sock = raw(base)
        sock.sendall(b"GET /echo HTTP/1.1\r\nhost: x\r\n\r\n")
        assert read_response(sock)[0].startswith(b"HTTP/1.1 200 ")
        began = time.monotonic()
        assert read_until_closed(sock) == b""
        assert time.monotonic() - began >= 0.15
        sock.close()
    assert httpd.KEEP_ALIVE_SECONDS > 4  # longer than the adapter keeps an idle connection


def test_lifespan_runs_around_the_server_and_a_stop_ends_open_responses(probe: Probe) -> None:
    with serve(probe, server="httpd", shutdown_grace=0.2) as base:
        assert probe.lifespan == ["lifespan.startup"]
        idle, streaming = raw(base), raw(base)
        streaming.sendall(b"POST /stream HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
        received = b""
        while b"data: first" not in received:
            received += streaming.recv(65536)
    # The stop closed the idle connection, cut the open response after the grace, and shut down.
    assert read_until_closed(idle) == b""
    received += read_until_closed(streaming)
    assert b"data: second" not in received and not received.endswith(b"\r\n0\r\n\r\n")
    assert probe.lifespan == ["lifespan.startup", "lifespan.shutdown"]


def test_a_failed_startup_stops_the_server() -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "lifespan"
        await receive()
        await send({"type": "lifespan.startup.failed", "message": "no table"})

    with pytest.raises(RuntimeError, match="did not start") as failure, serve(app, server="httpd"):
        pass
    assert "no table" in str(failure.value.__cause__)
