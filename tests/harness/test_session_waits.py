"""Durable waits of a program in a persistent session (protocol 2, issue 21): a ``wait`` or
``sleep`` line the runner cannot answer yet parks the run and the slice detaches; the program goes
on waiting on its stdin, and the slice that resumes the run sends it the ``event`` line.

The program is ``tests/harness/waiting_program.py --persistent`` in a real detached bridge, driven
by the real runner over the memory store and log. It notes every turn line and answer it reads
with its pid in ``pids.log``; the tests wait on what they observe, never on sleeps, and each ends
the bridges it started (checked).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from durable_harness.runner import Runner
from durable_harness.storage.memory import MemoryChunkLog

from tests.harness import agents
from tests.harness.test_process_lifecycle import running
from tests.harness.test_process_waits import (
    effects,
    make_runner,
    resume_with_event,
    sleep_through,
    start,
    time_out,
    tool_output,
)
from tests.harness.test_session import end_bridges, until
from tests.support import log_chunks

CHAT = "chat_w"
"""The tests' chat: its runs share one session."""


@pytest.fixture
async def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Path]:
    """The program's ``WAIT_DIR``; the sessions (in its ``sessions``) are ended afterwards."""
    monkeypatch.setenv("WAIT_DIR", str(tmp_path))
    yield tmp_path
    await end_bridges(tmp_path / "sessions")


def session_runner(folder: Path) -> tuple[Runner, MemoryChunkLog]:
    return make_runner(agents.waiting_session(sessions_dir=folder / "sessions"))


def noted(folder: Path) -> list[tuple[int, str]]:
    """(pid, line) for each turn line and answer the program read."""
    path = folder / "pids.log"
    return [(int(pid), what) for pid, what in (line.split() for line in path.read_text().splitlines())]


async def test_a_parked_program_waits_on_in_its_session_and_gets_the_event_later(folder: Path) -> None:
    runner, log = session_runner(folder)
    run_id = start(runner, "build it", CHAT)
    parked = await runner.run(run_id)
    assert parked.status == "awaiting_event"
    assert [(w.tool_call_id, w.name, w.kind) for w in parked.waits] == [("c1", "build-done", "event")]
    ((pid, _),) = noted(folder)
    assert running(pid)  # detached, not stopped: the program waits on its stdin
    assert log_chunks(log, run_id)[-1]["type"] == "data-wait"

    await resume_with_event(runner, log, run_id, folder)
    assert noted(folder) == [(pid, "start"), (pid, "event")]  # the same process got the answer


async def test_an_event_that_came_first_is_answered_at_once(folder: Path) -> None:
    runner, log = session_runner(folder)
    run_id = start(runner, "build it", CHAT)
    runner.events.deliver(run_id, "build-done", "early", outcome="kept", via="test")
    final = await runner.run(run_id)
    assert final.status == "finished" and tool_output(log, run_id, "build") == "early"
    assert not any(c["type"] == "data-wait" for c in log_chunks(log, run_id))
    assert [what for _, what in noted(folder)] == ["start", "event"]


async def test_a_sleep_parks_and_the_same_program_is_woken(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NAP_SECONDS", "0.3")
    runner, log = session_runner(folder)
    await sleep_through(runner, log, start(runner, "take a nap", CHAT), folder)
    assert len({pid for pid, _ in noted(folder)}) == 1


async def test_a_timeout_reaches_the_waiting_program_as_a_timeout_line(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WAIT_TIMEOUT", "0.2")
    runner, log = session_runner(folder)
    await time_out(runner, log, start(runner, "build it", CHAT))
    assert len({pid for pid, _ in noted(folder)}) == 1


async def test_a_program_killed_while_parked_is_restarted_from_its_checkpoint_and_answered(folder: Path) -> None:
    runner, log = session_runner(folder)
    run_id = start(runner, "build it", CHAT)
    assert (await runner.run(run_id)).status == "awaiting_event"
    ((pid, _),) = noted(folder)
    os.kill(pid, signal.SIGKILL)
    await until(lambda: not running(pid), "the parked program to die")

    runner.events.deliver(run_id, "build-done", {"status": "passed"}, outcome="resumed", via="test")
    final = await runner.run(run_id)
    assert final.status == "finished"
    (first, _), (again, what), (answered, event) = noted(folder)
    assert first == pid and again == answered != pid and (what, event) == ("continue", "event")
    assert effects(folder) == ["started"]  # the new program resumed from the checkpoint: not redone
    chunks = log_chunks(log, run_id)
    assert "reset-step" not in [c["type"] for c in chunks]  # nothing of the step was shown past it
    assert tool_output(log, run_id, "build") == {"status": "passed"}


async def test_a_cancelled_parked_run_ends_with_one_finish_and_the_session_serves_on(folder: Path) -> None:
    runner, log = session_runner(folder)
    run_id = start(runner, "build it", CHAT)
    assert (await runner.run(run_id)).status == "awaiting_event"
    state = await runner.finalize(run_id, status="cancelled")
    assert state.status == "cancelled"
    assert [c["type"] for c in log_chunks(log, run_id)].count("finish") == 1
    ((pid, _), (same, what)) = noted(folder)
    assert (same, what) == (pid, "cancel")  # the waiting program was told, and ended its turn

    next_run = start(runner, "build again", CHAT)
    runner.events.deliver(next_run, "build-done", "next", outcome="kept", via="test")
    assert (await runner.run(next_run)).status == "finished"
    assert tool_output(log, next_run, "build") == "next"
    assert {p for p, _ in noted(folder)} == {pid}  # the same session's program served the next turn


async def test_a_wait_line_after_a_part_fails_the_run_naming_the_line(folder: Path) -> None:
    runner, log = session_runner(folder)
    run_id = start(runner, "bad wait", CHAT)
    assert (await runner.run(run_id)).status == "failed"
    [error] = [c for c in log_chunks(log, run_id) if c["type"] == "error"]
    # the tool-call is the boot's line 1, the wait line its line 2
    assert "output line 2 is invalid" in error["errorText"]
    assert "must come right after a checkpoint" in error["errorText"]


async def test_a_slice_lost_after_answering_never_answers_the_wait_again(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The resuming slice checkpoints right after it wrote the ``event`` line: a slice lost then
    (here cancelled while the program holds after its answer) leaves a checkpoint with nothing to
    answer, and the next slice only reads on."""
    hold = folder / "hold"
    monkeypatch.setenv("HOLD_FILE", str(hold))
    runner, log = session_runner(folder)
    run_id = start(runner, "build it", CHAT)
    assert (await runner.run(run_id)).status == "awaiting_event"
    runner.events.deliver(run_id, "build-done", {"status": "passed"}, outcome="resumed", via="test")
    lost = asyncio.create_task(runner.run(run_id))
    await until(lambda: "waiting" not in runner.load(run_id).turn["session"], "the answer's checkpoint")
    lost.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await lost
    hold.touch()
    assert (await runner.run(run_id)).status == "finished"
    assert tool_output(log, run_id, "build") == {"status": "passed"}
    next_run = start(runner, "build again", CHAT)  # its `start` comes after any stray line, in order
    runner.events.deliver(next_run, "build-done", "next", outcome="kept", via="test")
    assert (await runner.run(next_run)).status == "finished"
    assert [what for _, what in noted(folder)] == ["start", "event", "start", "event"]  # no event line twice
