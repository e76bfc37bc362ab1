"""Fixtures of the lite clients' tests: moto over real HTTP on loopback (:class:`MotoEndpoint`), a
boto3 client on the same moto to compare with, and a factory of lite clients pointed at it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from lambda_fastpath import aws as lite
from lambda_fastpath.aws import _client
from moto import mock_aws

from tests.motoserver import MotoEndpoint

REGION = "us-east-1"


@pytest.fixture(autouse=True)
def _no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retries without the waits between them (the waits are botocore's formula, tested on its own)."""
    monkeypatch.setattr(_client, "backoff", lambda attempt, **_: 0.0)


@pytest.fixture
def endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[MotoEndpoint]:
    """moto (with credentials of its own in the environment) served on a loopback port."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    with mock_aws(), MotoEndpoint() as served:
        yield served


def lite_env(url: str, **extra: str) -> dict[str, str]:
    """The environment of a Lambda function whose AWS endpoint is ``url``."""
    return {
        "AWS_ACCESS_KEY_ID": "AKIDLITE",
        "AWS_SECRET_ACCESS_KEY": "secret",
        "AWS_SESSION_TOKEN": "token",
        "AWS_REGION": REGION,
        "AWS_ENDPOINT_URL": url,
        **extra,
    }


@pytest.fixture
def make_lite(endpoint: MotoEndpoint) -> Callable[[str], Any]:
    """A lite client of a service, talking to :func:`endpoint` over HTTP."""

    def make(service: str) -> Any:
        client = lite.client(service, env=lite_env(endpoint.url))
        assert client is not None, service
        return client

    return make
