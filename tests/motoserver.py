"""moto over real HTTP on loopback: :class:`MotoEndpoint`, for clients that are not botocore's stubbed
ones (another process's botocore, the lite clients of :mod:`lambda_fastpath.aws`); and
:func:`create_runs_table`, the deployed runs table's layout in moto (its index: :func:`principal_index`).

Used by the lite clients' tests, the deployed-stack test that forces them, and ``bench/`` (which
imports it from here).
"""

from __future__ import annotations

import threading
from typing import Any

from durable_harness.aws.table import PRINCIPAL_INDEX, PRINCIPAL_INDEX_PROJECTED, Head

__all__ = ["MotoEndpoint", "create_runs_table", "principal_index"]

REGION = "us-east-1"
"""The Region a request without a SigV4 credential scope is routed to."""


def principal_index() -> dict[str, Any]:
    """The index the store queries (:data:`~durable_harness.aws.table.PRINCIPAL_INDEX`), as
    ``CreateTable``'s ``GlobalSecondaryIndexes`` entry takes it: moto's tables are made with it, and
    the template's table is checked against it (``tests/deploy/test_template.py``)."""
    return {
        "IndexName": PRINCIPAL_INDEX,
        "KeySchema": [
            {"AttributeName": Head.PRINCIPAL, "KeyType": "HASH"},
            {"AttributeName": Head.CREATED_AT, "KeyType": "RANGE"},
        ],
        "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": list(PRINCIPAL_INDEX_PROJECTED)},
    }


def create_runs_table(ddb: Any, table: str, *, ttl: bool = False) -> None:
    """Create ``table`` with the runs table's layout (``pk``/``sk`` strings, on demand, the index of a
    principal's runs; with ``ttl``, TTL on ``expires_at``) through the DynamoDB client ``ddb``."""
    ddb.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
            {"AttributeName": "principal", "AttributeType": "S"},
            {"AttributeName": "created_at", "AttributeType": "S"},
        ],
        GlobalSecondaryIndexes=[principal_index()],
        BillingMode="PAY_PER_REQUEST",
    )
    if ttl:
        ddb.update_time_to_live(
            TableName=table, TimeToLiveSpecification={"Enabled": True, "AttributeName": "expires_at"}
        )


class MotoEndpoint:
    """The moto of this process (inside ``mock_aws``) over HTTP on loopback, for another process.

    A process whose ``AWS_ENDPOINT_URL`` is :attr:`url` sends every AWS request here, over real
    HTTP with its own botocore; each is handed to moto's request dispatcher with the host moto
    routes on (``<service>.<region>.amazonaws.com``, the service read from the request's SigV4
    credential scope; S3 requests are path-style on an IP endpoint), and moto's answer sent back.
    """

    def __init__(self) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        from botocore.awsrequest import AWSPreparedRequest
        from botocore.compat import HTTPHeaders
        from moto.core.models import botocore_stubber

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def handle_one_request(self) -> None:
                self.raw_requestline = self.rfile.readline(65537)
                if not self.raw_requestline or not self.parse_request():
                    self.close_connection = True
                    return
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                scope = (self.headers.get("authorization") or "").split("Credential=")[-1].split("/")
                service, region = (scope[3], scope[2]) if len(scope) > 3 else ("s3", REGION)
                host = f"{service}.{region}.amazonaws.com"
                headers = HTTPHeaders()
                for name, value in self.headers.items():
                    headers[name] = host if name.lower() == "host" else value
                request = AWSPreparedRequest(self.command, f"https://{host}{self.path}", headers, body, False)
                answer = botocore_stubber.process_request(request)
                status, out_headers, out = answer if answer is not None else (502, {}, b"not routed by moto")
                data = out.encode() if isinstance(out, str) else bytes(out or b"")
                self.send_response(int(status))
                for name, value in (out_headers or {}).items():
                    if name.lower() not in ("content-length", "transfer-encoding", "connection", "server", "date"):
                        self.send_header(name, str(value))
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                self.wfile.flush()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        """The endpoint URL (for ``AWS_ENDPOINT_URL``)."""

    def __enter__(self) -> MotoEndpoint:
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
