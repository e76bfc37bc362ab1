"""Retries and transport faults: the lite DynamoDB client and a botocore one (the harness's retry
settings) against the same scripted loopback server must make the same number of attempts and end
with the same outcome: success with ``RetryAttempts``, or botocore's exception class.

The server is the test's own (moto cannot fail on demand): each request it reads takes the next
action of a script: answer with a status, a throttling code, a corrupt CRC32, reset the
connection, stall past the client's read timeout, send a chunked body without end, or send the
response a byte at a time (``test_limits.py``).
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import botocore.retries.standard
import botocore.session
import pytest
from botocore.config import Config
from botocore.exceptions import (
    ChecksumError,
    ClientError,
    EndpointConnectionError,
    ReadTimeoutError,
)
from lambda_fastpath.aws._transport import Credentials
from lambda_fastpath.aws.dynamodb import DynamoDBClient

READ_TIMEOUT = 1.5  # well above a loaded machine's loopback reply, well below the 5 s stall
OK = json.dumps({"Item": {"pk": {"S": "a"}}}).encode()


class FaultServer:
    """A loopback HTTP/1.1 server (keep-alive) that answers request *n* with ``script[n]``
    (the last action repeats); it counts requests and connections."""

    def __init__(self) -> None:
        self.script: list[Any] = []
        self.requests = 0
        self.connections = 0
        self.stop = threading.Event()
        self.closed = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                owner.connections += 1

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                action = owner.script[min(owner.requests, len(owner.script) - 1)]
                owner.requests += 1
                if action == "reset":  # RST: SO_LINGER 0 then close
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.connection.close()
                    self.close_connection = True
                    return
                if action == "ok, then close":  # keep-alive answer, then the server hangs up
                    self.send_response(200)
                    self.send_header("content-length", str(len(OK)))
                    self.end_headers()
                    self.wfile.write(OK)
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    owner.closed.set()
                    return
                if action == "stall":
                    owner.stop.wait(5)
                    self.close_connection = True
                    return
                if action in ("endless", "trickle"):
                    self.close_connection = True
                    with contextlib.suppress(OSError):  # the client gave up and closed its connection
                        (self._endless if action == "endless" else self._trickle)()
                    return
                status, body, crc = action if len(action) == 3 else (*action, None)
                self.send_response(status)
                self.send_header("content-type", "application/x-amz-json-1.0")
                self.send_header("x-amzn-requestid", f"req-{owner.requests}")
                self.send_header("x-amz-crc32", str(crc if crc is not None else zlib.crc32(body)))
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _endless(self) -> None:
                """A chunked body with no end: 64 KiB chunks until the client hangs up (or, so that a
                client without a limit cannot take the machine's memory, 64 MiB, then the body's end)."""
                self.send_response(200)
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                piece = b"%x\r\n%s\r\n" % (65536, b"x" * 65536)
                for _ in range(1024):
                    if owner.stop.is_set():
                        return
                    self.wfile.write(piece)
                self.wfile.write(b"0\r\n\r\n")

            def _trickle(self) -> None:
                """A sound response, status line and headers included, one byte every 50 ms (each read
                of the client gets a byte well within its read timeout); 20 s for the whole of it."""
                head = f"HTTP/1.1 200 OK\r\ncontent-type: application/x-amz-json-1.0\r\ncontent-length: {len(OK)}\r\n"
                data = (head + "x-amzn-requestid: trickle\r\nx-pad: " + "p" * 300 + "\r\n\r\n").encode() + OK
                for byte in data:
                    if owner.stop.wait(0.05):  # the endpoint's pace, not a wait for the test
                        return
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def close(self) -> None:
        self.stop.set()
        self._server.shutdown()
        self._server.server_close()

    def run(self, script: list[Any], call: Any) -> tuple[str, Any, int]:
        """Play ``script`` to ``call()``: (outcome class name, RetryAttempts or error, requests seen)."""
        self.script, self.requests = script, 0
        try:
            response = call()
        except ClientError as exc:
            return (
                "ClientError",
                (exc.response["Error"]["Code"], exc.response["ResponseMetadata"]["RetryAttempts"]),
                self.requests,
            )
        except Exception as exc:
            return type(exc).__name__, None, self.requests
        return "ok", response["ResponseMetadata"]["RetryAttempts"], self.requests


@pytest.fixture(scope="module")
def server() -> Iterator[FaultServer]:
    made = FaultServer()
    yield made
    made.close()


@pytest.fixture(scope="module")
def clients(server: FaultServer) -> Iterator[tuple[Any, Any]]:
    """(botocore client with the harness's retry settings, lite client), both at the fault server, no backoff waits."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(botocore.retries.standard.ExponentialBackoff, "delay_amount", lambda self, context: 0)
        yield _clients(server)


def _clients(server: FaultServer) -> tuple[Any, Any]:
    config = Config(retries={"mode": "standard", "total_max_attempts": 5}, connect_timeout=1, read_timeout=READ_TIMEOUT)
    boto = botocore.session.get_session().create_client(
        "dynamodb", region_name="us-east-1", endpoint_url=server.url, config=config,
        aws_access_key_id="a", aws_secret_access_key="b",
    )  # fmt: skip
    lite = DynamoDBClient(region="us-east-1", credentials=Credentials("a", "b"), endpoint_url=server.url,
                          signing_name="dynamodb", read_timeout=READ_TIMEOUT)  # fmt: skip
    return boto, lite


def error(code: str, status: int = 400) -> tuple[int, bytes]:
    return status, json.dumps({"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": "no"}).encode()


SCRIPTS = {
    "503 twice, then ok": [(503, b""), (503, b""), (200, OK)],
    "503 always": [(503, b"")],
    "429 without a body": [(429, b"")],
    "500 with a code": [error("InternalServerError", 500)],
    "throttling code in a 400, then ok": [error("ThrottlingException"), (200, OK)],
    "provisioned throughput exceeded": [error("ProvisionedThroughputExceededException")],
    "transaction in progress": [error("TransactionInProgressException")],
    "validation error: no retry": [error("ValidationException")],
    "conditional check failed: no retry": [error("ConditionalCheckFailedException")],
    "reset, then ok": ["reset", (200, OK)],
    "reset always": ["reset"],
    "stall past the read timeout, then ok": ["stall", (200, OK)],
    "bad CRC32, then ok": [(200, OK, 1), (200, OK)],
}


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_lite_retries_as_botocore_does(name: str, server: FaultServer, clients: tuple[Any, Any]) -> None:
    """Same attempts, same outcome (class, error code, RetryAttempts) as botocore's standard mode."""
    boto, lite = clients
    expected = server.run(SCRIPTS[name], lambda: boto.get_item(TableName="t", Key={"pk": {"S": "a"}}))
    actual = server.run(SCRIPTS[name], lambda: lite.get_item(TableName="t", Key={"pk": {"S": "a"}}))
    assert actual == expected
    assert 1 <= actual[2] <= 5


def test_a_read_that_always_stalls_times_out(server: FaultServer, clients: tuple[Any, Any]) -> None:
    """Five stalled attempts, then ReadTimeoutError (botocore's class)."""
    outcome = server.run(["stall"], lambda: clients[1].get_item(TableName="t", Key={"pk": {"S": "a"}}))
    assert outcome == (ReadTimeoutError.__name__, None, 5)


def test_a_crc_that_never_matches_raises_checksum_error(server: FaultServer, clients: tuple[Any, Any]) -> None:
    """A body corrupt on every attempt: five attempts, then botocore's ChecksumError."""
    server.script, server.requests = [(200, OK, 1)], 0
    with pytest.raises(ChecksumError):
        clients[1].get_item(TableName="t", Key={"pk": {"S": "a"}})
    assert server.requests == 5


def test_connection_refused_is_endpoint_connection_error() -> None:
    """Nothing listening: EndpointConnectionError naming the endpoint, after five attempts."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"  # bound, not listening: refused
        lite = DynamoDBClient(
            region="us-east-1", credentials=Credentials("a", "b"), endpoint_url=url, signing_name="dynamodb"
        )
        with pytest.raises(EndpointConnectionError, match=r"127\.0\.0\.1"):
            lite.get_item(TableName="t", Key={"pk": {"S": "a"}})


def test_one_kept_alive_connection_per_thread(server: FaultServer, clients: tuple[Any, Any]) -> None:
    """Requests of one thread share a connection; another thread gets its own; a failed one is dropped."""
    lite = clients[1]
    server.script = [(200, OK)]
    lite.get_item(TableName="t", Key={"pk": {"S": "a"}})
    before = server.connections
    for _ in range(3):
        lite.get_item(TableName="t", Key={"pk": {"S": "a"}})
    assert server.connections == before
    worker = threading.Thread(target=lambda: lite.get_item(TableName="t", Key={"pk": {"S": "a"}}))
    worker.start()
    worker.join()
    assert server.connections == before + 1
    assert server.run(["reset", (200, OK)], lambda: lite.get_item(TableName="t", Key={"pk": {"S": "a"}}))[1] == 1
    assert server.connections == before + 2  # the reset connection was not reused


def test_a_connection_the_server_closed_while_idle_costs_no_retry(
    server: FaultServer, clients: tuple[Any, Any]
) -> None:
    """A kept-alive connection the server closed after its last answer is replaced before use, not
    tried and retried (a warm Lambda's connection after an idle spell)."""
    lite = clients[1]
    server.script, server.requests = ["ok, then close"], 0
    server.closed.clear()
    lite.get_item(TableName="t", Key={"pk": {"S": "a"}})
    assert server.closed.wait(5)
    before = server.connections
    assert server.run([(200, OK)], lambda: lite.get_item(TableName="t", Key={"pk": {"S": "a"}})) == ("ok", 0, 1)
    assert server.connections == before + 1
