"""The base of every lite client: sign, send, retry as botocore's standard mode, raise botocore's errors.

A service client (``dynamodb.py``, ``s3.py`` ...) turns its boto3-named methods into
:meth:`LiteClient._request` calls and parses what comes back; errors are read by its
:meth:`LiteClient._error_response` hook. Retries mirror botocore's ``standard`` mode with the
harness's ``CLIENT_CONFIG`` (``durable_harness/aws/runtime.py``): up to ``max_attempts`` attempts in all, retrying
connection failures and timeouts, HTTP 500/502/503/504 and 429, and the throttling and transient
error codes of ``botocore/retries/standard.py`` (plus the errors a service model marks retryable),
with the same capped exponential backoff with jitter. botocore's retry quota (a token bucket that
stops retries after many failures) is left out: a Lambda's short life rarely fills it.

What botocore does not do, done here because an endpoint is not trusted with sizes or pace: each
attempt has an overall deadline (``attempt_timeout``; past it, ``ReadTimeoutError``, retried like
a stalled read), and a response body may be only so large (``ResponseStreamingError`` past the
operation's limit, ``_body_limits``, far above what AWS sends for it), so that an endpoint sending
a body for ever, or a byte at a time, ends an attempt instead of the function's memory or time.

Like botocore, every request says who sends it (``User-Agent``: :data:`USER_AGENT`) and, in a
Lambda function whose invocation is traced, carries the invocation's trace header on
(``X-Amzn-Trace-Id`` from ``_X_AMZN_TRACE_ID``, read at each request as botocore's
``add_recursion_detection_header`` does: it changes with every invocation), so that X-Ray links the
calls to the invocation and a service can tell a call made by the function it invokes.
"""

from __future__ import annotations

import http.client
import json
import os
import sys
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, ClassVar
from urllib.parse import quote

from botocore.exceptions import ClientError, ConnectionError, HTTPClientError

from .. import __version__
from . import _transport
from ._sigv4 import sign
from ._transport import Credentials, Response

__all__ = [
    "ATTEMPT_TIMEOUT", "CONNECT_TIMEOUT", "MAX_ATTEMPTS", "MAX_BODY", "READ_TIMEOUT", "THROTTLING_CODES",
    "TRANSIENT_CODES", "USER_AGENT", "LiteClient", "Response", "backoff",
]  # fmt: skip

THROTTLING_CODES = frozenset(
    {
        "Throttling", "ThrottlingException", "ThrottledException", "RequestThrottledException",
        "TooManyRequestsException", "ProvisionedThroughputExceededException",
        "TransactionInProgressException", "RequestLimitExceeded", "BandwidthLimitExceeded",
        "LimitExceededException", "RequestThrottled", "SlowDown", "PriorRequestNotComplete",
        "EC2ThrottledException",
    }
)  # fmt: skip
"""Error codes botocore's standard mode retries as throttling (``ThrottledRetryableChecker``)."""

TRANSIENT_CODES = frozenset({"RequestTimeout", "RequestTimeoutException", "PriorRequestNotComplete"})
"""Error codes botocore's standard mode retries as transient (``TransientRetryableChecker``)."""

CONNECT_TIMEOUT = 3.0
READ_TIMEOUT = 10.0
MAX_ATTEMPTS = 5
"""The harness's AWS client settings: a lite client's defaults, and what ``aws/runtime.py``'s
``CLIENT_CONFIG`` gives a botocore client (made from these, so that the two cannot drift apart).
The read timeout is above DynamoDB's and S3's latency for small items and segments by orders of
magnitude, yet far below a slice's budget: a hung connection is retried instead of eating the slice."""

ATTEMPT_TIMEOUT = 30.0
"""The deadline of one attempt, from its start to the last byte of its response (botocore has
none: its read timeout is per read). Three read timeouts: a response read at a healthy pace is
done long before (the largest the harness reads, an S3 segment of a few MB, takes well under a
second in a Region), while a byte every few seconds cannot hold an attempt for longer."""

MAX_BODY = 16 * 1024 * 1024
"""The largest response body of an operation without a limit of its own (``_body_limits``): 16 MiB,
40 times DynamoDB's 400 KB item and 16 times a Query's 1 MB page; Step Functions' and EventBridge's
responses are smaller still (an execution's input and output are 256 KiB each)."""

