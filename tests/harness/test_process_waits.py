"""A ProcessHarness program's durable waits (issue 21): the ``wait`` and ``sleep`` lines the
runner answers with ``event`` lines, parking the run (the program stopped) until it can.

The program is ``tests/harness/waiting_program.py``, run as a real child process by the real
runner over the memory store and log.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from durable_harness import ApprovalSecret
from durable_harness.harness import Harness
from durable_harness.protocol.ui_messages import convert_to_model_messages, parse_ui_messages
from durable_harness.runner import Runner
from durable_harness.storage.memory import MemoryCheckpointStore, MemoryChunkLog

from tests.harness import agents
from tests.harness.support import SECRET
from tests.support import log_chunks, message_of, until_due, user_message


@pytest.fixture
def wait_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("WAIT_DIR", str(tmp_path))
    return tmp_path


def make_runner(harness: Harness = agents.waiting) -> tuple[Runner, MemoryChunkLog]:
    log = MemoryChunkLog()
    secret = ApprovalSecret.from_value(SECRET)
    return Runner(harness, MemoryCheckpointStore(), log, flush_interval=0, approval_secret=secret), log


def start(runner: Runner, text: str, chat_id: str | None = None) -> str:
    """A run of ``text`` (in the chat ``chat_id``: its runs share one session)."""
    messages = convert_to_model_messages(parse_ui_messages([user_message(text)]))
    return runner.create_run(messages, message_id=f"msg_{text.replace(' ', '_')}", chat_id=chat_id).run_id


def effects(wait_dir: Path) -> list[str]:
    return (wait_dir / "effects.log").read_text().splitlines()


def tool_output(log: MemoryChunkLog, run_id: str, tool: str) -> object:
    return next(p for p in message_of(log_chunks(log, run_id))["parts"] if p["type"] == f"tool-{tool}")["output"]


async def test_a_wait_line_parks_the_run_and_the_event_resumes_the_program_in_the_same_message(wait_dir: Path) -> None:
    runner, log = make_runner()
    run_id = start(runner, "build it")
    parked = await runner.run(run_id)
    assert parked.status == "awaiting_event"
    assert [(w.tool_call_id, w.name, w.kind, w.deadline) for w in parked.waits] == [("c1", "build-done", "event", None)]
    chunks = log_chunks(log, run_id)
    assert chunks[-1]["type"] == "data-wait" and chunks[-1]["id"] == "wait-c1"
    assert not any(c["type"] == "finish" for c in chunks)
    again = await runner.run(run_id)  # not due: nothing runs, nothing is written
    assert again.status == "awaiting_event" and len(log_chunks(log, run_id)) == len(chunks)

    await resume_with_event(runner, log, run_id, wait_dir)


async def resume_with_event(runner: Runner, log: MemoryChunkLog, run_id: str, wait_dir: Path) -> None:
    """Deliver the event the parked ``build`` run waits for and run it: it finishes in the same
    message with the event's payload, and the program's step before the wait ran once."""
    runner.events.deliver(run_id, "build-done", {"status": "passed"}, outcome="resumed", via="test")
    final = await runner.run(run_id)
    assert final.status == "finished"
    assert effects(wait_dir) == ["started"]  # the program resumed from its checkpoint: once
    chunks = log_chunks(log, run_id)
    assert [c["type"] for c in chunks].count("start") == 1 and chunks[-1]["type"] == "finish"
    assert tool_output(log, run_id, "build") == {"status": "passed"}
    message = message_of(chunks)
    assert [p["data"]["status"] for p in message["parts"] if p["type"] == "data-wait"] == ["resumed"]
    assert message["parts"][-1]["text"] == 'Result: {"status": "passed"}'


async def test_an_event_that_came_first_answers_the_wait_line_at_once(wait_dir: Path) -> None:
    runner, log = make_runner()
    run_id = start(runner, "build it")
    runner.events.deliver(run_id, "build-done", "early", outcome="kept", via="test")
    final = await runner.run(run_id)
    assert final.status == "finished" and tool_output(log, run_id, "build") == "early"
    assert not any(c["type"] == "data-wait" for c in log_chunks(log, run_id))


async def test_a_sleep_line_parks_until_its_end_and_the_line_written_again_is_answered(
    wait_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NAP_SECONDS", "0.3")
    runner, log = make_runner()
    await sleep_through(runner, log, start(runner, "take a nap"), wait_dir)


async def sleep_through(runner: Runner, log: MemoryChunkLog, run_id: str, wait_dir: Path) -> None:
    """The ``nap`` run parks on its sleep (``NAP_SECONDS``), then finishes once it is due, its
    step before the sleep done once."""
    parked = await runner.run(run_id)
    assert parked.status == "awaiting_event" and [(w.name, w.kind) for w in parked.waits] == [("sleep:nap", "sleep")]
    await until_due(runner, run_id)
    assert (await runner.run(run_id)).status == "finished"
    assert tool_output(log, run_id, "nap") == "slept" and effects(wait_dir) == ["started"]


async def test_a_wait_lines_timeout_is_answered_with_timeout(wait_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WAIT_TIMEOUT", "0.2")
    runner, log = make_runner()
    await time_out(runner, log, start(runner, "build it"))


async def time_out(runner: Runner, log: MemoryChunkLog, run_id: str) -> None:
    """The ``build`` run parks on its wait (``WAIT_TIMEOUT``); once due, the program is answered
    with the timeout."""
    parked = await runner.run(run_id)
    assert parked.status == "awaiting_event" and parked.waits[0].deadline is not None
    await until_due(runner, run_id)
    assert (await runner.run(run_id)).status == "finished"
    assert tool_output(log, run_id, "build") == "timeout"


async def test_a_wait_line_after_a_part_without_a_checkpoint_fails_the_run_saying_so(wait_dir: Path) -> None:
    runner, log = make_runner()
    run_id = start(runner, "bad wait")
    final = await runner.run(run_id)
    assert final.status == "failed"
    [error] = [c for c in log_chunks(log, run_id) if c["type"] == "error"]
    assert "must come right after a checkpoint" in error["errorText"]
