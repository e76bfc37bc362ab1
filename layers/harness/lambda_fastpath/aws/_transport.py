"""Credentials, endpoints and HTTP for the lite clients: ``http.client`` with keep-alive.

Each thread keeps one connection per host (the runner calls AWS from several threads, and an
``http.client`` connection carries one request at a time). A connection that failed in any way
is closed, never reused; one the server closed while it sat idle (a frozen Lambda's, typically)
is noticed before it is used, so that the request does not pay a failed attempt for it.
Transport failures are raised as botocore's exception classes, which the retry loop of
:class:`~._client.LiteClient` retries and the adapters' error translation (``aws/_errors.py``)
already knows.

An endpoint is not trusted with sizes or pace: a body is read up to the operation's limit
(``ResponseStreamingError`` past it, before the bytes pile up in memory), and every read of an
attempt (the status line and headers too) waits at most the read timeout and never past the
attempt's deadline (``ReadTimeoutError`` then), so that a body sent a byte at a time cannot hold
an attempt for longer than its deadline. A streamed body's deadline is moved on by its reader
(:meth:`Response.restart_deadline`: Bedrock's event stream gives each event its own).
"""

from __future__ import annotations

import http.client
import io
import re
import select
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from botocore.exceptions import (
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
    ResponseStreamingError,
    SSLError,
)

__all__ = ["Credentials", "Response", "credentials_from_env", "endpoint_url", "send"]

# The Regions of the partitions a lite client serves (botocore's endpoints.json ``regionRegex``):
# every other partition (GovCloud, the ISO ones) keeps botocore, which knows their endpoints.
_AWS_REGION = re.compile(r"^(us|eu|ap|sa|ca|me|af|il|mx)-\w+-\d+$")
_CN_REGION = re.compile(r"^cn-\w+-\d+$")

_local = threading.local()  # .pool: (scheme, host, port) -> HTTPConnection; .pace: the attempt's _Pace
_ssl_context: Any = None
_ssl_lock = threading.Lock()


@dataclass(frozen=True)
class Credentials:
    """AWS credentials: an access key pair and, for temporary credentials (Lambda's), a session token."""

    access_key: str
    secret_key: str
    token: str | None = None

    def __repr__(self) -> str:  # never print a secret
        return f"Credentials(access_key={self.access_key!r}, ...)"


def credentials_from_env(env: Mapping[str, str]) -> Credentials | None:
    """The credentials in ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``
    (what Lambda sets), or None: a lite client reads no other provider (botocore does)."""
    access, secret = env.get("AWS_ACCESS_KEY_ID", ""), env.get("AWS_SECRET_ACCESS_KEY", "")
    if not access or not secret:
        return None
    return Credentials(access, secret, env.get("AWS_SESSION_TOKEN") or None)


def endpoint_url(service_env_name: str, prefix: str, region: str, env: Mapping[str, str]) -> str | None:
    """The endpoint of a service, as botocore picks it: ``AWS_ENDPOINT_URL_<SERVICE_ENV_NAME>``, then
    ``AWS_ENDPOINT_URL``, else ``https://{prefix}.{region}.amazonaws.com`` (``.com.cn`` in China).

    None when botocore should serve the Region instead: outside the ``aws`` and ``aws-cn``
    partitions, or with FIPS or dual-stack endpoints asked for.
    """
    if env.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").lower() != "true":
        url = env.get(f"AWS_ENDPOINT_URL_{service_env_name}") or env.get("AWS_ENDPOINT_URL")
        if url:
            return url.rstrip("/")
    for flag in ("AWS_USE_FIPS_ENDPOINT", "AWS_USE_DUALSTACK_ENDPOINT"):
        if env.get(flag, "").lower() == "true":
            return None
    if _AWS_REGION.match(region):
        return f"https://{prefix}.{region}.amazonaws.com"
    if _CN_REGION.match(region):
        return f"https://{prefix}.{region}.amazonaws.com.cn"
    return None


