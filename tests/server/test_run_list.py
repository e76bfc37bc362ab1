"""``GET /api/runs``: the caller's runs over real HTTP on the local kit (SQLite), with token auth:
paging with the opaque cursor, isolation between principals, filters, and 400s that say what to fix."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from durable_harness import ApprovalSecret
from durable_harness.demo import build_demo_agent
from durable_harness.errors import InvalidRequestError
from durable_harness.ports import ListQuery
from durable_harness.server.auth import TokenAuth
from durable_harness.server.local import LocalKit, build_local_kit
from durable_harness.server.runlist import DEFAULT_LIMIT, STATUS_GROUPS, STATUSES, encode_cursor, list_runs
from durable_harness.storage.memory import MemoryCheckpointStore

from tests.support import parse_sse_body, serve, user_message

ALICE, BOB = "alice-token-1234", "bob-token-5678"
HASHES = ",".join(f"{n}:{hashlib.sha256(t.encode()).hexdigest()}" for n, t in [("alice", ALICE), ("bob", BOB)])


@pytest.fixture
def kit(tmp_path: Path) -> LocalKit:
    agent = build_demo_agent(delay=0, approval_secret=ApprovalSecret.from_value("s3cret-" + "0" * 32))
    return build_local_kit(agent, tmp_path / "data", authenticator=TokenAuth.from_entries(HASHES))


@pytest.fixture
def url(kit: LocalKit) -> Iterator[str]:
    with serve(kit.app) as base:
        yield base


def chat(url: str, text: str, token: str, chat_id: str) -> str:
    body = json.dumps({"id": chat_id, "messages": [user_message(text, f"u-{text}")]})
    response = httpx.post(f"{url}/api/chat", content=body, headers={"authorization": f"Bearer {token}"}, timeout=30)
    assert response.status_code == 200
    return response.headers["x-workflow-run-id"]


def runs(url: str, token: str = ALICE, **params: Any) -> httpx.Response:
    return httpx.get(f"{url}/api/runs", params=params, headers={"authorization": f"Bearer {token}"}, timeout=10)


def every_page(url: str, token: str = ALICE, **params: Any) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = []
    cursor = None
    for _ in range(50):
        page = runs(url, token, **params, **({"cursor": cursor} if cursor else {})).json()
        listed += page["runs"]
        cursor = page["nextCursor"]
        if cursor is None:
            return listed
    raise AssertionError("the pages never end")


def test_pages_of_the_callers_runs_newest_first_and_never_anothers(url: str) -> None:
    alice = [chat(url, f"hello {i}", ALICE, "chat-a" if i % 2 else "chat-b") for i in range(5)]
    bob = [chat(url, f"hi {i}", BOB, "chat-a") for i in range(2)]  # the same chat id, another principal
    first = runs(url, limit=2).json()
    assert [r["runId"] for r in first["runs"]] == alice[:-3:-1] and first["nextCursor"]
    listed = every_page(url, limit=2)
    assert [r["runId"] for r in listed] == alice[::-1]
    assert all(r["status"] == "finished" and r["createdAt"] for r in listed)
    assert [r["runId"] for r in every_page(url, BOB)] == bob[::-1]
    # The chat filter is inside the caller's partition too.
    assert [r["runId"] for r in every_page(url, chat="chat-a")] == [alice[3], alice[1]]
    assert [r["runId"] for r in every_page(url, BOB, chat="chat-a")] == bob[::-1]
    # A cursor made from one of bob's runs, used by alice, lists only alice's runs.
    forged = encode_cursor(("9999-12-31T00:00:00+00:00", bob[0]))
    assert {r["runId"] for r in every_page(url, cursor=forged)} == set(alice)


def test_status_filter_takes_statuses_and_groups(url: str) -> None:
    finished = chat(url, "hello", ALICE, "c")
    paused = chat(url, "Please save a note: call the plumber", ALICE, "c")
    assert [r["runId"] for r in every_page(url, status="waiting")] == [paused]
    assert [r["runId"] for r in every_page(url, status="finished")] == [finished]
    assert [r["runId"] for r in every_page(url, status="finished,awaiting_tool_approval")] == [paused, finished]
    assert every_page(url, status="running,failed") == []
    assert STATUS_GROUPS["waiting"] == {s for s in STATUSES if s.startswith("awaiting_")}


@pytest.mark.parametrize(
    ("params", "code", "says"),
    [
        ({"status": "done"}, "invalid_status", "running, waiting"),
        ({"limit": "0"}, "invalid_limit", "1 to 100"),
        ({"limit": "101"}, "invalid_limit", "1 to 100"),
        ({"limit": "two"}, "invalid_limit", "1 to 100"),
        ({"cursor": "abc"}, "invalid_cursor", "nextCursor"),
        ({"cursor": "c1." + base64.urlsafe_b64encode(b'["x","not-a-run"]').decode()}, "invalid_cursor", "nextCursor"),
        ({"cursor": "c1.%%%"}, "invalid_cursor", "nextCursor"),
        ({"page": "2"}, "invalid_query", "status, chat, limit and cursor"),
        ({"chat": "x" * 201}, "invalid_chat_id", "200"),
    ],
)
def test_bad_parameters_are_a_400_that_says_what_to_fix(url: str, params: dict[str, str], code: str, says: str) -> None:
    response = runs(url, **params)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == code and says in response.json()["error"]["message"]


def test_the_list_needs_credentials_and_is_in_the_openapi_document(url: str) -> None:
    assert httpx.get(f"{url}/api/runs").status_code == 401
    assert httpx.post(f"{url}/api/runs", headers={"authorization": f"Bearer {ALICE}"}).status_code == 405
    document = httpx.get(f"{url}/openapi.json").json()
    names = [p["name"] for p in document["paths"]["/api/runs"]["get"]["parameters"]]
    assert names == ["status", "chat", "limit", "cursor"]
    assert "501" in document["paths"]["/api/runs"]["get"]["responses"]


async def test_a_store_that_cannot_list_runs_is_a_501_that_names_the_stores_that_can() -> None:
    with pytest.raises(InvalidRequestError) as raised:
        await list_runs(MemoryCheckpointStore(), "alice", ListQuery(DEFAULT_LIMIT))
    assert (raised.value.status, raised.value.code) == (501, "not_supported")
    assert "SQLite" in str(raised.value) and "DynamoDB" in str(raised.value)


def test_a_runs_status_says_when_its_slices_began_and_its_timed_chunks_were_written(url: str) -> None:
    run_id = chat(url, "What is the weather in Rome?", ALICE, "c")
    headers = {"authorization": f"Bearer {ALICE}"}
    chunks = parse_sse_body(httpx.get(f"{url}/api/chat/{run_id}/stream", headers=headers, timeout=10).content)
    status = httpx.get(f"{url}/api/runs/{run_id}", headers=headers).json()
    [(first, began)] = status["sliceTimes"]
    assert first == 0 and chunks[0]["type"] == "start"
    timed = {"start-step", "finish-step", "tool-input-available", "tool-output-available", "tool-approval-request"}
    assert [index for index, _ in status["chunkTimes"]] == [i for i, c in enumerate(chunks) if c["type"] in timed]
    times = [at for _, at in status["chunkTimes"]]
    assert times == sorted(times) and began <= times[0]


def test_a_runs_status_has_no_cost_estimate_locally(url: str) -> None:
    # The local kit has no AWS bill: GET /api/runs/{id} leaves `cost` out (the inspector says why).
    run_id = chat(url, "Hello", ALICE, "chat-local-cost")
    status = httpx.get(f"{url}/api/runs/{run_id}", headers={"authorization": f"Bearer {ALICE}"}, timeout=10)
    assert status.status_code == 200
    assert status.json()["status"] == "finished" and status.json()["slices"] >= 1
    assert "cost" not in status.json()
