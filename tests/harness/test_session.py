"""Persistent sessions (``ProcessHarness(session="persistent")``, protocol 2): the example program
(``notes_harness.py --persistent``) in a real detached bridge, driven by the runner and the local
orchestrator in slices. The program notes each step it executes (with its pid) in ``STEP_LOG``;
the tests wait on what they observe (that log, the chunk log, the registry), never on sleeps, and
each ends every bridge it started (checked)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from durable_harness.errors import AgentConfigError
from durable_harness.harness import ProcessHarness
from durable_harness.harness.bridge import find
from durable_harness.harness.bridge.registry import bridges_dir, is_alive
from durable_harness.harness.bridge.transport import (
    SessionTransport,
    check_session_runtime,
    session_runtime,
)

from examples.harness_program.agent import session_agent
from tests.harness import agents
from tests.harness.serving import Server, wait_until
from tests.harness.support import Turns, answered, parts_of
from tests.harness.test_process import to_model, types
from tests.harness.test_process_lifecycle import running
from tests.support import log_chunks, user_message

LONG = "Run a long task in 3 parts"


@pytest.fixture
def sessions(tmp_path: Path) -> AsyncIterator[Path]:
    folder = tmp_path / "sessions"
    yield folder  # type: ignore[misc]


@pytest.fixture
def steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = tmp_path / "steps.log"
    monkeypatch.setenv("STEP_LOG", str(log))
    return log


def logged(log: Path) -> list[tuple[int, str]]:
    """(pid, step) for each step the program executed."""
    lines = log.read_text().splitlines() if log.exists() else []
    return [(int(line.split()[0]), " ".join(line.split()[1:])) for line in lines]


def bridge_pids(folder: Path) -> list[int]:
    """The bridges registered in ``folder`` that still run."""
    import json

    pids = []
    for path in bridges_dir(folder).glob("*.json") if folder.exists() else []:
        try:
            record = json.loads(path.read_text())
        except FileNotFoundError:  # listed, then removed by the bridge that ended (records are renamed in whole)
            continue
        if is_alive(record.get("pid"), record.get("startTime")):
            pids.append(int(record["pid"]))
    return pids


async def until(condition: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)
    return value


async def end_bridges(folder: Path, session_id: str | None = None) -> None:
    """Destroy the test's bridges and check that none is left."""
    for path in bridges_dir(folder).glob("*.json") if folder.exists() else []:
        import json

        try:
            sid = json.loads(path.read_text()).get("sessionId") or session_id
        except FileNotFoundError:  # its bridge ended meanwhile
            continue
        connection = find(folder, sid) if sid else None
        if connection is not None:
            try:
                await connection.destroy()
            finally:
                await connection.aclose()
    await until(lambda: not bridge_pids(folder), "every bridge to end")


def harness(folder: Path, **options: Any) -> ProcessHarness:
    return session_agent(sessions_dir=folder, stop_grace_seconds=2.0, **options)


async def drive(turns: Turns, text: str, chat: str, message_id: str) -> tuple[list[dict[str, Any]], Any]:
    state = turns.runner.create_run(to_model([user_message(text)]), message_id=message_id, chat_id=chat)
    final = await turns.orchestrator.drive(state.run_id)
    return log_chunks(turns.log, state.run_id), final


