"""The lite S3 client gives what a boto3 S3 client gives: on the same moto over real HTTP, and on a
loopback server of the test's for what moto cannot do (a 503, an error hidden in a 200, a bad
checksum, an error without a body); its parsing equals botocore's own parser on the same bytes."""

from __future__ import annotations

import base64
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any
from unittest import mock
from urllib.parse import parse_qsl, urlsplit

import boto3
import botocore.auth
import botocore.session
import pytest
from botocore.awsrequest import AWSRequest, HeadersDict
from botocore.config import Config
from botocore.credentials import Credentials as BotoCredentials
from botocore.exceptions import ClientError, FlexibleChecksumError, ParamValidationError
from botocore.parsers import RestXMLParser
from durable_harness.aws.checkpoints.objects import ObjectGone, StateObjects
from lambda_fastpath.aws import _client, _s3xml, _transport
from lambda_fastpath.aws import client as lite_client
from lambda_fastpath.aws._transport import Credentials, Response
from lambda_fastpath.aws.s3 import S3Client
from moto import mock_aws

from tests.aws.signing import signed_for
from tests.lambda_fastpath.aws.scripted import Reply, ScriptedServer
from tests.lambda_fastpath.aws.test_sigv4 import KEYS as SIGNING_KEYS
from tests.lambda_fastpath.aws.test_sigv4 import NOW
from tests.motoserver import MotoEndpoint

REGION = "us-east-1"
BUCKET = "lite-bucket"
AWKWARD_KEYS = [
    "plain",
    "with space",
    "plus+sign",
    "ünï/cödé",
    "a/b/c",
    "pct%20x",
    "q?x=1&y",
    "tilde~",
    "colon:x",
    "hash#x",
]
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
MODEL = botocore.session.get_session().get_service_model("s3")


def _lite(url: str) -> S3Client:
    return S3Client(region=REGION, credentials=Credentials("testing", "testing"), endpoint_url=url)


def _boto(url: str) -> Any:
    return boto3.client(
        "s3", region_name=REGION, endpoint_url=url, config=Config(retries={"total_max_attempts": 5}), **CREDENTIALS
    )


def _bare(result: dict[str, Any]) -> dict[str, Any]:
    """A result without its ``ResponseMetadata`` (request ids and dates differ between two calls)."""
    return {k: v for k, v in result.items() if k != "ResponseMetadata"}


def _error(call: Any) -> ClientError:
    with pytest.raises(ClientError) as caught:
        call()
    return caught.value


@pytest.fixture(scope="module")
def clients() -> Iterator[tuple[Any, S3Client]]:
    """A boto3 and a lite client on one moto served over HTTP on loopback, with the bucket made."""
    with mock_aws(), MotoEndpoint() as endpoint:
        boto = _boto(endpoint.url)
        boto.create_bucket(Bucket=BUCKET)
        yield boto, _lite(endpoint.url)


def test_put_and_get_equal_botos_for_awkward_keys(clients: tuple[Any, S3Client]) -> None:
    boto, lite = clients
    for key in AWKWARD_KEYS:
        body = f"body of {key}".encode()
        mine = lite.put_object(Bucket=BUCKET, Key=f"lite/{key}", Body=body, ContentType="application/x-ndjson")
        theirs = boto.put_object(Bucket=BUCKET, Key=f"boto/{key}", Body=body, ContentType="application/x-ndjson")
        assert _bare(mine) == _bare(theirs) and "ETag" in mine and "ChecksumCRC32" in mine
        assert mine["ResponseMetadata"]["HTTPStatusCode"] == 200 and mine["ResponseMetadata"]["RetryAttempts"] == 0
        # Each reads what the other wrote, so the key went over the wire unchanged both ways.
        for reader, writer in ((lite, "boto"), (boto, "lite")):
            got = reader.get_object(Bucket=BUCKET, Key=f"{writer}/{key}")
            assert got.pop("Body").read() == body
        got, expected = (
            lite.get_object(Bucket=BUCKET, Key=f"boto/{key}"),
            boto.get_object(Bucket=BUCKET, Key=f"boto/{key}"),
        )
        assert got.pop("Body").read() == expected.pop("Body").read() == body
        assert _bare(got) == _bare(expected) and got["ContentLength"] == len(body)