def _user_agent() -> str:
    """botocore's ``User-Agent`` fields (``ua/2.1 os/... lang/python#... md/pyimpl#...``) after this
    client's name and version, with ``exec-env/`` as Lambda sets it (``AWS_EXECUTION_ENV``).
    (``os.uname`` and ``sys``: botocore's values without importing ``platform``.)"""
    system = os.uname()
    python = ".".join(str(n) for n in sys.version_info[:3])
    implementation = {"cpython": "CPython", "pypy": "PyPy"}.get(sys.implementation.name, sys.implementation.name)
    fields = [
        f"durable-harness-lite/{__version__}", "ua/2.1", f"os/{system.sysname.lower()}#{system.release}",
        f"md/arch#{system.machine.lower()}", f"lang/python#{python}", f"md/pyimpl#{implementation}",
    ]  # fmt: skip
    if os.environ.get("AWS_EXECUTION_ENV"):
        fields.append(f"exec-env/{os.environ['AWS_EXECUTION_ENV']}")
    return " ".join(fields).replace("\n", " ")


USER_AGENT = _user_agent()
"""What every lite request sends as its ``User-Agent`` (made once: nothing in it changes)."""

_TRANSIENT_STATUSES = frozenset({500, 502, 503, 504})
_MAX_BACKOFF = 20.0
_RETRY_AFTER_MAX_ADDITIONAL = 5.0


def backoff(attempt: int, *, throttled: bool = False, scale: float = 0.05) -> float:
    """Seconds to wait before retrying after failed attempt number ``attempt`` (1-based), as
    botocore's ``ExponentialBackoff``: ``random() * min(base * 2 ** (attempt - 1), 20)``, ``base``
    1 s for throttling, else the service's scale (50 ms; DynamoDB 25 ms). Tests patch it to 0."""
    base = 1.0 if throttled else scale
    jitter = int.from_bytes(os.urandom(7), "big") / (1 << 56)  # random.random() without importing random
    return float(jitter * min(base * 2 ** (attempt - 1), _MAX_BACKOFF))


