"""AWS Signature Version 4, as ``botocore.auth.SigV4Auth`` and ``S3SigV4Auth`` compute it.

One function, :func:`sign`, for every lite client. It reproduces botocore's canonical request
byte for byte (``tests/lambda_fastpath/aws/test_sigv4.py`` checks it against botocore's signers), which is
what lets a lite client and a botocore client be swapped behind the same adapter: the service
sees the same signature for the same request.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING
from urllib.parse import quote, urlsplit

if TYPE_CHECKING:
    from ._transport import Credentials

__all__ = ["sign"]

# Headers botocore never signs (``botocore.auth.SIGNED_HEADERS_BLACKLIST``): hop-by-hop headers
# and those a proxy or tracer may rewrite on the way.
_UNSIGNED = frozenset(
    {
        "baggage", "connection", "expect", "keep-alive", "proxy-authenticate", "proxy-authorization",
        "te", "traceparent", "tracestate", "trailer", "transfer-encoding", "upgrade", "user-agent",
        "x-amzn-trace-id", "authorization",
    }
)  # fmt: skip
_DEFAULT_PORTS = {"http": 80, "https": 443}
_keys: dict[tuple[str, str, str, str], bytes] = {}  # (secret, date, region, service) -> signing key


def sign(
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    credentials: Credentials,
    region: str,
    service: str,
    now: datetime,
    s3: bool = False,
) -> dict[str, str]:
    """The headers to add to a request so that AWS accepts it: ``x-amz-date``, ``authorization``,
    ``x-amz-security-token`` (with a session token) and, for S3 (``s3=True``), ``x-amz-content-sha256``.

    ``url`` is the request's URL as sent (path and query already percent-encoded), ``headers`` the
    other headers it carries (a ``host`` header is derived from ``url`` when absent, as botocore
    does), ``now`` a UTC time. Non-S3 paths are encoded once more for the canonical request, as
    botocore's ``SigV4Auth`` does; S3's are used as they are.
    """
    parts = urlsplit(url)
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    payload = hashlib.sha256(body).hexdigest()
    added = {"x-amz-date": stamp}
    if credentials.token:
        added["x-amz-security-token"] = credentials.token
    if s3:
        added["x-amz-content-sha256"] = payload
    signed: dict[str, str] = {}
    for name, value in headers.items():
        lower = name.lower()
        if lower not in _UNSIGNED:
            signed[lower] = value
    signed.update(added)
    if "host" not in signed:
        signed["host"] = _host(parts.scheme, parts.hostname or "", parts.port)
    names = sorted(signed)
    signed_names = ";".join(names)
    path = parts.path if s3 else quote(_remove_dot_segments(parts.path), safe="/~")
    canonical = "\n".join(
        [
            method.upper(),
            path,
            _canonical_query(parts.query),
            "".join(f"{name}:{' '.join(signed[name].split())}\n" for name in names),
            signed_names,
            signed.get("x-amz-content-sha256", payload),
        ]
    )
    scope = f"{stamp[:8]}/{region}/{service}/aws4_request"
    to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    signature = hmac.new(_signing_key(credentials.secret_key, stamp[:8], region, service), to_sign.encode(), "sha256")
    added["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={credentials.access_key}/{scope}, "
        f"SignedHeaders={signed_names}, Signature={signature.hexdigest()}"
    )
    return added


def _signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    """The day's signing key (four HMACs), kept: it changes once a day per Region and service."""
    key = (secret, date, region, service)
    derived = _keys.get(key)
    if derived is None:
        derived = f"AWS4{secret}".encode()
        for part in (date, region, service, "aws4_request"):
            derived = hmac.new(derived, part.encode(), "sha256").digest()
        if len(_keys) > 64:  # rotated credentials: never let old keys pile up
            _keys.clear()
        _keys[key] = derived
    return derived


def _canonical_query(query: str) -> str:
    """The query string's pairs sorted (already encoded, as botocore's ``_canonical_query_string_url``)."""
    if not query:
        return ""
    pairs = sorted(pair.partition("=")[::2] for pair in query.split("&"))
    return "&".join(f"{key}={value}" for key, value in pairs)


def _host(scheme: str, hostname: str, port: int | None) -> str:
    """The ``host`` header for a URL: lower case, with the port unless it is the scheme's default."""
    host = f"[{hostname}]" if ":" in hostname else hostname
    if port is not None and port != _DEFAULT_PORTS.get(scheme):
        host = f"{host}:{port}"
    return host


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 dot-segment removal plus collapsed slashes, as ``botocore.utils.normalize_url_path``."""
    if not path:
        return "/"
    out: list[str] = []
    for segment in path.split("/"):
        if segment and segment != ".":
            if segment == "..":
                if out:
                    out.pop()
            else:
                out.append(segment)
    first = "/" if path[0] == "/" else ""
    last = "/" if path[-1] == "/" and out else ""
    return first + "/".join(out) + last
