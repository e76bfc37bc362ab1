"""Events kept for a run expire with it in the local store (issue 21): the SQLite store drops a
run's kept events (those that came while it did not wait for them) in the transaction that saves
its terminal status, as deployed the table's TTL expires them with the run.

Real parts: the runner over the SQLite store (a file in ``tmp_path``) and the memory chunk log,
the built-in agent with a scripted model.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from durable_harness.runner import Runner
from durable_harness.storage.memory import MemoryChunkLog
from durable_harness.storage.sqlite import SqliteCheckpointStore
from durable_harness.waits import EVENT_ID_PREFIX, event_record_id

from tests.waits.test_primitives import build_agent, prompt


def sqlite_runner(path: Path, effects: Path) -> Runner:
    return Runner(build_agent(effects), SqliteCheckpointStore(path), MemoryChunkLog(), flush_interval=0,
                  public_url="http://example.test")  # fmt: skip


def event_rows(path: Path) -> dict[str, int]:
    """The event records in the file: how many checkpoint records each has."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT r.run_id, COUNT(c.seq) FROM runs r LEFT JOIN run_records c ON c.run_id = r.run_id"
                            " WHERE substr(r.run_id, 1, 4) = ? GROUP BY r.run_id", (EVENT_ID_PREFIX,))  # fmt: skip
        return {run_id: int(count) for run_id, count in rows}


async def test_a_runs_kept_events_expire_when_it_ends_and_another_runs_stay(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    runner = sqlite_runner(db, tmp_path / "effects.txt")
    ending, other = runner.create_run(prompt(), message_id="msg_1"), runner.create_run(prompt(), message_id="msg_2")
    big = {"log": "x" * 100_000}  # its record body is a checkpoint record of its own
    for name, payload in [("build-done", {"status": "early"}), ("never-asked", big)]:
        runner.events.deliver(ending.run_id, name, payload, outcome="kept", via="test")
    runner.events.deliver(other.run_id, "never-asked", big, outcome="kept", via="test")
    before = event_rows(db)
    kept = event_record_id(other.run_id, "never-asked")
    assert len(before) == 3 and before[kept] >= 1 and before[event_record_id(ending.run_id, "never-asked")] >= 1

    final = await runner.run(ending.run_id)  # its tool takes the early event; the other is never asked
    assert final.status == "finished"
    assert runner.events.get(ending.run_id, "build-done") is None
    assert runner.events.get(ending.run_id, "never-asked") is None
    assert event_rows(db) == {kept: before[kept]}  # their checkpoint records went with them
    # The file says so too (a restart finds the same), and the other run still finds its event.
    reopened = sqlite_runner(db, tmp_path / "effects.txt")
    assert reopened.events.get(other.run_id, "never-asked") is not None
    assert reopened.events.get(ending.run_id, "never-asked") is None


async def test_a_cancelled_runs_kept_events_expire_and_an_event_that_resumed_a_run_stays(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    runner = sqlite_runner(db, tmp_path / "effects.txt")
    cancelled = runner.create_run(prompt(), message_id="msg_1")
    runner.events.deliver(cancelled.run_id, "late-news", {"n": 1}, outcome="kept", via="test")
    await runner.finalize(cancelled.run_id, status="cancelled")
    assert runner.events.get(cancelled.run_id, "late-news") is None

    resumed = runner.create_run(prompt(), message_id="msg_2")
    assert (await runner.run(resumed.run_id)).status == "awaiting_event"
    runner.events.deliver(resumed.run_id, "build-done", {"status": "passed"}, outcome="resumed", via="test")
    assert (await runner.run(resumed.run_id)).status == "finished"
    kept = runner.events.get(resumed.run_id, "build-done")  # a duplicate is still answered with it
    assert kept is not None and kept.outcome == "resumed"
    assert set(event_rows(db)) == {event_record_id(resumed.run_id, "build-done")}