def test_get_a_range_and_a_missing_key(clients: tuple[Any, S3Client]) -> None:
    boto, lite = clients
    lite.put_object(Bucket=BUCKET, Key="ranged", Body=b"0123456789")
    got, expected = (
        lite.get_object(Bucket=BUCKET, Key="ranged", Range="bytes=2-5"),
        boto.get_object(Bucket=BUCKET, Key="ranged", Range="bytes=2-5"),
    )
    assert got.pop("Body").read() == expected.pop("Body").read() == b"2345"
    assert _bare(got) == _bare(expected) and got["ContentRange"] == "bytes 2-5/10"

    mine, theirs = (
        _error(lambda: lite.get_object(Bucket=BUCKET, Key="no such key")),
        _error(lambda: boto.get_object(Bucket=BUCKET, Key="no such key")),
    )
    assert mine.response["Error"] == theirs.response["Error"] and mine.response["Error"]["Code"] == "NoSuchKey"
    assert mine.operation_name == theirs.operation_name == "GetObject" and str(mine) == str(theirs)
    assert mine.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_conditional_puts_fail_as_botos_do(clients: tuple[Any, S3Client]) -> None:
    boto, lite = clients
    first = lite.put_object(Bucket=BUCKET, Key="once", Body=b"first", IfNoneMatch="*")
    mine = _error(lambda: lite.put_object(Bucket=BUCKET, Key="once", Body=b"second", IfNoneMatch="*"))
    theirs = _error(lambda: boto.put_object(Bucket=BUCKET, Key="once", Body=b"third", IfNoneMatch="*"))
    assert mine.response["Error"] == theirs.response["Error"] and mine.response["Error"]["Code"] == "PreconditionFailed"
    assert mine.response["ResponseMetadata"]["HTTPStatusCode"] == 412 and mine.operation_name == "PutObject"

    mine = _error(lambda: lite.put_object(Bucket=BUCKET, Key="once", Body=b"x", IfMatch='"0000"'))
    theirs = _error(lambda: boto.put_object(Bucket=BUCKET, Key="once", Body=b"x", IfMatch='"0000"'))
    assert mine.response["Error"] == theirs.response["Error"] and mine.response["Error"]["Code"] == "PreconditionFailed"
    assert lite.get_object(Bucket=BUCKET, Key="once")["Body"].read() == b"first"  # neither failed put wrote

    lite.put_object(Bucket=BUCKET, Key="once", Body=b"replaced", IfMatch=first["ETag"])
    assert boto.get_object(Bucket=BUCKET, Key="once")["Body"].read() == b"replaced"


def test_deletes_equal_botos(clients: tuple[Any, S3Client]) -> None:
    boto, lite = clients
    for key in AWKWARD_KEYS:
        boto.put_object(Bucket=BUCKET, Key=f"listed/{key}", Body=b"x")
    assert _bare(lite.delete_object(Bucket=BUCKET, Key="listed/with space")) == _bare(
        boto.delete_object(Bucket=BUCKET, Key="listed/plus+sign")
    )
    assert _bare(lite.delete_object(Bucket=BUCKET, Key="never written")) == _bare(
        boto.delete_object(Bucket=BUCKET, Key="never written")
    )
    remaining = {o["Key"] for o in boto.list_objects_v2(Bucket=BUCKET, Prefix="listed/")["Contents"]}
    assert remaining == {f"listed/{k}" for k in AWKWARD_KEYS} - {"listed/with space", "listed/plus+sign"}


def test_an_adapter_runs_unchanged_on_the_lite_client(clients: tuple[Any, S3Client]) -> None:
    """The checkpoint store's S3 objects (``IfNoneMatch="*"`` writes, reads, deletes, ``ObjectGone``)."""
    boto, lite = clients
    text = "é" * 300
    key = StateObjects(lite, BUCKET, prefix="adapter/", offload_bytes=100).put("run 1", "state", text)
    assert key is not None and boto.get_object(Bucket=BUCKET, Key=key)["Body"].read() == text.encode()
    fresh = StateObjects(lite, BUCKET, prefix="adapter/", offload_bytes=100)  # nothing cached
    assert fresh.text(key) == text
    fresh.delete(key)
    with pytest.raises(ObjectGone):
        StateObjects(lite, BUCKET, prefix="adapter/", offload_bytes=100).text(key)


def test_bad_arguments_are_refused_before_sending(clients: tuple[Any, S3Client]) -> None:
    _, lite = clients
    with pytest.raises(TypeError):
        lite.put_object(Bucket=BUCKET, Key="k", Body=b"", ACL="public-read")  # type: ignore[call-arg]
    with pytest.raises(ParamValidationError):
        lite.get_object(Bucket="no/slash", Key="k")
    with pytest.raises(ParamValidationError):
        lite.delete_object(Bucket=BUCKET, Key="")


# --- a loopback server of the test's ------------------------------------------------------------


@contextmanager
def scripted(answers: list[tuple[int, dict[str, str], bytes]]) -> Iterator[ScriptedServer]:
    """A :class:`ScriptedServer` answering each request with the next of ``answers`` (status, headers, body)."""
    with ScriptedServer() as server:
        server.script = [Reply(status, headers, [body], chunked=False) for status, headers, body in answers]
        yield server


