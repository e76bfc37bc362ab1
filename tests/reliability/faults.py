"""Storage faults injected into boto3 clients, as DynamoDB and S3 send them (for moto-backed tests).

:class:`FaultInjector` stands on botocore's ``before-send`` event, which runs for every HTTP
attempt: botocore handles an injected error exactly like one from the service, so its own retry
logic (``retries.mode="standard"``) decides whether to retry, and the retries are requests the
injector sees again. Like ``tests/aws/conftest.py`` it takes moto's handler off the client and
calls it itself unless a fault answers, so that a faulted request is not executed (or, with
``lost_reply``, is executed and its answer lost: an ambiguous write).

botocore waits ``rand(0, 1) * base * 2**attempt`` between attempts (base 1 s for throttling);
:func:`fast_client_backoff` shortens that to milliseconds for the test's duration. Only the delay
changes: which errors are retried, how often, and the retry quota stay botocore's own.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from botocore.retries.standard import ExponentialBackoff
from moto.core.models import botocore_stubber

DYNAMODB_FAULTS = [
    ("ProvisionedThroughputExceededException", 400),
    ("ThrottlingException", 400),
    ("InternalServerError", 500),
]
S3_FAULTS = [("SlowDown", 503), ("InternalError", 500), ("RequestTimeout", 400)]


def fast_client_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore's backoff between attempts, in milliseconds instead of up to seconds."""

    def delay_amount(self: ExponentialBackoff, context: Any) -> float:
        attempt: int = context.attempt_number
        return 0.001 * 2.0 ** (attempt - 1)

    monkeypatch.setattr(ExponentialBackoff, "delay_amount", delay_amount)


class _Body:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


def error_response(url: str, service: str, code: str, status: int) -> AWSResponse:
    """The HTTP answer DynamoDB (JSON) or S3 (XML) gives for ``code``."""
    if service == "dynamodb":
        body = json.dumps({"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": "injected"}).encode()
        headers = {"Content-Type": "application/x-amz-json-1.0"}
    else:
        body = (
            f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>injected</Message></Error>'
        ).encode()
        headers = {"Content-Type": "application/xml"}
    return AWSResponse(url, status, headers, _Body(body))


@dataclass
class FaultInjector:
    """Fails every ``every``-th request (counted across the clients) and, with ``burst=n``, the
    next ``n - 1`` attempts of the same operation too, so that ``n >= total_max_attempts``
    exhausts the client's retries. Errors rotate through each service's list."""

    every: int
    burst: int = 1
    lost_reply: bool = False
    per_service: bool = False
    """Count each service's requests apart, so that each gets every ``every``-th request failed
    (however few requests one of them makes in a run)."""
    operations: frozenset[str] | None = None
    """Only these operations fail (None: all of them)."""
    armed: bool = True
    requests: int = 0
    injected: Counter[str] = field(default_factory=Counter)
    retried_attempts: int = 0
    """Requests that botocore sent as a retry (``attempt=2`` or later)."""
    _burst_left: dict[str, int] = field(default_factory=dict)
    _by_service: Counter[str] = field(default_factory=Counter)
    _rotation: dict[str, Iterator[tuple[str, int]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _atomic: threading.Lock = field(default_factory=threading.Lock)

    def attach(self, *clients: Any) -> FaultInjector:
        for client in clients:
            service = client.meta.service_model.service_name
            self._rotation.setdefault(service, itertools.cycle(DYNAMODB_FAULTS if service == "dynamodb" else S3_FAULTS))
            client.meta.events.unregister("before-send", botocore_stubber)
            client.meta.events.register("before-send", self._send)
        return self

    @property
    def total(self) -> int:
        return sum(self.injected.values())

    def _fault_for(self, service: str, operation: str, request: Any) -> tuple[str, int] | None:
        with self._lock:
            self.requests += 1
            attempt = str(request.headers.get("amz-sdk-request", b""))
            self.retried_attempts += "attempt=1" not in attempt
            if not self.armed or (self.operations is not None and operation not in self.operations):
                return None
            self._by_service[service] += 1
            nth = self._by_service[service] if self.per_service else self.requests
            left = self._burst_left.get(operation, 0)
            if left > 0:
                self._burst_left[operation] = left - 1
            elif nth % self.every == 0:
                self._burst_left[operation] = self.burst - 1
            else:
                return None
            code, status = next(self._rotation[service])
            self.injected[code] += 1
            return code, status

    def _send(self, event_name: str, request: Any, **kwargs: Any) -> AWSResponse | None:
        _, service, operation = event_name.split(".")[:3]
        fault = self._fault_for(service, operation, request)
        if fault is None or self.lost_reply:
            # moto's backends take no locks: run one request at a time, as DynamoDB does per item
            with self._atomic:
                answer: AWSResponse | None = botocore_stubber(event_name=event_name, request=request, **kwargs)
            if fault is None:
                return answer
        assert fault is not None
        return error_response(request.url, service, *fault)
