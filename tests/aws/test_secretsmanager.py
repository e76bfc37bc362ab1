"""Reading secrets (durable_harness.secretsmanager): Powertools Parameters against moto.

Each test gets a fresh Powertools secrets provider (an empty cache) on a client without retries,
so that injected faults (tests/aws/conftest.py's :class:`Fault`, on botocore's ``before-send``)
reach the code at once.
"""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.parameters import SecretsProvider
from aws_lambda_powertools.utilities.parameters.constants import DEFAULT_PROVIDERS
from botocore.config import Config
from durable_harness import secretsmanager
from durable_harness.errors import FatalError, RetryableError, SecretError, SecretUnavailableError
from durable_harness.secretsmanager import read_secret

from tests.aws.conftest import REGION, Fault

JSON_11 = "application/x-amz-json-1.1"


@pytest.fixture
def secrets(aws: None, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A Secrets Manager client, also the one Powertools reads through (with an empty cache)."""
    client = boto3.client("secretsmanager", region_name=REGION, config=Config(retries={"total_max_attempts": 1}))
    monkeypatch.setitem(DEFAULT_PROVIDERS, "secrets", SecretsProvider(boto3_client=client))
    return client


def test_a_secret_is_read_by_arn_or_name_and_cached_for_max_age(secrets: Any) -> None:
    arn = secrets.create_secret(Name="tokens", SecretString="v1")["ARN"]
    assert read_secret(arn, max_age=0) == "v1"  # cached, but expired at once
    secrets.put_secret_value(SecretId=arn, SecretString="v2")
    assert read_secret(arn) == "v2"  # read again, cached for 300 s
    secrets.put_secret_value(SecretId=arn, SecretString="v3")
    assert read_secret(arn) == "v2"  # from the cache: no second read within max_age
    assert read_secret("tokens", max_age=0) == "v3"  # by name (another cache entry)
    binary = secrets.create_secret(Name="binary", SecretBinary=b"bin-key")["ARN"]
    assert read_secret(binary) == "bin-key"


def test_a_missing_secret_is_a_fatal_error_naming_it(secrets: Any) -> None:
    missing = f"arn:aws:secretsmanager:{REGION}:123456789012:secret:nowhere-AbCdEf"
    with pytest.raises(SecretError) as raised:
        read_secret(missing)
    assert isinstance(raised.value, FatalError) and not isinstance(raised.value, RetryableError)
    assert raised.value.code == "ResourceNotFoundException" and raised.value.secret_id == missing
    assert str(raised.value) == f"could not read the secret {missing}: ResourceNotFoundException"


@pytest.mark.parametrize(
    ("status", "body", "error", "code"),
    [
        (400, b'{"__type":"ThrottlingException","message":"slow"}', SecretUnavailableError, "ThrottlingException"),
        (500, b'{"__type":"InternalServiceError","message":"oops"}', SecretUnavailableError, "InternalServiceError"),
        (0, b"", SecretUnavailableError, "ReadTimeoutError"),
        (400, b'{"__type":"AccessDeniedException","message":"not authorized"}', SecretError, "AccessDeniedException"),
        (400, b'{"__type":"DecryptionFailure","message":"KMS"}', SecretError, "DecryptionFailure"),
    ],
)
def test_transient_failures_are_retryable_and_the_others_fatal(
    secrets: Any, status: int, body: bytes, error: type[Exception], code: str
) -> None:
    arn = secrets.create_secret(Name="flaky", SecretString="value-never-shown")["ARN"]
    fault = Fault(secrets, "GetSecretValue", status, body, JSON_11, times=1)
    with pytest.raises(error) as raised:
        read_secret(arn)
    assert fault.attempts == 1 and raised.value.code == code  # type: ignore[attr-defined]
    assert isinstance(raised.value, RetryableError) is (error is SecretUnavailableError)
    assert read_secret(arn) == "value-never-shown"  # a failure is not cached


def test_the_start_up_check_reads_the_approval_secret_now_and_refuses_a_short_one(
    secrets: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from durable_harness.approvals import ApprovalSecret
    from durable_harness.errors import ApprovalSecretError

    monkeypatch.setattr(secretsmanager, "_client_factory", lambda: secrets)  # the fixture's client: no retries
    arn = secrets.create_secret(Name="approval", SecretString="short-approval-key")["ARN"]
    monkeypatch.setenv("TOOL_APPROVAL_SECRET_ARN", arn)
    with pytest.raises(ApprovalSecretError) as raised:
        ApprovalSecret().check()
    assert str(raised.value).startswith(f"the approval secret ({arn}) is 18 bytes; it must be at least 32")
    assert "short-approval-key" not in str(raised.value)
    secrets.put_secret_value(SecretId=arn, SecretString="k" * 32)
    ApprovalSecret().check()  # read again, not from a cache: the new value passes
    binary = secrets.create_secret(Name="approval-binary", SecretBinary=b"b" * 31)["ARN"]
    with pytest.raises(ApprovalSecretError, match="is 31 bytes"):
        ApprovalSecret(secret_id=binary).check()
    # A secret that is not there is a start-up error too; one that cannot be read right now is not.
    with pytest.raises(SecretError, match="ResourceNotFoundException"):
        ApprovalSecret(secret_id=f"arn:aws:secretsmanager:{REGION}:123456789012:secret:nowhere-AbCdEf").check()
    Fault(secrets, "GetSecretValue", 400, b'{"__type":"ThrottlingException","message":"slow"}', JSON_11, times=1)
    with caplog.at_level("WARNING", logger="durable_harness.approvals"):
        ApprovalSecret().check()
    assert "not checked at start-up" in caplog.text and "ThrottlingException" in caplog.text


def test_the_start_up_check_is_the_approval_secrets_one_read_until_it_expires(
    secrets: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from durable_harness.approvals import ApprovalSecret

    monkeypatch.setattr(secretsmanager, "_client_factory", lambda: secrets)  # the check's client, and Powertools'
    reads: list[str] = []
    secrets.meta.events.register("before-call.secrets-manager.GetSecretValue", lambda **kw: reads.append("read"))
    arn = secrets.create_secret(Name="approval-once", SecretString="k" * 32)["ARN"]
    approvals = ApprovalSecret(secret_id=arn)
    approvals.check()  # the function's start-up
    signature = approvals.sign("approval-c1", "c1", "remove", {"name": "gamma"})  # its first approval
    assert approvals.verify(signature, "approval-c1", "c1", "remove", {"name": "gamma"})
    assert reads == ["read"]  # one GetSecretValue for the cold start, not a second for the first approval
    secrets.put_secret_value(SecretId=arn, SecretString="n" * 32)
    expired = ApprovalSecret(secret_id=arn, max_age=0)
    expired.check()
    assert expired.keys() == ["n" * 32] and reads == ["read"] * 3  # past max_age it is read again
