"""What the slice function tells the state machine about a parked run (aws/waits.py, issue 21)."""

from __future__ import annotations

import math
from datetime import UTC, datetime

from durable_harness.aws.waits import MAX_PARK_SECONDS, RENEW_AFTER_SECONDS, wait_of
from durable_harness.runner.state import RunState, WaitRecord

NOW = 1_800_000_000.25


def parked(*waits: WaitRecord) -> RunState:
    return RunState(run_id="wrun_x", session_id="s", message_id="m", status="awaiting_event", waits=list(waits))


def iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_sleep_parks_until_its_end_in_whole_seconds_rounded_up() -> None:
    wait = wait_of(parked(WaitRecord(tool_call_id="c", name="sleep:1", kind="sleep", deadline=NOW + 1.5)), now=NOW)
    assert wait == {"event": False, "until": iso(math.ceil(NOW + 1.5)), "seconds": 2, "renew": False}


def test_an_event_wait_without_a_deadline_parks_for_at_most_thirty_days() -> None:
    wait = wait_of(parked(WaitRecord(tool_call_id="c", name="done", kind="event")), now=NOW)
    assert wait is not None and wait["event"] is True and wait["seconds"] == MAX_PARK_SECONDS


def test_an_execution_close_to_a_year_old_continues_as_new_and_a_run_not_parked_has_no_wait() -> None:
    run = parked(WaitRecord(tool_call_id="c", name="done", kind="event", deadline=NOW + 60))
    young = wait_of(run, started=iso(NOW - 3600), now=NOW)
    old = wait_of(run, started=iso(NOW - RENEW_AFTER_SECONDS - 1), now=NOW)
    assert young is not None and young["renew"] is False and young["seconds"] == 60
    assert old is not None and old["renew"] is True
    assert wait_of(RunState(run_id="wrun_x", session_id="s", message_id="m"), now=NOW) is None
