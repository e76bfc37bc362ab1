"""Durable waits through the HTTP API (issue 21): the signed event URL, the run API's events route,
duplicates, tampered and expired URLs, payload bounds, timeouts, cancels.

Real HTTP on loopback against the local kit (SQLite + files + the in-process orchestrator); the
model is scripted (tests/waits/wait_agent.py).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from durable_harness.approvals import ApprovalSecret
from durable_harness.server.local import build_local_kit
from durable_harness.waits import MAX_EVENT_BYTES, EventClaims, sign_event_token

from tests.support import message_of, parse_sse_body, serve, user_message
from tests.waits.wait_agent import build_agent

SECRET = "s" * 40
BOUND = 60.0  # seconds any observed condition may take on a busy machine


@dataclass
class Turn:
    """A chat POST streaming in a thread."""

    run_id: str = ""
    chunks: list[dict[str, Any]] = field(default_factory=list)
    headers: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)


def start_turn(url: str, text: str) -> Turn:
    turn = Turn()

    def run() -> None:
        body = {"id": "chat-1", "messages": [user_message(text)]}
        with httpx.stream("POST", f"{url}/api/chat", json=body, timeout=BOUND) as response:
            turn.run_id = response.headers["x-workflow-run-id"]
            turn.headers.set()
            turn.chunks = parse_sse_body(response.read())
        turn.done.set()

    threading.Thread(target=run, daemon=True).start()
    assert turn.headers.wait(BOUND)
    return turn


def wait_status(url: str, run_id: str, status: str) -> dict[str, Any]:
    """Poll the run API until the run has ``status`` (bounded)."""
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        body = httpx.get(f"{url}/api/runs/{run_id}").json()
        if body["status"] == status:
            return body
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} never reached {status}")


@pytest.fixture
def wait_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "waits"
    folder.mkdir()
    monkeypatch.setenv("WAIT_DIR", str(folder))
    monkeypatch.setenv("TOOL_APPROVAL_SECRET", SECRET)
    return folder


@pytest.fixture
def url(wait_dir: Path, tmp_path: Path) -> Iterator[str]:
    kit = build_local_kit(build_agent(), tmp_path / "data", static_dir=None)
    with serve(kit.app) as base:
        kit.runner.public_url = base
        yield base


def effects(wait_dir: Path) -> list[str]:
    path = wait_dir / "effects.log"
    return path.read_text().splitlines() if path.exists() else []


def test_the_signed_url_completes_the_waiting_run_in_the_same_message(url: str, wait_dir: Path) -> None:
    turn = start_turn(url, "build it")
    status = wait_status(url, turn.run_id, "awaiting_event")
    assert [(w["name"], w["kind"]) for w in status["waitingFor"]] == [("build-done", "event")]
    hook = (wait_dir / "url.txt").read_text()
    assert hook.startswith(f"{url}/hooks/events/")
    answer = httpx.post(hook, json={"status": "passed"})
    assert answer.status_code == 202 and answer.json()["outcome"] == "resumed"
    assert turn.done.wait(BOUND)
    chunks = turn.chunks
    assert [c["type"] for c in chunks].count("finish") == 1 and chunks[-1]["type"] == "finish"
    message = message_of(chunks)
    tool = next(p for p in message["parts"] if p["type"] == "tool-run_build")
    assert tool["output"] == {"build": "build-1", "status": "passed"}
    assert [p["data"]["status"] for p in message["parts"] if p["type"] == "data-wait"] == ["resumed"]
    assert effects(wait_dir) == ["started acme/app"]
    # A second delivery: 409 with the first one's outcome, and nothing runs again.
    again = httpx.post(hook, json={"status": "failed"})
    assert again.status_code == 409 and again.json()["outcome"] == "resumed"
    assert again.json()["error"]["code"] == "duplicate_event"
    assert effects(wait_dir) == ["started acme/app"]
    assert httpx.get(f"{url}/api/runs/{turn.run_id}").json()["status"] == "finished"


def test_tampered_expired_and_oversized_deliveries_change_nothing(url: str, wait_dir: Path) -> None:
    turn = start_turn(url, "build it")
    wait_status(url, turn.run_id, "awaiting_event")
    hook = (wait_dir / "url.txt").read_text()
    body, _, mac = hook.rpartition("/")[2].partition(".")
    tampered = f"{url}/hooks/events/{body}.{'A' if mac[0] != 'A' else 'B'}{mac[1:]}"
    refused = httpx.post(tampered, json={"status": "passed"})
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_token"
    past = EventClaims(turn.run_id, "call-1", "build-done", time.time() - 1)
    expired = sign_event_token(ApprovalSecret.from_value(SECRET), past)
    gone = httpx.post(f"{url}/hooks/events/{expired}", json={"status": "passed"})
    assert gone.status_code == 410 and gone.json()["error"]["code"] == "expired"
    big = httpx.post(hook, content=json.dumps({"blob": "x" * MAX_EVENT_BYTES}))
    assert big.status_code == 413 and big.json()["error"]["code"] == "payload_too_large"
    bad = httpx.post(hook, content=b"{not json")
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_json"
    named = httpx.post(f"{url}/api/runs/{turn.run_id}/events/bad%20name", json={})
    assert named.status_code == 400 and named.json()["error"]["code"] == "invalid_event_name"
    assert httpx.get(f"{url}/api/runs/{turn.run_id}").json()["status"] == "awaiting_event"
    # The valid URL still works afterwards: none of the refused deliveries was recorded.
    assert httpx.post(hook, json={"status": "passed"}).status_code == 202
    assert turn.done.wait(BOUND)
    assert message_of(turn.chunks)["parts"][-1] == {
        "type": "text",
        "text": 'Done: {"build": "build-1", "status": "passed"}',
        "state": "done",
    }


def test_the_run_api_delivers_an_event_and_a_cancel_ends_a_waiting_run(url: str, wait_dir: Path) -> None:
    first = start_turn(url, "build it")
    wait_status(url, first.run_id, "awaiting_event")
    delivered = httpx.post(f"{url}/api/runs/{first.run_id}/events/build-done", json={"status": "green"})
    assert delivered.status_code == 202 and delivered.json()["outcome"] == "resumed"
    assert first.done.wait(BOUND)
    tool = next(p for p in message_of(first.chunks)["parts"] if p["type"] == "tool-run_build")
    assert tool["output"]["status"] == "green"

    second = start_turn(url, "build it again")
    wait_status(url, second.run_id, "awaiting_event")
    hook = (wait_dir / "url.txt").read_text()
    cancelled = httpx.post(f"{url}/api/runs/{second.run_id}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert second.done.wait(BOUND)
    assert [c["type"] for c in second.chunks].count("finish") == 1 and second.chunks[-1]["type"] == "finish"
    late = httpx.post(f"{url}/api/runs/{second.run_id}/events/build-done", json={})
    assert late.status_code == 409 and late.json()["error"]["code"] == "run_ended"
    assert httpx.post(hook, json={}).status_code == 410


def test_a_wait_timeout_reaches_the_tool_as_wait_timeout(
    url: str, wait_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WAIT_TIMEOUT", "1")
    turn = start_turn(url, "build it")
    assert turn.done.wait(BOUND)  # the orchestrator's timer resumes the run once the timeout passed
    tool = next(p for p in message_of(turn.chunks)["parts"] if p["type"] == "tool-run_build")
    assert tool["output"]["status"] == "timeout" and "build-done" in tool["output"]["error"]
    assert any(c["type"] == "data-wait" for c in turn.chunks)
    assert effects(wait_dir) == ["started acme/app"]