class Response:
    """An HTTP response: ``status``, ``headers`` (lower-case names) and ``body``; or, for a request
    sent with ``stream=True``, an empty ``body`` and the live body through :meth:`read` / :meth:`close`.

    ``retry_attempts`` is the number of retries the client made before this response.
    """

    def __init__(self, status: int, headers: dict[str, str], body: bytes = b"", *, reason: str = "") -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self.reason = reason
        self.retry_attempts = 0
        self._live: http.client.HTTPResponse | None = None
        self._conn: http.client.HTTPConnection | None = None
        self._key: tuple[str, str, int] | None = None
        self._url = ""
        self._pace: _Pace | None = None

    def restart_deadline(self, seconds: float) -> None:
        """Give the streamed body's next reads ``seconds`` from now to arrive (they each still wait
        at most the read timeout): a long-lived stream's reader moves its deadline on as it goes."""
        if self._pace is not None:
            self._pace.deadline = time.monotonic() + seconds

    def read(self, n: int = 65536) -> bytes:
        """Up to ``n`` bytes of the streamed body, as soon as any arrived; ``b""`` at its end.

        Raises ``ReadTimeoutError`` when nothing arrives within the read timeout and
        ``ConnectionClosedError`` when the connection drops mid-body.
        """
        live = self._live
        if live is None:
            return b""
        try:
            data = live.read1(n)
        except TimeoutError:
            self.close()
            raise ReadTimeoutError(endpoint_url=self._url, error="read timeout") from None
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            raise ConnectionClosedError(endpoint_url=self._url, error=exc) from None
        if not data:  # read to its end: the connection can carry the next request
            conn, key = self._conn, self._key
            self._live = self._conn = None
            if conn is not None and key is not None:
                _release(key, conn, live)
        return data

    def close(self) -> None:
        """Stop reading: a body not read to its end takes its connection with it."""
        live, conn = self._live, self._conn
        self._live = self._conn = None
        if live is not None:
            live.close()
        if conn is not None:
            conn.close()


def send(
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    connect_timeout: float,
    read_timeout: float,
    attempt_timeout: float,
    max_body: int,
    stream: bool = False,
) -> Response:
    """Send one request over this thread's connection to the URL's host (made if needed).

    The request is sent and its response read within ``attempt_timeout`` seconds of the start
    (each read waiting at most ``read_timeout``); a body may be ``max_body`` bytes at most. With
    ``stream=True`` a successful (< 300) response's body is left to :meth:`Response.read`, its
    deadline still running (see :meth:`Response.restart_deadline`); an error's is read here.

    Raises ``EndpointConnectionError`` / ``ConnectTimeoutError`` / ``SSLError`` when no connection
    can be made, ``ReadTimeoutError`` when a send or read stalls past ``read_timeout`` or the
    attempt's deadline, ``ResponseStreamingError`` for a body over ``max_body``, and
    ``ConnectionClosedError`` when the connection drops before the whole response arrived.
    """
    pace = _Pace(time.monotonic() + attempt_timeout, read_timeout)
    parts = urlsplit(url)
    scheme, host = parts.scheme, parts.hostname or ""
    port = parts.port or (443 if scheme == "https" else 80)
    key = (scheme, host, port)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    conn = _checkout(key, connect_timeout)
    try:
        if conn.sock is None:
            _connect(conn, url)
        conn.sock.settimeout(pace.timeout())  # connect_timeout was for the connection only
        conn.request(method, target, body=body, headers=dict(headers))
        _local.pace = pace  # the response made next (_PacedResponse) reads by it
        live = conn.getresponse()
        out: dict[str, str] = {}
        for name, value in live.getheaders():
            name = name.lower()
            out[name] = f"{out[name]}, {value}" if name in out else value
        response = Response(live.status, out, reason=live.reason)
        if stream and live.status < 300:
            response._live, response._conn, response._key, response._url = live, conn, key, url
            response._pace = pace
            return response
        response.body = _read_body(live, max_body, url)
    except (ConnectTimeoutError, EndpointConnectionError, SSLError, ResponseStreamingError):
        conn.close()
        raise
    except TimeoutError:
        conn.close()
        raise ReadTimeoutError(endpoint_url=url, error="read timeout") from None
    except (OSError, http.client.HTTPException) as exc:
        conn.close()
        raise ConnectionClosedError(endpoint_url=url, error=exc) from None
    _release(key, conn, live)
    return response


def _read_body(live: http.client.HTTPResponse, limit: int, url: str) -> bytes:
    """The whole body of ``live``, ``ResponseStreamingError`` as soon as it exceeds ``limit`` bytes."""
    if live.length is not None and live.length > limit:
        raise _too_large(url, limit)
    pieces: list[bytes] = []
    size = 0
    while data := live.read1(65536):
        size += len(data)
        if size > limit:
            raise _too_large(url, limit)
        pieces.append(data)
    if live.length:  # http.client's read1 ends quietly where a Content-Length body was cut short
        raise http.client.IncompleteRead(b"".join(pieces), live.length)
    return b"".join(pieces)