_SLOW_DOWN = (
    b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message><RequestId>r</RequestId></Error>"
)


def test_a_503_slow_down_is_retried_then_succeeds() -> None:
    ok = (200, {"etag": '"e"'}, b"")
    with scripted([(503, {"x-amz-request-id": "r"}, _SLOW_DOWN), ok]) as server:
        result = _lite(server.url).put_object(Bucket=BUCKET, Key="k", Body=b"data")
    assert result["ETag"] == '"e"' and result["ResponseMetadata"]["RetryAttempts"] == 1
    assert [r.body for r in server.requests] == [b"data", b"data"]


def test_an_error_inside_a_200_is_retried_like_a_500() -> None:
    cut_short: tuple[int, dict[str, str], bytes] = (200, {}, b"<Error><Code>Slow")
    with scripted([(200, {}, _SLOW_DOWN), cut_short, (204, {}, b"")]) as server:
        result = _lite(server.url).delete_object(Bucket=BUCKET, Key="k")
    assert result["ResponseMetadata"]["HTTPStatusCode"] == 204
    assert result["ResponseMetadata"]["RetryAttempts"] == 2 and len(server.requests) == 3

    with scripted([(200, {}, _SLOW_DOWN)] * 5) as server:
        failed = _error(lambda: _lite(server.url).delete_object(Bucket=BUCKET, Key="k"))
    assert failed.response["Error"]["Code"] == "SlowDown" and failed.operation_name == "DeleteObject"
    assert failed.response["ResponseMetadata"]["HTTPStatusCode"] == 500  # what botocore makes of it
    assert failed.response["ResponseMetadata"]["RetryAttempts"] == 4 and len(server.requests) == 5


def test_an_error_without_a_body_is_botocores() -> None:
    not_found = (404, {"x-amz-request-id": "r", "x-amz-id-2": "h"}, b"")
    with scripted([not_found, not_found]) as server:
        mine = _error(lambda: _lite(server.url).get_object(Bucket=BUCKET, Key="k"))
        theirs = _error(lambda: _boto(server.url).get_object(Bucket=BUCKET, Key="k"))
    assert mine.response["Error"] == theirs.response["Error"] == {"Code": "404", "Message": "Not Found"}
    assert mine.response["ResponseMetadata"]["HostId"] == theirs.response["ResponseMetadata"]["HostId"] == "h"
    assert str(mine) == str(theirs)


def test_bytes_that_fail_their_checksum_are_read_again() -> None:
    sound = base64.b64encode(zlib.crc32(b"payload").to_bytes(4, "big")).decode()
    corrupt = (200, {"x-amz-checksum-crc32": sound}, b"paylaod")
    with scripted([corrupt, (200, {"x-amz-checksum-crc32": sound}, b"payload")]) as server:
        got = _lite(server.url).get_object(Bucket=BUCKET, Key="k")
    assert got["Body"].read() == b"payload" and got["ResponseMetadata"]["RetryAttempts"] == 1
    assert got["ResponseMetadata"]["ChecksumAlgorithm"] == "crc32"

    with scripted([corrupt] * 6) as server:  # the last attempt's mismatch is botocore's error
        with pytest.raises(FlexibleChecksumError):
            _lite(server.url).get_object(Bucket=BUCKET, Key="k")
        assert len(server.requests) == 5
        with pytest.raises(FlexibleChecksumError):
            _boto(server.url).get_object(Bucket=BUCKET, Key="k")["Body"].read()


# --- addressing and signing on AWS ------------------------------------------------------------


class _Now(datetime):
    @classmethod
    def now(cls, tz: Any = None) -> Any:
        return NOW


def _botocore_signed(
    method: str, url: str, headers: dict[str, str], body: bytes, region: str, token: str
) -> dict[str, str]:
    """The headers botocore's ``S3SigV4Auth`` adds to the same request at the same time (``NOW``)."""
    request = AWSRequest(method=method, url=url, headers=dict(headers), data=body)
    with mock.patch.object(botocore.auth, "get_current_datetime", lambda: NOW.replace(tzinfo=None)):
        botocore.auth.S3SigV4Auth(BotoCredentials(*SIGNING_KEYS, token), "s3", region).add_auth(request)
    return {name.lower(): value for name, value in request.headers.items() if name.lower() not in headers}


