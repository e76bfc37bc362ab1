"""The local-mode checkpoint store: one SQLite file, WAL journal, fenced writes.

Safe from several threads (one connection per store behind a lock; the async runner calls it via
``asyncio.to_thread``) and from several processes on the same file (SQLite's own file locking,
``BEGIN IMMEDIATE`` plus a busy timeout). Every conditional write is a single transaction whose
``UPDATE ... WHERE version = ?`` decides the race: the loser sees ``rowcount == 0`` and gets
:class:`~durable_harness.errors.FencedError` with nothing written.

Durability is ``synchronous=NORMAL``: a committed write survives a crash of the process, though
not necessarily a power cut, which is the right trade for a development store.

The same file keeps the local orchestrator's run leases (:class:`~durable_harness.ports.RunLeases`,
decision D13) in a table of their own. The database file is created 0600 (SQLite gives its WAL and
shared-memory files the same mode), its folder 0700.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn

from ..errors import FencedError, RunExistsError, RunNotFoundError, StorageError
from ..ports import ACTIVE_STATUSES, Checkpoint, Lease, RunSummary
from ._private import make_private_dirs, touch_private

__all__ = ["SqliteCheckpointStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id     TEXT PRIMARY KEY,
    version    INTEGER NOT NULL,
    epoch      INTEGER NOT NULL,
    status     TEXT NOT NULL,
    principal  TEXT,
    chat_id    TEXT,
    state      TEXT NOT NULL,
    meta       TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    write_seq  INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_by_chat ON runs (chat_id, write_seq);
CREATE INDEX IF NOT EXISTS runs_by_write ON runs (write_seq);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs (status);
CREATE TABLE IF NOT EXISTS leases (
    run_id     TEXT PRIMARY KEY,
    owner      TEXT NOT NULL,
    expires_at REAL NOT NULL
);
"""

_COLUMNS = "run_id, version, epoch, status, principal, chat_id, state, meta"
# Orders list_runs by "last written": clock timestamps can tie or step back, a counter bumped
# inside the write transaction (which holds the database's write lock) cannot.
_NEXT_SEQ = "(SELECT COALESCE(MAX(write_seq), 0) + 1 FROM runs)"