def _too_large(url: str, limit: int) -> ResponseStreamingError:
    return ResponseStreamingError(error=f"the response from {url} is larger than {limit} bytes, its operation's limit")


class _Pace:
    """The time an attempt has left: a read waits at most the read timeout, never past the deadline."""

    __slots__ = ("deadline", "read_timeout")

    def __init__(self, deadline: float, read_timeout: float) -> None:
        self.deadline = deadline  # time.monotonic()'s clock
        self.read_timeout = read_timeout

    def timeout(self) -> float:
        """The timeout of the next socket operation (``TimeoutError`` when the deadline has passed)."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the attempt's deadline passed")
        return min(self.read_timeout, left)


class _PacedReader(io.RawIOBase):
    """A socket's bytes, each ``recv`` timed by a :class:`_Pace` (http.client's own reader times
    each ``recv`` alone, so that a byte at a time keeps a response alive for ever)."""

    def __init__(self, sock: socket.socket, pace: _Pace) -> None:
        super().__init__()
        self._sock = sock
        self._raw = sock.makefile("rb", buffering=0)  # socket.SocketIO: keeps the socket open while read
        self._pace = pace

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        self._sock.settimeout(self._pace.timeout())
        return self._raw.readinto(buffer)

    def close(self) -> None:
        self._raw.close()
        super().close()


class _PacedSocket:
    """What a :class:`_PacedResponse` reads its socket through (``HTTPResponse`` calls ``makefile`` only)."""

    def __init__(self, sock: socket.socket, pace: _Pace) -> None:
        self._sock, self._pace = sock, pace

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(_PacedReader(self._sock, self._pace))


class _PacedResponse(http.client.HTTPResponse):
    """An ``HTTPResponse`` read by the pace of the attempt that made it (set on this thread by :func:`send`)."""

    def __init__(self, sock: Any, debuglevel: int = 0, method: str | None = None, url: str | None = None) -> None:
        super().__init__(_PacedSocket(sock, _local.pace), debuglevel, method, url)  # type: ignore[arg-type]


def _checkout(key: tuple[str, str, int], connect_timeout: float) -> http.client.HTTPConnection:
    """This thread's connection to ``key``'s host, taken out of the pool (a new one if none)."""
    pool: dict[tuple[str, str, int], http.client.HTTPConnection] | None = getattr(_local, "pool", None)
    if pool is None:
        pool = _local.pool = {}
    conn = pool.pop(key, None)
    # An idle keep-alive socket that is readable has been closed (or spoken on) by the server.
    if conn is not None and conn.sock is not None and select.select([conn.sock], [], [], 0)[0]:
        conn.close()
        conn = None
    if conn is None:
        scheme, host, port = key
        if scheme == "https":
            conn = http.client.HTTPSConnection(host, port, timeout=connect_timeout, context=_context())
        else:
            conn = http.client.HTTPConnection(host, port, timeout=connect_timeout)
        conn.response_class = _PacedResponse
    return conn


def _release(key: tuple[str, str, int], conn: http.client.HTTPConnection, live: http.client.HTTPResponse) -> None:
    """Put a connection whose response was read to its end back into this thread's pool."""
    pool: dict[tuple[str, str, int], http.client.HTTPConnection] | None = getattr(_local, "pool", None)
    if pool is None:
        pool = _local.pool = {}
    live.close()  # closes the response's file only; http.client then lets the connection send again
    if live.will_close or conn.sock is None or key in pool:
        conn.close()
    else:
        pool[key] = conn


def _connect(conn: http.client.HTTPConnection, url: str) -> None:
    """Open ``conn``, raising botocore's connection errors."""
    try:
        conn.connect()
        conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)  # CLIENT_CONFIG's tcp_keepalive
    except TimeoutError:
        raise ConnectTimeoutError(endpoint_url=url, error="connect timeout") from None
    except OSError as exc:
        if type(exc).__module__ == "ssl":
            raise SSLError(endpoint_url=url, error=exc) from None
        raise EndpointConnectionError(endpoint_url=url, error=exc) from None


def _context() -> Any:
    """The TLS context of every HTTPS connection: certifi's CA bundle when the layer has it (as
    botocore uses), else the system store. Made once: loading a CA bundle costs milliseconds."""
    global _ssl_context
    with _ssl_lock:
        if _ssl_context is None:
            import ssl

            try:
                import certifi

                cafile: str | None = certifi.where()
            except ImportError:
                cafile = None
            _ssl_context = ssl.create_default_context(cafile=cafile)
        return _ssl_context
