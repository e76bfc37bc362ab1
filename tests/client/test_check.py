"""``durable-harness check`` against the local server (the local kit over real HTTP, the CLI in
its own process): every step passes, and a wrong token fails the first turn with the server's reason."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from durable_harness.server.auth import TokenAuth

from tests.client.conftest import make_kit
from tests.client.test_cli import cli
from tests.deploy.test_check import steps
from tests.support import serve

STEPS = ["health", "turn", "approval", "resume-middle", "resume-tail", "run-api", "cancel"]


@pytest.fixture(scope="module")
def token_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A local server that accepts only the bearer token ``right``."""
    auth = TokenAuth.from_entries(f"tester:{hashlib.sha256(b'right').hexdigest()}")
    with serve(make_kit(Path(tmp_path_factory.mktemp("data")), authenticator=auth).app) as base:
        yield base


def test_check_passes_against_the_local_server(token_url: str) -> None:
    result = cli("check", token_url, "--token", "right", "--approval-prompt", "Save a note: checked")
    assert result.returncode == 0, result.stdout + result.stderr
    assert steps(result.stdout) == dict.fromkeys(STEPS, "ok"), result.stdout
    lines = {line.split()[1]: line for line in result.stdout.splitlines() if line.startswith("ok ")}
    assert "first chunk " in lines["turn"] and "finish stop" in lines["turn"]
    assert "approved save_note; continuation wrun_" in lines["approval"]
    assert "cancelled after its first chunk" in lines["cancel"]
    assert result.stdout.splitlines()[-1] == "durable-harness check: every step passed"


def test_check_without_an_approval_turn_says_the_approval_step_was_skipped(token_url: str) -> None:
    result = cli("check", token_url, "--token", "right")
    assert result.returncode == 0, result.stdout + result.stderr
    approval = next(line for line in result.stdout.splitlines() if line.split()[1] == "approval")
    assert "skipped: the turn asked for no approval" in approval


def test_check_fails_at_the_turn_with_the_reason_for_a_wrong_token(token_url: str) -> None:
    result = cli("check", token_url, "--token", "wrong")
    assert result.returncode == 1
    assert steps(result.stdout) == {"health": "ok", "turn": "FAIL"}, result.stdout
    [reason] = result.stderr.splitlines()
    assert reason.startswith("durable-harness check: failed at turn: HTTP 401"), reason
    assert "Traceback" not in result.stdout + result.stderr


def test_check_fails_when_the_approval_prompt_asks_for_no_approval(token_url: str) -> None:
    result = cli("check", token_url, "--token", "right", "--approval-prompt", "Hello there")
    assert result.returncode == 1
    assert steps(result.stdout)["approval"] == "FAIL"
    assert "failed at approval: the turn 'Hello there' asked for no tool approval" in result.stderr