@pytest.mark.parametrize("region", ["eu-west-1", "cn-north-1"])
@pytest.mark.parametrize("bucket", ["lite-bucket", "my.dotted.bucket", "Caps_Bucket"])
def test_urls_and_signatures_on_aws_are_botocores(region: str, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where each call goes on AWS (virtual-hosted for a bucket that is a host label, else
    path-style) and its signature, against botocore's for the same call. AWS cannot be reached
    from here, so the lite client's transport is replaced by one that records the request."""
    sent: list[tuple[str, str, dict[str, str], bytes]] = []

    def send(method: str, url: str, headers: dict[str, str], body: bytes, **_: Any) -> Response:
        sent.append((method, url, dict(headers), body))
        return Response(200, {}, b"")

    monkeypatch.setattr(_transport, "send", send)
    monkeypatch.setattr(_client, "datetime", _Now)
    token = "session+token/="
    env = {"AWS_ACCESS_KEY_ID": SIGNING_KEYS[0], "AWS_SECRET_ACCESS_KEY": SIGNING_KEYS[1], "AWS_SESSION_TOKEN": token}
    lite = lite_client("s3", region=region, env=env)
    assert isinstance(lite, S3Client)
    calls: list[Callable[[Any], Any]] = [
        lambda c: c.put_object(Bucket=bucket, Key="a b/ü+x=1&y", Body=b"x", ContentType="text/plain", IfNoneMatch="*"),
        lambda c: c.get_object(Bucket=bucket, Key="runs/r 1/seg/0001.ndjson"),
        lambda c: c.delete_object(Bucket=bucket, Key="~tilde"),
    ]
    for call in calls:
        call(lite)
        method, url, headers, body = sent.pop()
        theirs, _ = signed_for(boto3.client("s3", region_name=region, **CREDENTIALS), call)
        ours, expected = urlsplit(url), urlsplit(theirs)
        assert (ours.netloc, ours.path) == (expected.netloc, expected.path)
        assert sorted(parse_qsl(ours.query)) == sorted(parse_qsl(expected.query))
        signing = {"authorization", "x-amz-date", "x-amz-security-token", "x-amz-content-sha256"}
        unsigned = {k: v for k, v in headers.items() if k not in signing}
        assert {k: headers[k] for k in signing} == _botocore_signed(method, url, unsigned, body, region, token)
    # A custom endpoint (LocalStack's, moto's) is addressed path-style, whatever the bucket.
    custom = lite_client("s3", region=region, env={**env, "AWS_ENDPOINT_URL_S3": "http://localhost:4566"})
    assert isinstance(custom, S3Client)
    custom.delete_object(Bucket=bucket, Key="k")
    assert sent.pop()[1] == f"http://localhost:4566/{bucket}/k"


# --- parsing: the same bytes through botocore's parser -------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b"<Error><Code>NoSuchKey</Code><Message>m</Message><Key>k</Key><RequestId>r</RequestId><HostId>h</HostId>"
        b"<Nested><A>1</A></Nested><Empty/></Error>",
        b"",
        b"<Error><Code>cut sh",
        b"<ErrorResponse><Error><Type>Sender</Type><Code>X</Code></Error><RequestId>rid</RequestId></ErrorResponse>",
    ],
)
def test_an_error_parses_as_botocore_parses_it(body: bytes) -> None:
    theirs = RestXMLParser().parse(
        {"body": body, "headers": {}, "status_code": 404}, MODEL.operation_model("GetObject").output_shape
    )
    assert _s3xml.parse_error(404, body) == theirs["Error"]


def test_header_members_are_botocores_and_parse_alike() -> None:
    kinds = {"string": "s", "long": "i", "integer": "i", "boolean": "b", "timestamp": "t", "map": "m"}
    tables = {
        "PutObject": _s3xml.PUT_OBJECT_HEADERS,
        "GetObject": _s3xml.GET_OBJECT_HEADERS,
        "DeleteObject": _s3xml.DELETE_OBJECT_HEADERS,
    }
    for operation, table in tables.items():
        members = MODEL.operation_model(operation).output_shape.members
        expected = tuple(
            (name, shape.serialization["name"].lower(), kinds[shape.type_name])
            for name, shape in members.items()
            if shape.serialization.get("location") in ("header", "headers")
        )
        assert table == expected, operation
    headers = {
        "last-modified": "Tue, 01 Dec 2026 07:40:48 GMT", "content-length": "12", "x-amz-delete-marker": "true",
        "x-amz-meta-owner": "me", "expires": "Wed, 21 Oct 2015 07:28:00 GMT", "x-amz-mp-parts-count": "3",
        "x-amz-object-lock-retain-until-date": "2030-01-01T00:00:00.000Z", "etag": '"e"',
    }  # fmt: skip
    theirs = RestXMLParser().parse(
        {"body": b"", "headers": HeadersDict(headers), "status_code": 200},
        MODEL.operation_model("GetObject").output_shape,
    )
    theirs.pop("ResponseMetadata")
    theirs.pop("Body")
    theirs["ExpiresString"] = headers["expires"]  # botocore's S3 customisation (handlers.handle_expires_header)
    assert _s3xml.parse_headers(_s3xml.GET_OBJECT_HEADERS, headers) == theirs
