"""The local-mode checkpoint store: one SQLite file, WAL journal, fenced writes.

Safe from several threads (one connection per store behind a lock; the async runner calls it via
``asyncio.to_thread``) and from several processes on the same file (SQLite's own file locking,
``BEGIN IMMEDIATE`` plus a busy timeout). Every conditional write is a single transaction whose
``UPDATE ... WHERE version = ?`` decides the race: the loser sees ``rowcount == 0`` and gets
:class:`~durable_harness.errors.FencedError` with nothing written.

The file's layout has a version, :data:`DB_FORMAT`, in SQLite's ``user_version``: a new file is
stamped with it when its tables are made, and a file of another version (or of none, made before
versions) is refused with :class:`~durable_harness.errors.FormatVersionError`.

A run is a head row in ``runs`` plus append-only rows in ``run_records`` (the format of
:mod:`durable_harness.checkpoints.records`): a save inserts one record and moves the head in the same
transaction, so no write grows with the run's history. ``runs.state`` holds the inline base
(``''`` once a ``full`` record superseded it).

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
from typing import Any

from ..checkpoints.base import BaseCheckpointStore, Current, VersionConflict
from ..checkpoints.records import Folded, Plan, fold, utf8_bytes
from ..errors import CorruptCheckpointError, FormatVersionError, RunExistsError, RunNotFoundError, StorageError
from ..ports import ACTIVE_STATUSES, AGENT_META, Lease, ListPosition, ListQuery, RunListing, RunSummary, StoredRun
from ._private import make_private_dirs, touch_private
from ._timers import TIMERS_SCHEMA, TimerTable

__all__ = ["DB_FORMAT", "SqliteCheckpointStore"]

DB_FORMAT = 1
"""The version of the file's layout (SQLite's ``user_version``; 0 in a file without tables): a later
release that changes the tables raises it, and reads (or migrates) a file by what it finds."""
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
    write_seq  INTEGER NOT NULL,
    seq        INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS runs_by_chat ON runs (chat_id, write_seq);
CREATE INDEX IF NOT EXISTS runs_by_write ON runs (write_seq);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs (status);
CREATE TABLE IF NOT EXISTS run_records (
    run_id TEXT NOT NULL,
    seq    INTEGER NOT NULL,
    kind   TEXT NOT NULL,
    body   TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS leases (
    run_id     TEXT PRIMARY KEY,
    owner      TEXT NOT NULL,
    expires_at REAL NOT NULL
);
"""

_PRINCIPAL_INDEX = "CREATE INDEX IF NOT EXISTS runs_by_principal ON runs (principal, created_at, run_id)"
"""The runs inspector's list (``runs_of``); made when a file is opened, so that a file of this format
made before the list existed gets it too (a no-op read once it is there)."""
_COLUMNS = "run_id, version, epoch, status, principal, chat_id, state, meta, seq"
# Orders list_runs by "last written": clock timestamps can tie or step back, a counter bumped
# inside the write transaction (which holds the database's write lock) cannot.
_NEXT_SEQ = "(SELECT COALESCE(MAX(write_seq), 0) + 1 FROM runs)"


def _now() -> str:
    # Fixed-width ISO text sorts chronologically as a string and reads well in the sqlite3 shell.
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _meta_agent(meta: str | None) -> str | None:
    """The agent a record's ``meta`` names (``RunState.agent``), if any."""
    agent = json.loads(meta).get(AGENT_META) if meta else None
    return agent if isinstance(agent, str) and agent else None


