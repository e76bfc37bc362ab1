"""The timer table of parked runs in the local SQLite store (decision D16; :class:`~durable_harness.ports.RunTimers`).

A run parked on a sleep or an event with a timeout has one row: when the local orchestrator must
start it again. Kept in the run store's file, so that a restart finds them.

Events kept for a run (:class:`~durable_harness.waits.EventBook` records of outcome ``kept``: they
came while the run did not wait for them) expire with the run, as deployed (where the table's
TTL expires both): runs are kept here, so a trigger drops them, with their checkpoint records,
in the transaction that saves the run's terminal status (the run takes no more events then, see
``server/events.py``; a later delivery is answered as for any run that ended). The events that
resumed the run stay with its record: a duplicate of one is still a ``409 duplicate_event``.
"""

from __future__ import annotations

import sqlite3
from contextlib import AbstractContextManager
from typing import Protocol

from ..ports import TERMINAL_STATUSES
from ..waits import EVENT_ID_PREFIX, EVENT_RUN_META

_TERMINAL = ", ".join(f"'{status}'" for status in sorted(TERMINAL_STATUSES))
_PAST_EVENTS = EVENT_ID_PREFIX[:-1] + chr(ord(EVENT_ID_PREFIX[-1]) + 1)  # the first id after every event id
# The kept events of NEW.run_id: a range of the primary key (the ids with the prefix), then their meta.
_EVENTS_OF_RUN = (f"SELECT run_id FROM runs WHERE run_id >= '{EVENT_ID_PREFIX}' AND run_id < '{_PAST_EVENTS}'"
                  f" AND json_extract(meta, '$.{EVENT_RUN_META}') = NEW.run_id"
                  " AND json_extract(meta, '$.outcome') = 'kept'")  # fmt: skip

TIMERS_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS timers (
    run_id TEXT PRIMARY KEY,
    due_at REAL NOT NULL
);
CREATE TRIGGER IF NOT EXISTS run_events_expire_v1 AFTER UPDATE OF status ON runs
WHEN NEW.status IN ({_TERMINAL}) AND substr(NEW.run_id, 1, {len(EVENT_ID_PREFIX)}) != '{EVENT_ID_PREFIX}'
BEGIN
    DELETE FROM run_records WHERE run_id IN ({_EVENTS_OF_RUN});
    DELETE FROM runs WHERE run_id IN ({_EVENTS_OF_RUN});
END;
"""
"""The DDL of the timer table and of the trigger that expires a run's kept events with it, run (a
script) whenever the store opens its file (so that an older file gets them too)."""


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
