"""A principal's runs, newest first (``PrincipalRuns.runs_of``), against SQLite and DynamoDB under moto:
paging, isolation between principals, the status and chat filters."""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from durable_harness.aws import DynamoCheckpointStore
from durable_harness.ids import new_run_id
from durable_harness.ports import ListQuery, PrincipalRuns, RunListing, StoredRun
from durable_harness.storage import SqliteCheckpointStore
from moto import mock_aws

from tests.motoserver import create_runs_table


class _Clock:
    """A clock that moves a millisecond at every read, so that DynamoDB creation times never tie."""

    def __init__(self) -> None:
        self._ticks = itertools.count()

    def __call__(self) -> float:
        return 1_800_000_000.0 + next(self._ticks) / 1000


@pytest.fixture(params=["sqlite", "dynamodb"])
def store(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    if request.param == "sqlite":
        made = SqliteCheckpointStore(tmp_path / "runs.sqlite3")
        yield made
        made.close()
        return
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_runs_table(client, "runs", ttl=True)
        yield DynamoCheckpointStore("runs", client=client, ttl_seconds=None, clock=_Clock())


def create(store: Any, principal: str | None, *, status: str = "finished", chat: str | None = "c1") -> str:
    run_id = new_run_id()
    store.create(StoredRun(run_id, '{"step":0}', status, principal=principal, chat_id=chat, meta={"agent": "a:b"}))
    return run_id


def all_pages(store: PrincipalRuns, principal: str, limit: int, **filters: Any) -> tuple[list[RunListing], int]:
    listed: list[RunListing] = []
    position, pages = None, 0
    while True:
        page, position = store.runs_of(principal, ListQuery(limit=limit, after=position, **filters))
        assert len(page) <= limit
        listed += page
        pages += 1
        if position is None:
            return listed, pages
        assert pages < 50, "the pages never end"


def test_the_runs_of_a_principal_newest_first_in_pages(store: Any) -> None:
    assert isinstance(store, PrincipalRuns)
    alice = [create(store, "alice") for _ in range(7)]
    listed, pages = all_pages(store, "alice", 3)
    assert [r.run_id for r in listed] == alice[::-1]
    assert pages == 3
    assert [r.created_at for r in listed] == sorted((r.created_at for r in listed), reverse=True)
    assert {(r.status, r.chat_id, r.agent) for r in listed} == {("finished", "c1", "a:b")}
    first, position = store.runs_of("alice", ListQuery(limit=7))
    assert len(first) == 7 and position is None  # exactly a page: no empty page after it


def test_another_principals_runs_are_never_listed(store: Any) -> None:
    alice = {create(store, "alice") for _ in range(3)}
    bob = [create(store, "bob") for _ in range(4)]
    create(store, None)  # an event-triggered run that named no principal belongs to nobody's list
    store.create(StoredRun("ledger:xyz", "{}", "finished", principal="alice"))  # not a run (the approval ledger's)
    assert {r.run_id for r in all_pages(store, "alice", 2)[0]} == alice
    assert [r.run_id for r in all_pages(store, "bob", 10)[0]] == bob[::-1]
    assert store.runs_of("carol", ListQuery(limit=5)) == ([], None)
    # A position taken from bob's list, handed to alice's: still only alice's runs.
    _, bobs_position = store.runs_of("bob", ListQuery(limit=1))
    assert bobs_position is not None
    after = store.runs_of("alice", ListQuery(limit=10, after=bobs_position))[0]
    assert {r.run_id for r in after} <= alice


def test_filters_by_status_and_chat(store: Any) -> None:
    done = [create(store, "alice", status="finished", chat="c1") for _ in range(3)]
    failed = [create(store, "alice", status="failed", chat="c2") for _ in range(5)]
    running = create(store, "alice", status="ready_for_next_step", chat="c1")
    create(store, "bob", status="failed", chat="c2")
    assert [r.run_id for r in all_pages(store, "alice", 2, statuses=frozenset({"failed"}))[0]] == failed[::-1]
    both = all_pages(store, "alice", 4, statuses=frozenset({"finished", "ready_for_next_step"}))[0]
    assert [r.run_id for r in both] == [running, *done[::-1]]
    assert [r.run_id for r in all_pages(store, "alice", 2, chat_id="c1")[0]] == [running, *done[::-1]]
    chat_failed = all_pages(store, "alice", 10, chat_id="c1", statuses=frozenset({"failed"}))[0]
    assert chat_failed == []


def test_a_saved_status_is_what_the_list_shows(store: Any) -> None:
    run_id = create(store, "alice", status="not_started")
    record = store.load(run_id)
    store.save(StoredRun(run_id, '{"step":1}', "failed", principal="alice", chat_id="c1"), record.version)
    assert [(r.run_id, r.status) for r in store.runs_of("alice", ListQuery(limit=5))[0]] == [(run_id, "failed")]
    assert store.runs_of("alice", ListQuery(limit=5, statuses=frozenset({"not_started"})))[0] == []


def test_a_sqlite_file_made_before_the_list_gets_its_index_when_opened(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite3"
    SqliteCheckpointStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("DROP INDEX runs_by_principal")
    with SqliteCheckpointStore(path) as store:
        create(store, "alice")
        assert len(store.runs_of("alice", ListQuery(limit=5))[0]) == 1
    with sqlite3.connect(path) as conn:
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT run_id FROM runs WHERE principal = ? ORDER BY created_at DESC", ("alice",)
        ).fetchall()
    assert any("runs_by_principal" in str(row) for row in plan)
