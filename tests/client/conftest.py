"""A real local server (embedded storage, the demo agent) on loopback, one per test module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from durable_harness import ApprovalSecret
from durable_harness.demo import build_demo_agent
from durable_harness.server.local import LocalKit, build_local_kit

from tests.support import serve

SECRET = ApprovalSecret.from_value("client-tests-secret-0123456789abcdef")


def make_kit(root: Path, *, delay: float = 0.001, **kwargs: object) -> LocalKit:
    """The local kit over ``root`` with the demo agent (signed approvals)."""
    return build_local_kit(build_demo_agent(delay=delay, approval_secret=SECRET), root, **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> LocalKit:
    return make_kit(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="module")
def url(kit: LocalKit) -> Iterator[str]:
    with serve(kit.app) as base:
        yield base
