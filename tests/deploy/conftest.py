"""Fixtures of the deploy tests: the template deployed into moto, with the real handlers."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import pytest

from . import agents
from .stack import MotoStack

TOKEN = "example-token"
"""The bearer token of the sample Function URL events (events/chat-*.json)."""

DEFAULT_OVERRIDES = {
    "Agent": "tests.deploy.agents:build_agent",
    "SliceSeconds": "0",  # one step per slice: every run takes several slices
    "AuthMode": "token",
    "AuthTokenHashes": f"tester:{hashlib.sha256(TOKEN.encode()).hexdigest()}",
    "ModelId": "demo",
}


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker that sets template parameters for one test."""
    config.addinivalue_line("markers", "stack_parameters(**overrides): template parameters of the moto stack")
    config.addinivalue_line(
        "markers", "stack_secrets(**secrets): parameter=(name, value) secrets created first, their ARNs passed"
    )


@pytest.fixture
def aws_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake credentials and a region; no real AWS account is ever reached."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")  # no X-Ray daemon here


@contextmanager
def deployed_stack(
    overrides: Mapping[str, str] | None = None, secrets: Mapping[str, tuple[str, str]] | None = None
) -> Iterator[MotoStack]:
    """template.yaml in moto with these parameters (over :data:`DEFAULT_OVERRIDES`) and secrets;
    on a clean exit, every AWS call made is checked against the template's IAM policies."""
    agents.reset()
    made = MotoStack({**DEFAULT_OVERRIDES, **(overrides or {})}, secrets=secrets)
    with made.deployed():
        yield made
        if agents.CONTROL.gate is not None:
            agents.CONTROL.gate.set()  # never leave a slice waiting
        made.check_iam()


@pytest.fixture
def stack(aws_environment: None, request: pytest.FixtureRequest) -> Iterator[MotoStack]:
    """template.yaml in moto (see stack.py); every AWS call made is checked against its IAM policies."""
    marker = request.node.get_closest_marker("stack_parameters")
    secrets = request.node.get_closest_marker("stack_secrets")
    with deployed_stack(marker.kwargs if marker else None, secrets.kwargs if secrets else None) as made:
        yield made
