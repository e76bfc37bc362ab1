"""Fixtures of the security suites: one token-mode demo server per module, two principals, and
``SAVED_NOTES`` replaced by :class:`~tests.security.helpers.Notes`, which records every write (one
entry per ``save_note`` execution, so that a second execution of the same note is seen)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from durable_harness import ApprovalSecret, demo
from durable_harness.demo import build_demo_agent
from durable_harness.server.auth import TokenAuth
from durable_harness.server.local import build_local_kit
from hypothesis.configuration import set_hypothesis_home_dir

from tests.security.helpers import ALICE_TOKEN, APPROVAL_SECRET, BOB_TOKEN, TOKEN_HASHES, DemoChat, Notes, serve_asgi

# The fuzz suite keeps no example database (derandomized), but hypothesis still caches things on
# disk: keep them out of the work tree.
set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "durable-harness-hypothesis")


@pytest.fixture
def notes(monkeypatch: pytest.MonkeyPatch) -> Notes:
    saved = Notes()
    monkeypatch.setattr(demo, "SAVED_NOTES", saved)  # save_note looks the global up at each call
    return saved


@pytest.fixture(scope="module")
def demo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The demo agent (signed approvals) in token mode; one per module: tests use their own chat ids."""
    agent = build_demo_agent(delay=0, approval_secret=ApprovalSecret.from_value(APPROVAL_SECRET))
    kit = build_local_kit(agent, tmp_path_factory.mktemp("demo"), authenticator=TokenAuth.from_entries(TOKEN_HASHES))
    with serve_asgi(kit.app) as url:
        yield url


@pytest.fixture
def http(demo_server: str, notes: Notes) -> Iterator[httpx.Client]:
    with httpx.Client(timeout=15) as client:
        yield client


@pytest.fixture
def chat(request: pytest.FixtureRequest) -> str:
    """This test's chat id."""
    return f"chat-{request.node.name}"


@pytest.fixture
def alice(http: httpx.Client, demo_server: str) -> DemoChat:
    return DemoChat(http, demo_server, token=ALICE_TOKEN)


@pytest.fixture
def bob(http: httpx.Client, demo_server: str) -> DemoChat:
    return DemoChat(http, demo_server, token=BOB_TOKEN)