def _meta_json(meta: dict[str, str]) -> str:
    return json.dumps(meta, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def _row_to_checkpoint(row: tuple[Any, ...], state: str) -> StoredRun:
    run_id, version, epoch, status, principal, chat_id, _, meta, _ = row
    decoded = {str(k): str(v) for k, v in (json.loads(meta) if meta else {}).items()}
    return StoredRun(run_id=run_id, state=state, status=status, version=int(version), epoch=int(epoch),
                      principal=principal, chat_id=chat_id, meta=decoded)  # fmt: skip


class SqliteCheckpointStore(BaseCheckpointStore, TimerTable):
    """A :class:`~durable_harness.ports.CheckpointStore` in a SQLite file.

    ``path`` is created (with its parent directories) when missing; ``":memory:"`` gives a private
    store for tests. ``timeout`` is how long a write waits for another process's lock before the
    store gives up with :class:`~durable_harness.errors.StorageError`.
    """

    # The heads known: the state at a version is the base of the next delta; a version's state never
    # changes, so a hit is always right (a miss folds the records).
    cache_runs = 256

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 10.0) -> None:
        """Open (and if needed create) the database at ``path``."""
        super().__init__()
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

    def _create(self, first: Current, plan: Plan) -> Current:
        checkpoint, now = first.record, _now()
        with self._transaction() as conn:
            cur = conn.execute(
                "INSERT INTO runs (run_id, version, epoch, status, principal, chat_id, state, meta,"
                f" created_at, updated_at, write_seq, seq) VALUES (?, 1, 0, ?, ?, ?, ?, ?, ?, ?, {_NEXT_SEQ}, ?)"
                " ON CONFLICT (run_id) DO NOTHING",
                (checkpoint.run_id, checkpoint.status, checkpoint.principal, checkpoint.chat_id,
                 plan.inline if plan.inline is not None else "", _meta_json(checkpoint.meta), now, now, first.seq),
            )  # fmt: skip
            if cur.rowcount == 0:
                raise RunExistsError(checkpoint.run_id)
            if plan.record is not None:
                self._insert_record(conn, checkpoint.run_id, 1, plan.record)
        return first

    def load(self, run_id: str) -> StoredRun:
        """The newest record of a run. Raises ``RunNotFoundError``."""
        with self._guard() as conn:
            return self._select(conn, run_id)

    def summary(self, run_id: str) -> RunSummary:
        """The record's summary, without its state. Raises ``RunNotFoundError``."""
        with self._guard() as conn:
            return RunSummary(run_id, *self._row(conn, run_id, "status, principal, chat_id"))

    def version(self, run_id: str) -> int:
        """The run's current version. Raises ``RunNotFoundError``."""
        with self._guard() as conn:
            return int(self._row(conn, run_id, "version")[0])

    def _claim(self, run_id: str, expected_version: int) -> StoredRun:
        with self._transaction() as conn:
            cur = conn.execute(
                "UPDATE runs SET version = version + 1, epoch = epoch + 1, updated_at = ?,"
                f" write_seq = {_NEXT_SEQ} WHERE run_id = ? AND version = ?",
                (_now(), run_id, expected_version),
            )
            if cur.rowcount == 0:
                raise VersionConflict(int(self._row(conn, run_id, "version")[0]))
            return self._select(conn, run_id)

    @contextmanager
    def _current(self, run_id: str, expected_version: int) -> Iterator[Current]:
        with self._transaction() as conn:  # the write inside is part of it
            row = self._row(conn, run_id, _COLUMNS)
            VersionConflict.check(row[1], expected_version)
            yield self._known_at(run_id, expected_version) or self._head(conn, row)

    def _write(self, current: Current, after: Current, plan: Plan) -> None:
        saved, conn = after.record, self._connection()  # in the transaction _current holds
        if plan.record is not None:
            self._insert_record(conn, saved.run_id, after.seq, plan.record)
        base = plan.inline if plan.inline is not None else "" if plan.drop_base else None  # None: unchanged
        # epoch is deliberately absent from SET: only claim() may move the fence.
        conn.execute(
            "UPDATE runs SET version = version + 1, status = ?, principal = ?, chat_id = ?, state = COALESCE(?, state),"
            f" meta = ?, updated_at = ?, write_seq = {_NEXT_SEQ}, seq = ? WHERE run_id = ? AND version = ?",
            (saved.status, saved.principal, saved.chat_id, base, _meta_json(saved.meta), _now(), after.seq,
             saved.run_id, current.record.version),
        )  # fmt: skip

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
        """Every run neither terminal nor paused, and every leased run, with its lease and agent."""
        marks = ", ".join("?" for _ in ACTIVE_STATUSES)
        with self._guard() as conn:
            rows = conn.execute(
                "SELECT r.run_id, l.owner, l.expires_at, r.meta FROM runs r LEFT JOIN leases l ON l.run_id = r.run_id"
                f" WHERE r.status IN ({marks})"
                " UNION SELECT l.run_id, l.owner, l.expires_at, r.meta FROM leases l"
                " LEFT JOIN runs r ON r.run_id = l.run_id ORDER BY 3 LIMIT ?",
                (*ACTIVE_STATUSES, max(limit, 0)),
            ).fetchall()
        return [Lease(run_id, owner, float(expires or 0.0), _meta_agent(meta)) for run_id, owner, expires, meta in rows]

    def latest_run(self, chat_id: str, principal: str | None) -> str | None:
        """The run created last for ``principal``'s chat (through the ``runs_by_chat`` index)."""
        with self._guard() as conn:
            row = conn.execute(
                # rowid: the order of the inserts (clock timestamps can tie or step back)
                "SELECT run_id FROM runs WHERE chat_id = ? AND principal IS ? ORDER BY rowid DESC LIMIT 1",
                (chat_id, principal),
            ).fetchone()
        return None if row is None else str(row[0])

    def list_runs(self, chat_id: str | None = None, limit: int = 100) -> list[StoredRun]:
        """Records, most recently written first, optionally only those of one chat."""
        query = f"SELECT {_COLUMNS} FROM runs"
        params: tuple[Any, ...] = ()
        if chat_id is not None:
            query += " WHERE chat_id = ?"
            params = (chat_id,)
        query += " ORDER BY write_seq DESC LIMIT ?"
        with self._guard() as conn:
            rows = conn.execute(query, (*params, max(limit, 0))).fetchall()
            return [self._decode(conn, row) for row in rows]

    def runs_of(self, principal: str, query: ListQuery) -> tuple[list[RunListing], ListPosition | None]:
        """The principal's runs, newest first, from the index on (principal, created_at, run_id)."""
        # Run ids only: the approval ledger keeps its records in this table too.
        sql = (
            "SELECT run_id, status, created_at, chat_id, meta FROM runs"
            " WHERE principal = ? AND run_id LIKE 'wrun!_%' ESCAPE '!'"
        )
        params: list[Any] = [principal]
        if query.statuses is not None:
            sql += f" AND status IN ({', '.join('?' for _ in query.statuses)})"
            params += sorted(query.statuses)
        if query.chat_id is not None:
            sql += " AND chat_id = ?"
            params.append(query.chat_id)
        if query.after is not None:
            sql += " AND (created_at, run_id) < (?, ?)"
            params += query.after
        sql += " ORDER BY created_at DESC, run_id DESC LIMIT ?"
        limit = max(query.limit, 0)
        with self._guard() as conn:
            rows = conn.execute(sql, (*params, limit + 1)).fetchall()
        listed = [RunListing(r[0], r[1], r[2], r[3], _meta_agent(r[4])) for r in rows[:limit]]
        more = len(rows) > len(listed) and listed
        return listed, (listed[-1].created_at, listed[-1].run_id) if more else None

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

    def __exit__(self, *exc: object) -> None:
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
                _prepare(conn, self._path)
                conn.execute(_PRINCIPAL_INDEX)
                conn.executescript(TIMERS_SCHEMA)  # a file of this format made before parked runs had timers gets it
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
    def _row(conn: sqlite3.Connection, run_id: str, columns: str) -> tuple[Any, ...]:
        row = conn.execute(f"SELECT {columns} FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            raise RunNotFoundError(run_id)
        return tuple(row)

    def _select(self, conn: sqlite3.Connection, run_id: str) -> StoredRun:
        return self._decode(conn, self._row(conn, run_id, _COLUMNS))

    def _decode(self, conn: sqlite3.Connection, row: tuple[Any, ...]) -> StoredRun:
        """The record of a head row, its state folded from the base and the records."""
        return _row_to_checkpoint(row, (self._known_at(row[0], int(row[1])) or self._head(conn, row)).folded.text)

    def _head(self, conn: sqlite3.Connection, row: tuple[Any, ...]) -> Current:
        """The head of a row, its state folded (and remembered)."""
        base, seq = row[6], int(row[8])
        folded = self._fold(conn, row[0], base, seq)
        base_bytes = utf8_bytes(base) if seq == 0 or base else 0  # '' once a full record superseded it
        current = Current(_row_to_checkpoint(row, folded.text), folded, seq, base_bytes)
        self._remember(current)
        return current

    @staticmethod
    def _fold(conn: sqlite3.Connection, run_id: str, base: str, seq: int) -> Folded:
        """The state of a run whose head holds ``base`` and ``seq`` records (from the last full one)."""
        if seq == 0:
            return fold(base, ())
        rows = conn.execute(
            "SELECT seq, kind, body FROM run_records WHERE run_id = ? AND seq <= ? AND seq >= COALESCE("
            "(SELECT MAX(seq) FROM run_records WHERE run_id = ? AND seq <= ? AND kind = 'full'), 1) ORDER BY seq",
            (run_id, seq, run_id, seq),
        ).fetchall()
        if not rows or rows[-1][0] != seq or rows[-1][0] - rows[0][0] + 1 != len(rows):
            raise CorruptCheckpointError(f"run {run_id!r}: checkpoint records are missing")
        return fold(base, [(kind, body) for _, kind, body in rows])

    @staticmethod
    def _insert_record(conn: sqlite3.Connection, run_id: str, seq: int, record: tuple[str, str]) -> None:
        conn.execute("INSERT INTO run_records (run_id, seq, kind, body) VALUES (?, ?, ?, ?)", (run_id, seq, *record))


def _prepare(conn: sqlite3.Connection, path: str) -> None:
    """Make the tables of a new file and stamp it with :data:`DB_FORMAT`; refuse another format."""
    found = conn.execute("PRAGMA user_version").fetchone()[0]
    if found == 0:
        conn.execute("BEGIN IMMEDIATE")  # two processes opening a new file: one makes the tables
        try:
            found = conn.execute("PRAGMA user_version").fetchone()[0]
            empty = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0
            if found == 0 and empty:
                for statement in filter(str.strip, _SCHEMA.split(";")):
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {DB_FORMAT}")
                found = DB_FORMAT
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    if found != DB_FORMAT:
        remedy = "Serve it with that release, or move the data folder away (this release starts a new one)."
        raise FormatVersionError(f"the database {path}", found, DB_FORMAT, remedy)
