"""The lite clients' SigV4 signer against botocore's own signers, byte for byte.

Each case signs the same request (URL, headers, body) at the same fixed time with
``lambda_fastpath.aws._sigv4.sign`` and with ``botocore.auth.SigV4Auth`` /
``S3SigV4Auth``; every header botocore adds must come out identical.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import botocore.auth
import pytest
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials
from lambda_fastpath.aws._sigv4 import sign
from lambda_fastpath.aws._transport import Credentials

NOW = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)
KEYS = ("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
MODEL = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-3-5-haiku-20241022-v1:0"
KEY = "runs/ä b/ünïcode key+&=.json"

CASES: list[tuple[str, str, str, dict[str, str], bytes, str, bool]] = [
    # (case, method, url, headers, body, service, s3)
    ("dynamodb", "POST", "https://dynamodb.us-east-1.amazonaws.com/",
     {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "DynamoDB_20120810.PutItem",
      "User-Agent": "lite"}, b'{"TableName": "t"}', "dynamodb", False),
    ("loopback port", "POST", "http://127.0.0.1:50123/",
     {"content-type": "application/x-amz-json-1.0", "x-amz-target": "AWSStepFunctions.StartExecution"},
     b"{}", "states", False),
    ("query", "GET", "https://events.eu-west-1.amazonaws.com/things?b=2&a=x%20y&a=%2F%3A&empty=",
     {"Accept": "application/json", "X-Amzn-Trace-Id": "Root=1-abc"}, b"", "events", False),
    ("bedrock model arn", "POST",
     f"https://bedrock-runtime.us-east-1.amazonaws.com/model/{quote(MODEL, safe='')}/converse-stream",
     {"Content-Type": "application/json", "Accept": "application/vnd.amazon.eventstream"},
     b'{"messages": []}', "bedrock", False),
    ("s3 unicode key", "PUT", f"https://harness-chunks.s3.us-east-1.amazonaws.com/{quote(KEY, safe='/~')}",
     {"Content-Type": "application/octet-stream", "If-None-Match": "*"}, b"segment \x00\xff bytes", "s3", True),
    ("s3 list", "GET",
     "https://harness-chunks.s3.us-east-1.amazonaws.com/?list-type=2&prefix=runs%2Fr%201%2F&continuation-token=a%2Bb%3D",
     {}, b"", "s3", True),
    ("s3 path style, empty body", "GET", f"http://127.0.0.1:9000/harness-chunks/{quote(KEY, safe='/~')}",
     {"Range": "bytes=10-"}, b"", "s3", True),
]  # fmt: skip


def botocore_headers(method: str, url: str, headers: dict[str, str], body: bytes, *, service: str, s3: bool,
                     token: str | None, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:  # fmt: skip
    """The headers botocore's signer adds to the request, lower-cased."""
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: NOW.replace(tzinfo=None))
    request = AWSRequest(method=method, url=url, headers=dict(headers), data=body)
    signer_cls: Any = botocore.auth.S3SigV4Auth if s3 else botocore.auth.SigV4Auth
    signer_cls(BotoCredentials(*KEYS, token), service, "us-east-1" if "eu-west-1" not in url else "eu-west-1").add_auth(
        request
    )
    before = {name.lower() for name in headers}
    return {name.lower(): value for name, value in request.headers.items() if name.lower() not in before}


@pytest.mark.parametrize("token", [None, "FwoGZXIvYXdzEJr//////////wEaDGV4YW1wbGU+token/="])
@pytest.mark.parametrize(
    ("case", "method", "url", "headers", "body", "service", "s3"), CASES, ids=[c[0] for c in CASES]
)
def test_sign_matches_botocore(
    case: str, method: str, url: str, headers: dict[str, str], body: bytes, service: str, s3: bool,
    token: str | None, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Every header botocore's signer adds (date, token, content hash, authorization) is identical."""
    region = "eu-west-1" if "eu-west-1" in url else "us-east-1"
    expected = botocore_headers(
        method, url, headers, body, service=service, s3=s3, token=token, monkeypatch=monkeypatch
    )
    ours = sign(method, url, headers, body, credentials=Credentials(*KEYS, token), region=region, service=service,
                now=NOW, s3=s3)  # fmt: skip
    assert ours == expected
    assert ("x-amz-security-token" in ours) == (token is not None)
    assert ("x-amz-content-sha256" in ours) == s3


def test_a_different_time_or_key_changes_the_signature() -> None:
    """The signature depends on the time and the secret (a signer returning a constant would pass the parity test
    only if botocore did too, but this pins that the inputs are used)."""
    url, body = "https://dynamodb.us-east-1.amazonaws.com/", b"{}"
    base = sign("POST", url, {}, body, credentials=Credentials(*KEYS), region="us-east-1", service="dynamodb", now=NOW)
    later = sign("POST", url, {}, body, credentials=Credentials(*KEYS), region="us-east-1", service="dynamodb",
                 now=NOW.replace(second=8))  # fmt: skip
    other = sign("POST", url, {}, body, credentials=Credentials(KEYS[0], "other"), region="us-east-1",
                 service="dynamodb", now=NOW)  # fmt: skip
    assert len({base["authorization"], later["authorization"], other["authorization"]}) == 3
