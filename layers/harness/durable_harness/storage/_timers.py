"""The timer table of parked runs in the local SQLite store (decision D16; :class:`~durable_harness.ports.RunTimers`).

A run parked on a sleep or an event with a timeout has one row: when the local orchestrator must
start it again. Kept in the run store's file, so that a restart finds them.
"""

from __future__ import annotations

import sqlite3
from contextlib import AbstractContextManager
from typing import Protocol

TIMERS_SCHEMA = """
CREATE TABLE IF NOT EXISTS timers (
    run_id TEXT PRIMARY KEY,
    due_at REAL NOT NULL
);
"""
"""The table's DDL, run whenever the store opens its file (so that an older file gets it too)."""


class _Connected(Protocol):
    def _transaction(self) -> AbstractContextManager[sqlite3.Connection]: ...

    def _guard(self) -> AbstractContextManager[sqlite3.Connection]: ...


class TimerTable:
    """The ``timers`` table's operations, for a store with ``_transaction`` and ``_guard``."""

    def set_timer(self: _Connected, run_id: str, due_at: float) -> None:
        """Start the run at ``due_at``, replacing its earlier timer."""
        with self._transaction() as conn:
            conn.execute("INSERT INTO timers (run_id, due_at) VALUES (?, ?) ON CONFLICT (run_id) DO UPDATE"
                         " SET due_at = excluded.due_at", (run_id, due_at))  # fmt: skip

    def clear_timer(self: _Connected, run_id: str) -> None:
        """Drop the run's timer, if any."""
        with self._transaction() as conn:
            conn.execute("DELETE FROM timers WHERE run_id = ?", (run_id,))

    def list_timers(self: _Connected) -> list[tuple[str, float]]:
        """Every timer, soonest first."""
        with self._guard() as conn:
            rows = conn.execute("SELECT run_id, due_at FROM timers ORDER BY due_at").fetchall()
        return [(run_id, float(due)) for run_id, due in rows]
