"""Fixtures for the AWS adapters: moto-backed DynamoDB, S3, Step Functions and EventBridge.

Nothing of ours is mocked: the adapters talk to moto through real boto3 clients. Request
counting and fault injection use botocore's own event hook ``before-send``, which runs for every
HTTP attempt, so the client's retries are counted and exercised too. (``before-call`` would
short-circuit the call before botocore's retry loop, so it could not show those retries.)
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.config import Config
from botocore.exceptions import ReadTimeoutError
from durable_harness.aws import DynamoCheckpointStore, DynamoChunkLog
from moto import mock_aws
from moto.core.models import botocore_stubber

from tests.motoserver import create_runs_table

REGION = "us-east-1"
TABLE = "harness-runs"
BUCKET = "harness-chunks"
FAST_RETRIES = Config(retries={"mode": "standard", "total_max_attempts": 3})


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Everything inside runs against moto; no real AWS account or network is ever used."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    with mock_aws():
        yield


@pytest.fixture
def ddb(aws: None) -> Any:
    """A DynamoDB client with the runs table created (pk/sk, on-demand, TTL on expires_at)."""
    client = boto3.client("dynamodb", region_name=REGION, config=FAST_RETRIES)
    create_runs_table(client, TABLE, ttl=True)
    return client


@pytest.fixture
def s3(aws: None) -> Any:
    """An S3 client with the chunk bucket created."""
    client = boto3.client("s3", region_name=REGION, config=FAST_RETRIES)
    client.create_bucket(Bucket=BUCKET)
    return client


@pytest.fixture
def store(ddb: Any, s3: Any) -> DynamoCheckpointStore:
    """The DynamoDB checkpoint store, offloading states over 300 KB to the bucket."""
    return DynamoCheckpointStore(TABLE, client=ddb, s3_client=s3, bucket=BUCKET)


@pytest.fixture
def log(ddb: Any, s3: Any) -> Iterator[DynamoChunkLog]:
    """The chunk log in the runs table (large appends in the bucket)."""
    made = new_log(ddb, s3)
    yield made
    made.close()


def new_log(ddb: Any, s3: Any, **options: Any) -> DynamoChunkLog:
    """Another chunk log object on the same table and bucket: another process, cold caches."""
    return DynamoChunkLog(TABLE, dynamodb_client=ddb, s3_client=s3, bucket=BUCKET, **options)


def set_format(ddb: Any, key: dict[str, Any], found: str | None) -> None:
    """Make item ``key``'s storage format version ``found`` (``None``: remove it), as another
    release would have written it."""
    names = {"#f": "format"}
    if found is None:
        ddb.update_item(TableName=TABLE, Key=key, UpdateExpression="REMOVE #f", ExpressionAttributeNames=names)
    else:
        values = {":f": {"N": found}}
        ddb.update_item(
            TableName=TABLE, Key=key, UpdateExpression="SET #f = :f", ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        )  # fmt: skip


class RequestCounter:
    """Counts the HTTP requests clients send, by operation name (retries count separately)."""

    def __init__(self, *clients: Any) -> None:
        self.calls: list[str] = []
        for client in clients:
            # First, so that it runs before moto's own before-send handler answers the request.
            client.meta.events.register_first("before-send", self._seen)

    def _seen(self, event_name: str, **_: Any) -> None:
        self.calls.append(event_name.rsplit(".", 1)[-1])

    def reset(self) -> None:
        """Forget what was counted so far."""
        self.calls.clear()

    @property
    def counts(self) -> Counter[str]:
        """Requests per operation since the last reset."""
        return Counter(self.calls)

    @property
    def total(self) -> int:
        """Requests since the last reset."""
        return len(self.calls)


class _RawBody:
    """The minimal raw-response object botocore reads a body from."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


class _FaultProxy:
    """Stands in front of moto on one client's ``before-send`` event and applies armed faults.

    botocore calls every ``before-send`` handler and uses the first response, so a fault that only
    answered first would still let moto *execute* the request. The proxy takes moto's handler off
    this client and calls it itself unless a fault answers instead.

    It also makes each request atomic: moto's backends take no locks, so two threads' conditional
    writes to one item can interleave between condition check and write, which DynamoDB never
    allows. Requests through proxied clients are handled one at a time, like DynamoDB does per item.
    """

    _atomic = threading.Lock()

    def __init__(self, client: Any) -> None:
        self.faults: dict[str, Fault] = {}
        client.meta.events.unregister("before-send", botocore_stubber)
        client.meta.events.register("before-send", self._send)

    @classmethod
    def of(cls, client: Any) -> _FaultProxy:
        proxy: _FaultProxy | None = getattr(client, "_fault_proxy", None)
        if proxy is None:
            proxy = cls(client)
            client._fault_proxy = proxy
        return proxy

    def _send(self, event_name: str, request: Any, **kwargs: Any) -> AWSResponse | None:
        fault = self.faults.get(event_name.rsplit(".", 1)[-1])
        if fault is None or not fault.fires():
            with self._atomic:
                return botocore_stubber(event_name=event_name, request=request, **kwargs)
        if fault.lost_reply:
            with self._atomic:
                botocore_stubber(event_name=event_name, request=request, **kwargs)  # executed, reply lost
        if fault.status == 0:
            raise ReadTimeoutError(endpoint_url=request.url)
        return AWSResponse(request.url, fault.status, {"Content-Type": fault.content_type}, _RawBody(fault.body))


def atomic_requests(*clients: Any) -> None:
    """Have moto handle these clients' requests one at a time (see :class:`_FaultProxy`)."""
    for client in clients:
        _FaultProxy.of(client)


class Fault:
    """Makes one operation of a client fail, as the service or the network would.

    Injected on botocore's ``before-send`` event, which runs for every HTTP attempt: botocore
    handles the injected answer exactly like one from the service, so its own retries run, and
    ``attempts`` counts them. ``times`` limits how many attempts fail (then moto answers again);
    ``lost_reply`` lets moto execute the request and loses its answer (an ambiguous write);
    ``status=0`` is a read timeout instead of an HTTP answer.
    """

    def __init__(
        self,
        client: Any,
        operation: str,
        status: int,
        body: bytes = b"",
        content_type: str = "application/json",
        *,
        times: int | None = None,
        lost_reply: bool = False,
    ) -> None:
        self.attempts = 0
        self.armed = True
        self.status, self.body, self.content_type = status, body, content_type
        self.times, self.lost_reply = times, lost_reply
        _FaultProxy.of(client).faults[operation] = self

    def fires(self) -> bool:
        """Whether this attempt fails (and count it)."""
        if not self.armed or (self.times is not None and self.attempts >= self.times):
            return False
        self.attempts += 1
        return True

    @classmethod
    def dynamodb(cls, client: Any, operation: str, code: str, status: int = 400, **options: Any) -> Fault:
        """A DynamoDB JSON error such as ``ProvisionedThroughputExceededException``."""
        body = json.dumps({"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": "injected"})
        return cls(client, operation, status, body.encode(), "application/x-amz-json-1.0", **options)

    @classmethod
    def s3(cls, client: Any, operation: str, code: str, status: int, **options: Any) -> Fault:
        """An S3 XML error such as ``SlowDown`` (503)."""
        body = f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>injected</Message></Error>'
        return cls(client, operation, status, body.encode(), "application/xml", **options)

    @classmethod
    def timeout(cls, client: Any, operation: str, **options: Any) -> Fault:
        """A read timeout on every attempt (botocore retries it as a transient error)."""
        return cls(client, operation, 0, **options)
