"""The point of the lite clients: importing them and making one loads none of botocore's session,
client machinery or boto3 (checked in a fresh interpreter)."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
from lambda_fastpath import aws as lite
env = {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b", "AWS_REGION": "eu-west-1"}
made = [lite.client(name, env=env) for name in ("dynamodb", "stepfunctions", "events", "s3")]
assert all(made), made
assert made[0].endpoint_url == "https://dynamodb.eu-west-1.amazonaws.com", made[0].endpoint_url
print(sorted(m for m in ("botocore.session", "botocore.client", "botocore.config", "boto3") if m in sys.modules))
"""


def test_lite_clients_load_no_botocore_session_client_or_boto3() -> None:
    """``botocore.session``, ``botocore.client``, ``botocore.config`` and ``boto3`` stay unloaded."""
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


CREDS = {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}


def test_endpoints_and_when_there_is_no_lite_client() -> None:
    """botocore's endpoint variables and partitions; None where botocore must serve instead."""
    from lambda_fastpath import aws as lite

    def url(service: str, **env: str) -> str | None:
        made = lite.client(service, env={**CREDS, **env})
        return None if made is None else str(made.endpoint_url)

    assert url("stepfunctions", AWS_REGION="eu-west-1") == "https://states.eu-west-1.amazonaws.com"
    assert url("dynamodb", AWS_DEFAULT_REGION="cn-north-1") == "https://dynamodb.cn-north-1.amazonaws.com.cn"
    assert url("events", AWS_REGION="us-east-1", AWS_ENDPOINT_URL="http://x:1/") == "http://x:1"
    assert url(
        "events", AWS_REGION="us-east-1", AWS_ENDPOINT_URL="http://x:1", AWS_ENDPOINT_URL_EVENTBRIDGE="http://e:2"
    ) == ("http://e:2")
    assert url("dynamodb", AWS_REGION="us-gov-west-1") is None  # another partition: botocore's
    assert url("dynamodb", AWS_REGION="us-east-1", AWS_USE_FIPS_ENDPOINT="true") is None
    assert url("sqs", AWS_REGION="us-east-1") is None  # no lite client for it
    assert url("dynamodb") is None  # no Region
    assert lite.client("dynamodb", region="us-east-1", env={"AWS_ACCESS_KEY_ID": "a"}) is None  # no secret
    assert url("dynamodb", AWS_REGION="us-east-1", AWS_SESSION_TOKEN="t") is not None
