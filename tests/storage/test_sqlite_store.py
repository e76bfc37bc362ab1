"""SqliteCheckpointStore specifics: WAL, persistence, several connections, errors, list_runs."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

import pytest
from durable_harness.errors import FatalError, FencedError, FormatVersionError, StorageError
from durable_harness.ports import StoredRun
from durable_harness.storage import SqliteCheckpointStore


def record(run_id: str, chat_id: str | None = None) -> StoredRun:
    return StoredRun(run_id=run_id, state="{}", status="not_started", chat_id=chat_id)


def test_uses_wal_and_persists_across_instances(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "runs.sqlite3"
    with SqliteCheckpointStore(path) as store:
        store.create(record("run-1"))
        claimed = store.claim("run-1", 1)
    with SqliteCheckpointStore(path) as again:
        assert again.load("run-1") == claimed
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        columns = {row[1] for row in conn.execute("PRAGMA table_info(runs)")}
    finally:
        conn.close()
    wanted = {"run_id", "version", "epoch", "status", "principal", "chat_id", "state", "meta", "updated_at"}
    assert wanted <= columns


def test_two_connections_racing_to_claim_have_one_winner(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite3"
    stores = [SqliteCheckpointStore(path) for _ in range(6)]
    stores[0].create(record("run-1"))
    barrier = threading.Barrier(len(stores))
    outcomes: list[str] = []

    def attempt(store: SqliteCheckpointStore) -> None:
        barrier.wait()
        try:
            store.claim("run-1", 1)
            outcomes.append("won")
        except FencedError:
            outcomes.append("fenced")

    threads = [threading.Thread(target=attempt, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["fenced"] * 5 + ["won"]
    final = stores[1].load("run-1")
    assert (final.version, final.epoch) == (2, 1)
    for s in stores:
        s.close()


def test_one_store_shared_by_threads(tmp_path: Path) -> None:
    store = SqliteCheckpointStore(tmp_path / "runs.sqlite3")
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            store.create(record(f"run-{n}"))
            for version in range(1, 20):
                store.save(record(f"run-{n}"), version)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert [store.load(f"run-{n}").version for n in range(4)] == [20] * 4
    store.close()


def test_unusable_files_raise_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError):
        SqliteCheckpointStore(tmp_path)  # a directory
    garbage = tmp_path / "garbage.sqlite3"
    garbage.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StorageError):
        SqliteCheckpointStore(garbage)


@pytest.mark.parametrize("found", [0, 2], ids=["no-format", "another-format"])
def test_a_database_of_another_storage_format_is_refused_saying_what_to_do(tmp_path: Path, found: int) -> None:
    """A new file is stamped with the layout's version when its tables are made; a file of another
    version, or one with tables and no version (made before versions), is never read as this one."""
    path = tmp_path / "runs.sqlite3"
    with SqliteCheckpointStore(path) as store:
        store.create(record("run-1"))
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    conn.execute(f"PRAGMA user_version = {found}")
    conn.close()
    with pytest.raises(FormatVersionError, match=r"runs.sqlite3 is in storage format .*reads format 1.*data folder"):
        SqliteCheckpointStore(path)
    assert issubclass(FormatVersionError, FatalError)


def test_operational_errors_become_storage_errors(tmp_path: Path) -> None:
    store = SqliteCheckpointStore(tmp_path / "runs.sqlite3")
    store.create(record("run-1"))
    # Another connection holds the write lock longer than this store is willing to wait.
    impatient = SqliteCheckpointStore(tmp_path / "runs.sqlite3", timeout=0.01)
    blocker = sqlite3.connect(tmp_path / "runs.sqlite3", isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StorageError):
            impatient.claim("run-1", 1)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert impatient.claim("run-1", 1).epoch == 1
    store.close()
    impatient.close()


def test_in_memory_database(tmp_path: Path) -> None:
    with SqliteCheckpointStore(":memory:") as store:
        store.create(record("run-1"))
        assert store.load("run-1").version == 1


def test_list_runs_newest_first_and_by_chat(tmp_path: Path) -> None:
    with SqliteCheckpointStore(tmp_path / "r.sqlite3") as store:
        store.create(record("run-1", chat_id="chat-a"))
        store.create(record("run-2", chat_id="chat-b"))
        store.create(record("run-3", chat_id="chat-a"))
        store.save(record("run-1", chat_id="chat-a"), 1)  # run-1 is now the most recently written
        assert [c.run_id for c in store.list_runs()] == ["run-1", "run-3", "run-2"]
        assert [c.run_id for c in store.list_runs(chat_id="chat-a")] == ["run-1", "run-3"]
        assert [c.run_id for c in store.list_runs(limit=1)] == ["run-1"]
        assert store.list_runs(chat_id="chat-z") == []


def history(steps: int) -> str:
    return json.dumps({"step": steps, "messages": [{"n": i, "text": "x" * 500} for i in range(steps)]},
                      separators=(",", ":"))  # fmt: skip


def test_each_save_of_a_growing_state_writes_only_what_it_added(tmp_path: Path) -> None:
    with SqliteCheckpointStore(tmp_path / "runs.sqlite3") as store:
        version = store.create(StoredRun(run_id="run-1", state=history(1), status="not_started")).version
        for step in range(2, 41):
            version = store.save(StoredRun(run_id="run-1", state=history(step), status="x"), version).version
        conn = sqlite3.connect(tmp_path / "runs.sqlite3")
        try:
            sizes = [n for (n,) in conn.execute("SELECT length(body) FROM run_records ORDER BY seq")]
        finally:
            conn.close()
        assert len(sizes) == 40 and max(sizes[1:]) < 600  # a step's message, never the history
        fresh = SqliteCheckpointStore(tmp_path / "runs.sqlite3")
        assert fresh.load("run-1").state == history(40)
        fresh.close()