async def test_a_step_longer_than_a_slice_completes_in_one_process(
    sessions: Path, steps: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``SLICE_SECONDS=1``, a 3 s step: the slices detach and reattach; nothing is redone."""
    monkeypatch.setenv("STEP_SECONDS", "3")
    try:
        turns = Turns(harness(sessions), slice_seconds=1)
        chunks, state = await drive(turns, LONG, "chat_long", "msg_l")
        assert state.status == "finished" and state.slices >= 3 * 3
        assert [step for _, step in logged(steps)] == ["work 1", "work 2", "work 3"]  # each ran once
        assert len({pid for pid, _ in logged(steps)}) == 1  # one process served every slice
        assert "reset-step" not in types(chunks)
        assert parts_of(chunks)[-1] == {"type": "text", "text": "All 3 parts are done.", "state": "done"}
    finally:
        await end_bridges(sessions)


async def test_two_turns_of_a_chat_are_served_by_one_process(sessions: Path, steps: Path) -> None:
    try:
        turns = Turns(harness(sessions))
        _, first = await drive(turns, "hi", "chat_two", "msg_1")
        chunks, second = await drive(turns, "hi again", "chat_two", "msg_2")
        assert first.status == second.status == "finished"
        assert [step for _, step in logged(steps)] == ["hello", "hello"]
        assert len({pid for pid, _ in logged(steps)}) == 1
        assert "This is turn 2 of this session." in parts_of(chunks)[-1]["text"]  # its memory carried over
        assert bridge_pids(sessions)  # the session stays for the next turn
    finally:
        await end_bridges(sessions)


async def test_destroy_on_finish_ends_the_session(sessions: Path, steps: Path) -> None:
    try:
        turns = Turns(harness(sessions, destroy_on_finish=True))
        _, state = await drive(turns, "hi", "chat_d", "msg_1")
        assert state.status == "finished"
        await until(lambda: not bridge_pids(sessions), "the session to end")
        ((pid, _),) = logged(steps)
        await until(lambda: not running(pid), "the program to end")
    finally:
        await end_bridges(sessions)


async def test_an_idle_session_ends(sessions: Path, steps: Path) -> None:
    try:
        turns = Turns(harness(sessions, session_idle_seconds=1))
        _, state = await drive(turns, "hi", "chat_i", "msg_1")
        assert state.status == "finished"
        await until(lambda: not bridge_pids(sessions), "the idle session to end")
    finally:
        await end_bridges(sessions)


async def test_a_killed_program_resumes_from_its_checkpoint_with_reset_step(
    sessions: Path, steps: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEP_SECONDS", "1")
    try:
        whole, _ = await drive(Turns(harness(sessions)), LONG, "chat_whole", "msg_w")
        turns = Turns(harness(sessions))
        run = turns.runner.create_run(to_model([user_message(LONG)]), message_id="msg_w", chat_id="chat_k")
        driven = asyncio.create_task(turns.orchestrator.drive(run.run_id))
        shown = lambda: any(c.get("toolCallId") == "call_work_2" for c in log_chunks(turns.log, run.run_id))  # noqa: E731
        await until(shown, "the second step's tool call")
        pid = [p for p, step in logged(steps) if step == "work 2"][-1]  # this run's program (the last)
        os.kill(pid, signal.SIGKILL)
        state = await driven
        chunks = log_chunks(turns.log, run.run_id)
        assert state is not None and state.status == "finished"
        assert types(chunks).count("reset-step") == 1
        assert parts_of(chunks) == parts_of(whole)
    finally:
        await end_bridges(sessions)


async def test_cancel_mid_step_ends_the_turn_with_one_finish(
    sessions: Path, steps: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEP_SECONDS", "30")
    try:
        turns = Turns(harness(sessions))
        run = turns.runner.create_run(to_model([user_message(LONG)]), message_id="msg_c", chat_id="chat_c")
        turns.orchestrator.start(run.run_id)
        await until(lambda: logged(steps), "the first step")
        await until(lambda: any(c.get("toolCallId") == "call_work_1" for c in log_chunks(turns.log, run.run_id)),
                    "the first step's tool call")  # fmt: skip
        turns.orchestrator.cancel(run.run_id)
        state = await turns.runner.finalize(run.run_id, status="cancelled")
        assert state.status == "cancelled"
        assert types(log_chunks(turns.log, run.run_id)).count("finish") == 1
        # the program ended the turn (it got `cancel`): the session serves the next one at once
        _, after = await drive(turns, "hi", "chat_c", "msg_n")
        assert after.status == "finished"
        assert [step for _, step in logged(steps)] == ["work 1", "hello"]  # it stopped at the cancel
        assert len({pid for pid, _ in logged(steps)}) == 1
    finally:
        await end_bridges(sessions)


@pytest.mark.parametrize("approved", [True, False])
async def test_approve_and_deny_round_trips_in_a_session(
    approved: bool, sessions: Path, steps: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NOTES_DIR", str(tmp_path / "notes"))
    try:
        turns = Turns(harness(sessions))
        ask = [user_message("Save a note: buy milk")]
        chunks, state = await turns.run(ask, "msg_n")
        assert state.status == "awaiting_tool_approval"
        history = answered("Save a note: buy milk", chunks, "call_save", approved)
        more, state = await turns.run(history, "msg_n")
        assert state.status == "finished"
        text = parts_of(chunks + more[1:])[-1]["text"]
        assert text == ("Saved your note as buy-milk.txt." if approved else "OK, I did not save the note.")
        assert (tmp_path / "notes" / "buy-milk.txt").exists() == approved
        assert [step for _, step in logged(steps)] == ["note 0", "note 1", "note 2"]
        assert len({pid for pid, _ in logged(steps)}) == 1  # the paused turn's process got the answer
    finally:
        await end_bridges(sessions)


async def test_a_tampered_answer_never_reaches_the_program(
    sessions: Path, steps: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    notes = tmp_path / "notes"
    monkeypatch.setenv("NOTES_DIR", str(notes))
    try:
        turns = Turns(harness(sessions))
        chunks, _ = await turns.run([user_message("Save a note: buy milk")], "msg_t")
        tampered = answered("Save a note: buy milk", chunks, "call_save", True, signature="AAAA" + "x" * 39)
        more, state = await turns.run(tampered, "msg_t")
        assert state.status == "finished" and not notes.exists()
        said = parts_of(chunks + more[1:])[-1]["text"]
        assert said == "I did not save the note: the approval was missing or not valid."
        assert [step for _, step in logged(steps)] == ["note 0", "note 1", "note 2"]
        assert len({pid for pid, _ in logged(steps)}) == 1
    finally:
        await end_bridges(sessions)


def test_a_persistent_harness_is_refused_when_deployed_without_a_session_runtime(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert session_runtime({}) == "none"
    check_session_runtime({"SESSION_RUNTIME": "agentcore", "AWS_LAMBDA_FUNCTION_NAME": "f"})
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "chat")
    monkeypatch.delenv("SESSION_RUNTIME", raising=False)
    with pytest.raises(AgentConfigError, match="SessionRuntime parameter set to agentcore"):
        session_agent()
    monkeypatch.setenv("SESSION_RUNTIME", "bogus")
    with pytest.raises(AgentConfigError, match="SESSION_RUNTIME must be one of none, agentcore"):
        session_agent()


def test_the_local_connection_satisfies_the_session_transport() -> None:
    from durable_harness.harness.bridge import BridgeConnection

    connection = BridgeConnection("http://127.0.0.1:9", "s", "sess_x")
    assert isinstance(connection, SessionTransport)


def test_a_server_killed_mid_step_reattaches_and_nothing_is_redone(tmp_path: Path) -> None:
    """SIGKILL of the real server mid-step (a 3 s step, 1 s slices), a restart on the same data:
    the session's program kept working, the run completes, each step ran once, no ``reset-step``."""
    steps, data = tmp_path / "steps.log", tmp_path / "data"
    env = {"STEP_SECONDS": "3", "STEP_LOG": str(steps), "SLICE_SECONDS": "1"}
    server = Server("tests.harness.agents:persistent", data, env).start()
    sessions = data / "sessions"
    try:
        run_id = server.start_run(LONG)
        wait_until(lambda: [s for _, s in logged(steps)] == ["work 1", "work 2"], "the second step")
        server.kill()
        (bridge,) = bridge_pids(sessions)  # the session outlived the server
        server.start()  # the same data: the run is driven again at start-up
        result = server.finished(run_id)
        assert result["status"] == "finished" and result["text"].endswith("All 3 parts are done.")
        assert [step for _, step in logged(steps)] == ["work 1", "work 2", "work 3"]  # each ran once
        assert len({pid for pid, _ in logged(steps)}) == 1 and bridge_pids(sessions) == [bridge]
        chunks = httpx.get(f"{server.base}/api/chat/{run_id}/stream?startIndex=0", timeout=30).text
        assert "reset-step" not in chunks
    finally:
        server.stop()
        asyncio.run(end_bridges(sessions))


async def test_the_program_and_its_bridge_hold_no_kit_secret(
    sessions: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The program's environment is minimal, and so is its parent's, the bridge's."""
    import json

    monkeypatch.setenv("TOOL_APPROVAL_SECRET", "s" * 40)
    monkeypatch.setenv("AUTH_TOKEN_HASHES", "h" * 64)
    monkeypatch.setenv("PIDS_DIR", str(tmp_path / "pids"))
    program = agents.misbehaving("environ", session="persistent", sessions_dir=sessions, stop_grace_seconds=2.0)
    try:
        chunks, state = await Turns(program).ask("hi")
        assert state.status == "finished"
        seen = json.loads(parts_of(chunks)[-1]["text"])
        assert not {"TOOL_APPROVAL_SECRET", "AUTH_TOKEN_HASHES"} & set(seen["variables"])
        assert "with the secret" not in seen["parent"]  # the bridge never had it
    finally:
        await end_bridges(sessions)


async def test_a_host_tool_result_reaches_the_program_in_its_session(sessions: Path, steps: Path) -> None:
    try:
        chunks, state = await Turns(harness(sessions)).ask("What is the weather in Paris?")
        assert state.status == "finished"
        call = next(p for p in parts_of(chunks) if p["type"] == "tool-get_weather")
        assert call["state"] == "output-available" and call["output"]["city"] == "Paris"
        assert parts_of(chunks)[-1]["text"].startswith(f"It is {call['output']['conditions']} in Paris")
    finally:
        await end_bridges(sessions)


async def test_a_program_that_ignores_cancel_is_killed_after_the_grace(
    sessions: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pids = tmp_path / "pids"
    monkeypatch.setenv("PIDS_DIR", str(pids))
    program = agents.misbehaving("fork-hang", session="persistent", sessions_dir=sessions, stop_grace_seconds=0.5)
    try:
        turns = Turns(program)
        run = turns.runner.create_run(to_model([user_message("hi")]), message_id="msg_h", chat_id="chat_h")
        turns.orchestrator.start(run.run_id)
        (leader,) = await until(lambda: [int(p.read_text()) for p in pids.glob("leader-*.pid")], "the program")
        await until(lambda: log_chunks(turns.log, run.run_id), "the turn's first chunk")
        turns.orchestrator.cancel(run.run_id)
        state = await turns.runner.finalize(run.run_id, status="cancelled")
        assert state.status == "cancelled" and types(log_chunks(turns.log, run.run_id)).count("finish") == 1
        await until(lambda: not running(leader), "the program to be killed")
        children = [int(p.read_text()) for p in pids.glob("child-*.pid")]
        await until(lambda: not [pid for pid in children if running(pid)], "what it forked to be killed too")
        assert bridge_pids(sessions)  # the session stays; its next turn starts a new boot
    finally:
        await end_bridges(sessions)