class LiteClient:
    """A small AWS client: SigV4-signed requests over :mod:`._transport` with botocore's retries.

    Subclasses add the boto3 methods of their service and override :meth:`_error_response`
    (this base reads JSON errors: ``__type`` / ``x-amzn-ErrorType`` and ``message`` / ``Message``).
    """

    _backoff_scale: ClassVar[float] = 0.05
    """The base of the backoff for non-throttling errors (botocore: 25 ms for DynamoDB)."""
    _modeled_retryable: ClassVar[frozenset[str]] = frozenset()
    """Error codes the service's model marks retryable (botocore's ``ModeledRetryableChecker``)."""
    _s3_signing: ClassVar[bool] = False
    """Sign as botocore's ``S3SigV4Auth`` (``x-amz-content-sha256``, the path as it is)."""
    _body_limits: ClassVar[dict[str, int]] = {}
    """The largest response body of an operation (by API name) when it is not :data:`MAX_BODY`."""

    def __init__(
        self,
        *,
        region: str,
        credentials: Credentials,
        endpoint_url: str,
        signing_name: str,
        connect_timeout: float = CONNECT_TIMEOUT,
        read_timeout: float = READ_TIMEOUT,
        max_attempts: int = MAX_ATTEMPTS,
        attempt_timeout: float = ATTEMPT_TIMEOUT,
        max_body: int | None = None,
    ) -> None:
        """``attempt_timeout`` is each attempt's deadline; ``max_body``, when given, the largest
        response body of every operation (instead of each one's own limit: a test's small cap)."""
        self.region = region
        self.endpoint_url = endpoint_url.rstrip("/")
        self._credentials = credentials
        self._signing_name = signing_name
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._max_attempts = max(1, max_attempts)
        self._attempt_timeout = attempt_timeout
        self._max_body = max_body

    def __repr__(self) -> str:
        return f"{type(self).__name__}(region={self.region!r}, endpoint_url={self.endpoint_url!r})"

    def _request(
        self,
        operation: str,
        method: str,
        path: str,
        *,
        query: Iterable[tuple[str, str]] = (),
        headers: dict[str, str] | None = None,
        body: bytes = b"",
        stream: bool = False,
        endpoint: str | None = None,
    ) -> Response:
        """Send ``method`` ``path`` (percent-encoded, under the endpoint URL) with ``query`` pairs
        (encoded here), retrying what botocore retries; the final response, successful (< 300), else
        ``ClientError`` from :meth:`_error_response`, or the last transport error after the last attempt.

        ``operation`` is the API name in errors (``PutItem``). With ``stream=True`` a successful
        response's body is left unread for ``Response.read`` (errors are always read whole).
        Each attempt ends within ``attempt_timeout`` and reads a body of the operation's limit at most.
        """
        max_body = self._max_body if self._max_body is not None else self._body_limits.get(operation, MAX_BODY)
        url = (endpoint or self.endpoint_url) + path  # endpoint: S3's bucket host (virtual-hosted style)
        encoded = "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in query)
        if encoded:
            url = f"{url}?{encoded}"
        attempt = 0
        while True:
            attempt += 1
            sent = dict(headers or ())
            sent["user-agent"] = USER_AGENT  # lower-case, as the other headers here
            trace = os.environ.get("_X_AMZN_TRACE_ID") if "AWS_LAMBDA_FUNCTION_NAME" in os.environ else None
            if trace:  # as botocore quotes it (botocore.handlers.add_recursion_detection_header)
                sent["x-amzn-trace-id"] = quote(trace, safe="-=;:+&[]{}\"',")
            sent.update(
                sign(method, url, sent, body, credentials=self._credentials, region=self.region,
                     service=self._signing_name, now=datetime.now(UTC), s3=self._s3_signing)
            )  # fmt: skip
            try:
                response = _transport.send(
                    method, url, sent, body, connect_timeout=self._connect_timeout,
                    read_timeout=self._read_timeout, attempt_timeout=self._attempt_timeout,
                    max_body=max_body, stream=stream,
                )  # fmt: skip
            except (ConnectionError, HTTPClientError):
                if attempt >= self._max_attempts:
                    raise
                time.sleep(backoff(attempt, scale=self._backoff_scale))
                continue
            response.retry_attempts = attempt - 1
            if response.status < 300:
                if self._response_ok(response):
                    return response
                if attempt >= self._max_attempts:
                    self._response_failed(response)
                    return response
                time.sleep(backoff(attempt, scale=self._backoff_scale))
                continue
            error = self._error_response(response)
            code = str(error.get("Error", {}).get("Code", ""))
            throttled = code in THROTTLING_CODES or (response.status == 429 and code not in self._modeled_retryable)
            retryable = (
                throttled or code in TRANSIENT_CODES or code in self._modeled_retryable
                or response.status in _TRANSIENT_STATUSES
            )  # fmt: skip
            if not retryable or attempt >= self._max_attempts:
                error["ResponseMetadata"] = self._response_metadata(response)
                if attempt >= self._max_attempts:  # botocore's standard mode marks the last attempt so
                    error["ResponseMetadata"]["MaxAttemptsReached"] = True  # (its message then says it too)
                raise ClientError(error, operation)
            delay = backoff(attempt, throttled=throttled, scale=self._backoff_scale)
            retry_after = _retry_after(response)
            if retry_after is not None:
                delay = max(delay, min(retry_after, _RETRY_AFTER_MAX_ADDITIONAL + delay))
            time.sleep(delay)

    def _response_ok(self, response: Response) -> bool:
        """Whether a successful response arrived intact (DynamoDB checks its CRC32 here); one that
        did not is retried like a dropped connection."""
        return True

    def _response_failed(self, response: Response) -> None:
        """Raise for a response that was still not intact after the last attempt."""

    def _error_response(self, response: Response) -> dict[str, Any]:
        """The ``ClientError`` response of an error reply (without ``ResponseMetadata``): JSON
        protocol errors, ``{"Error": {"Code", "Message"}}`` plus nothing else by default."""
        body = _json_or_empty(response.body)
        code = str(body.get("__type") or response.headers.get("x-amzn-errortype", ""))
        code = code.rpartition("#")[2].partition(":")[0]
        message = body.get("message", body.get("Message", ""))
        if not code:
            code, message = str(response.status), message or http.client.responses.get(response.status, "")
        return {"Error": {"Message": str(message), "Code": code}}

    def _response_metadata(self, response: Response) -> dict[str, Any]:
        """botocore's ``ResponseMetadata`` for a response."""
        headers = response.headers
        metadata: dict[str, Any] = {}
        if "x-amzn-requestid" in headers:
            metadata["RequestId"] = headers["x-amzn-requestid"]
        elif "x-amz-request-id" in headers:  # S3's, with its second id
            metadata["RequestId"] = headers["x-amz-request-id"]
            metadata["HostId"] = headers.get("x-amz-id-2", "")
        metadata.update(
            HTTPStatusCode=response.status, HTTPHeaders=dict(headers), RetryAttempts=response.retry_attempts
        )
        return metadata


def _json_or_empty(body: bytes) -> dict[str, Any]:
    """A JSON object body, or {} for an empty or unparseable one (a proxy's HTML error page)."""
    if not body:
        return {}
    try:
        parsed = json.loads(body)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _retry_after(response: Response) -> float | None:
    """The ``x-amz-retry-after`` header's delay in seconds, if valid (botocore honours it)."""
    value = response.headers.get("x-amz-retry-after")
    if value is None:
        return None
    try:
        seconds = int(value) / 1000.0
    except ValueError:
        return None
    return seconds if seconds >= 0 else None