def _now() -> str:
    # Fixed-width ISO text sorts chronologically as a string and reads well in the sqlite3 shell.
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _meta_json(meta: dict[str, str]) -> str:
    return json.dumps(meta, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def _row_to_checkpoint(row: tuple[Any, ...]) -> Checkpoint:
    run_id, version, epoch, status, principal, chat_id, state, meta = row
    decoded = json.loads(meta) if meta else {}
    return Checkpoint(
        run_id=run_id,
        state=state,
        status=status,
        version=int(version),
        epoch=int(epoch),
        principal=principal,
        chat_id=chat_id,
        meta={str(k): str(v) for k, v in decoded.items()},
    )


class SqliteCheckpointStore:
    """A :class:`~durable_harness.ports.CheckpointStore` in a SQLite file.

    ``path`` is created (with its parent directories) when missing; ``":memory:"`` gives a private
    store for tests. ``timeout`` is how long a write waits for another process's lock before the
    store gives up with :class:`~durable_harness.errors.StorageError`.
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 10.0) -> None:
        """Open (and if needed create) the database at ``path``."""
        self._path = os.fspath(path)
        self._timeout = timeout
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = os.getpid()
        # Connect now so that a bad path fails at construction, not at the first slice.
        with self._lock:
            self._connection()

    @property
    def path(self) -> str:
        """The database file this store uses."""
        return self._path

    def create(self, checkpoint: Checkpoint) -> Checkpoint:
        """Store a new run record at version 1, epoch 0. Raises ``RunExistsError``."""
        now = _now()
        with self._transaction() as conn:
            cur = conn.execute(
                "INSERT INTO runs (run_id, version, epoch, status, principal, chat_id, state, meta,"
                f" created_at, updated_at, write_seq) VALUES (?, 1, 0, ?, ?, ?, ?, ?, ?, ?, {_NEXT_SEQ})"
                " ON CONFLICT (run_id) DO NOTHING",
                (
                    checkpoint.run_id,
                    checkpoint.status,
                    checkpoint.principal,
                    checkpoint.chat_id,
                    checkpoint.state,
                    _meta_json(checkpoint.meta),
                    now,
                    now,
                ),
            )
            if cur.rowcount == 0:
                raise RunExistsError(checkpoint.run_id)
            return self._select(conn, checkpoint.run_id)

    def load(self, run_id: str) -> Checkpoint:
        """The newest record of a run. Raises ``RunNotFoundError``."""
        with self._guard() as conn:
            return self._select(conn, run_id)

    def summary(self, run_id: str) -> RunSummary:
        """The record's summary, without its state. Raises ``RunNotFoundError``."""
        with self._guard() as conn:
            row = conn.execute("SELECT status, principal, chat_id FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            raise RunNotFoundError(run_id)
        return RunSummary(run_id, row[0], row[1], row[2])

    def claim(self, run_id: str, expected_version: int) -> Checkpoint:
        """Bump epoch and version if the version is still ``expected_version``."""
        with self._transaction() as conn:
            cur = conn.execute(
                "UPDATE runs SET version = version + 1, epoch = epoch + 1, updated_at = ?,"
                f" write_seq = {_NEXT_SEQ} WHERE run_id = ? AND version = ?",
                (_now(), run_id, expected_version),
            )
            if cur.rowcount == 0:
                self._raise_lost(conn, run_id, expected_version, "claim")
            return self._select(conn, run_id)

    def save(self, checkpoint: Checkpoint, expected_version: int) -> Checkpoint:
        """Replace the record if its version is still ``expected_version`` (version + 1)."""
        with self._transaction() as conn:
            # epoch is deliberately absent from SET: only claim() may move the fence.
            cur = conn.execute(
                "UPDATE runs SET version = version + 1, status = ?, principal = ?, chat_id = ?,"
                f" state = ?, meta = ?, updated_at = ?, write_seq = {_NEXT_SEQ}"
                " WHERE run_id = ? AND version = ?",
                (
                    checkpoint.status,
                    checkpoint.principal,
                    checkpoint.chat_id,
                    checkpoint.state,
                    _meta_json(checkpoint.meta),
                    _now(),
                    checkpoint.run_id,
                    expected_version,
                ),
            )
            if cur.rowcount == 0:
                self._raise_lost(conn, checkpoint.run_id, expected_version, "save")
            return self._select(conn, checkpoint.run_id)

    # --- run leases (local orchestrator) -----------------------------------------------------------

    def acquire_lease(
        self, run_id: str, owner: str, until: float, *, now: float, steal_from: str | None = None
    ) -> Lease:
        """Take the run's lease if it is free, lapsed, ``owner``'s own, or ``steal_from``'s."""
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO leases (run_id, owner, expires_at) VALUES (?, ?, ?) ON CONFLICT (run_id) DO UPDATE"
                " SET owner = excluded.owner, expires_at = excluded.expires_at"
                " WHERE leases.owner = excluded.owner OR leases.expires_at < ? OR leases.owner = ?",
                (run_id, owner, until, now, steal_from),
            )
            row = conn.execute("SELECT owner, expires_at FROM leases WHERE run_id = ?", (run_id,)).fetchone()
        return Lease(run_id, row[0], float(row[1]))

    def renew_leases(self, owner: str, run_ids: Sequence[str], until: float) -> None:
        """Extend ``owner``'s leases of ``run_ids`` to ``until``."""
        if not run_ids:
            return
        with self._transaction() as conn:
            conn.executemany(
                "UPDATE leases SET expires_at = ? WHERE run_id = ? AND owner = ?",
                [(until, run_id, owner) for run_id in run_ids],
            )

    def release_lease(self, run_id: str, owner: str) -> None:
        """Drop the run's lease if ``owner`` holds it."""
        with self._transaction() as conn:
            conn.execute("DELETE FROM leases WHERE run_id = ? AND owner = ?", (run_id, owner))

    def lease_candidates(self, limit: int = 1000) -> list[Lease]:
        """Every run neither terminal nor paused, and every leased run, with its lease."""
        marks = ", ".join("?" for _ in ACTIVE_STATUSES)
        with self._guard() as conn:
            rows = conn.execute(
                "SELECT r.run_id, l.owner, l.expires_at FROM runs r LEFT JOIN leases l ON l.run_id = r.run_id"
                f" WHERE r.status IN ({marks})"
                " UNION SELECT run_id, owner, expires_at FROM leases ORDER BY 3 LIMIT ?",
                (*ACTIVE_STATUSES, max(limit, 0)),
            ).fetchall()
        return [Lease(run_id, owner, float(expires or 0.0)) for run_id, owner, expires in rows]

    def list_runs(self, chat_id: str | None = None, limit: int = 100) -> list[Checkpoint]:
        """Records, most recently written first, optionally only those of one chat."""
        query = f"SELECT {_COLUMNS} FROM runs"
        params: tuple[Any, ...] = ()
        if chat_id is not None:
            query += " WHERE chat_id = ?"
            params = (chat_id,)
        query += " ORDER BY write_seq DESC LIMIT ?"
        with self._guard() as conn:
            rows = conn.execute(query, (*params, max(limit, 0))).fetchall()
        return [_row_to_checkpoint(row) for row in rows]

    def close(self) -> None:
        """Close the connection; a later call reopens it."""
        with self._lock:
            if self._conn is not None:
                conn, self._conn = self._conn, None
                try:
                    conn.close()
                except sqlite3.Error as exc:
                    raise StorageError(f"closing {self._path}: {exc}") from exc

    def __enter__(self) -> SqliteCheckpointStore:
        """Use the store as a context manager that closes it on exit."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the store."""
        self.close()

    # --- internals ---------------------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        # A connection must not cross a fork; a child process opens its own.
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        self._pid = os.getpid()
        try:
            if self._path != ":memory:" and not self._path.startswith("file:"):
                make_private_dirs(Path(self._path).parent)
                touch_private(self._path)  # before SQLite creates it world-readable
            # isolation_level=None: we issue BEGIN/COMMIT ourselves, so that a write takes the
            # lock up front (BEGIN IMMEDIATE) instead of failing on a read-to-write upgrade.
            conn = sqlite3.connect(self._path, timeout=self._timeout, isolation_level=None, check_same_thread=False)
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.executescript(_SCHEMA)
            except BaseException:
                conn.close()
                raise
        except (sqlite3.Error, OSError) as exc:
            raise StorageError(f"opening {self._path}: {exc}") from exc
        self._conn = conn
        return conn

    @contextmanager
    def _guard(self) -> Iterator[sqlite3.Connection]:
        """The connection, under the lock, with SQLite errors turned into ``StorageError``."""
        with self._lock:
            conn = self._connection()
            try:
                yield conn
            except sqlite3.Error as exc:
                raise StorageError(f"{self._path}: {exc}") from exc

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction: committed on success, rolled back on any exception."""
        with self._guard() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                # SQLite may already have rolled back (e.g. SQLITE_FULL); ROLLBACK would then fail.
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    @staticmethod
    def _select(conn: sqlite3.Connection, run_id: str) -> Checkpoint:
        row = conn.execute(f"SELECT {_COLUMNS} FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            raise RunNotFoundError(run_id)
        return _row_to_checkpoint(row)

    @classmethod
    def _raise_lost(cls, conn: sqlite3.Connection, run_id: str, expected: int, what: str) -> NoReturn:
        """Explain a conditional write that matched no row: missing run, or stale version."""
        current = cls._select(conn, run_id)  # raises RunNotFoundError
        raise FencedError(f"run {run_id!r}: {what} expected version {expected}, found {current.version}")
