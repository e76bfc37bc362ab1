"""ProcessHarness through the real runner: slices, approvals, crashes, stop, bad output, host tools.

The program is the example harness program (``examples/harness_program/notes_harness.py``), run
as a real child process; faults are injected by ``faulty_notes.py``, which wraps its output.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from durable_harness import Output, Tool
from durable_harness.approvals import sign_tool_approval
from durable_harness.errors import AgentConfigError, InvalidRequestError
from durable_harness.harness import DEFAULT_STOP_GRACE_SECONDS, CancelNotice, ProcessHarness, TurnRequest
from durable_harness.harness.process import HIDDEN_ENV, ProcessTurn
from durable_harness.protocol.ui_messages import convert_to_model_messages, parse_ui_messages
from durable_harness.server.local import build_local_kit
from pydantic import BaseModel

from examples.harness_program.agent import City, get_weather
from tests.harness import agents
from tests.harness.support import SECRET, Turns, answered, parts_of
from tests.support import log_chunks, serve, user_message

NOTE = "Save a note: buy milk"
LONG = "Run a long task in 3 parts"


@pytest.fixture(autouse=True)
def _fast_steps(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("STEP_SECONDS", "0.05")
    notes = tmp_path / "notes"
    monkeypatch.setenv("NOTES_DIR", str(notes))
    monkeypatch.setenv("PIDS_DIR", str(tmp_path / "pids"))  # for the misbehaving programs
    return notes


def types(chunks: list[dict[str, Any]]) -> list[str]:
    return [c["type"] for c in chunks]


async def test_a_turn_over_many_slices_equals_the_turn_in_one() -> None:
    whole, state = await Turns(agents.example).ask(LONG)
    assert state.status == "finished" and state.slices == 1
    sliced, state = await Turns(agents.example, slice_seconds=0).ask(LONG)
    # After stop the program goes on to its next slice point, which ends the slice: two steps a slice
    assert state.status == "finished" and state.slices >= 2
    assert "reset-step" not in types(sliced)
    assert parts_of(sliced) == parts_of(whole)
    tools = [p for p in parts_of(whole) if p["type"] == "tool-work"]
    assert [(p["toolCallId"], p["state"]) for p in tools] == [(f"call_work_{i}", "output-available") for i in (1, 2, 3)]
    assert parts_of(whole)[-1] == {"type": "text", "text": "All 3 parts are done.", "state": "done"}
    assert types(sliced)[-1] == "finish" and types(sliced).count("finish") == 1


async def test_a_runtime_approval_pauses_and_the_approved_call_runs_in_the_same_message(_fast_steps: Path) -> None:
    turns = Turns(agents.example)
    chunks, state = await turns.ask(NOTE)
    assert state.status == "awaiting_tool_approval"
    request = next(c for c in chunks if c["type"] == "tool-approval-request")
    draft = {"title": "buy milk", "text": "buy milk"}
    assert request == {
        "type": "tool-approval-request", "approvalId": "approval-call_save", "toolCallId": "call_save",
        "signature": sign_tool_approval(SECRET, "approval-call_save", "call_save", "save_note", draft),
    }  # fmt: skip
    assert chunks[-1] == {"type": "finish", "finishReason": "tool-calls"} and not _fast_steps.exists()
    more, state = await turns.run(answered(NOTE, chunks, "call_save", True), "msg_a")
    assert state.status == "finished"
    assert (_fast_steps / "buy-milk.txt").read_text() == "buy milk\n"
    assert more[0] == {"type": "start", "messageId": "msg_a"}
    final = parts_of(chunks + more[1:])
    save = next(p for p in final if p.get("toolCallId") == "call_save")
    assert save["state"] == "output-available" and save["output"] == {"saved": "buy-milk.txt"}
    assert final[-1]["text"] == "Saved your note as buy-milk.txt."


async def test_a_denied_call_shows_the_denial_and_never_runs(_fast_steps: Path) -> None:
    turns = Turns(agents.example)
    chunks, _ = await turns.ask(NOTE)
    more, state = await turns.run(answered(NOTE, chunks, "call_save", False), "msg_a")
    assert state.status == "finished" and not _fast_steps.exists()
    assert {"type": "tool-output-denied", "toolCallId": "call_save"} in more
    assert parts_of(chunks + more[1:])[-1]["text"] == "OK, I did not save the note."


@pytest.mark.parametrize(
    "tamper",
    [{"signature": "AAAA" + "x" * 39}, {"input": {"title": "buy milk", "text": "rm -rf /"}}],
    ids=["signature", "input"],
)
async def test_a_tampered_approval_never_reaches_the_program(_fast_steps: Path, tamper: dict[str, Any]) -> None:
    turns = Turns(agents.example)
    chunks, _ = await turns.ask(NOTE)
    more, state = await turns.run(answered(NOTE, chunks, "call_save", True, **tamper), "msg_a")
    assert state.status == "finished" and not _fast_steps.exists()
    assert not [c for c in more if c.get("toolCallId") == "call_save"]
    assert parts_of(chunks + more[1:])[-1]["text"] == "I did not save the note: the approval was missing or not valid."
    # The genuine answer still works afterwards: the tampered one did not use the pause up.
    _, state = await turns.run(answered(NOTE, chunks, "call_save", True), "msg_a")
    assert state.status == "finished" and (_fast_steps / "buy-milk.txt").exists()


async def test_a_program_killed_mid_step_resumes_from_its_checkpoint_with_reset_step(tmp_path: Path) -> None:
    whole, _ = await Turns(agents.example).ask(LONG)
    turns = Turns(agents.faulty("kill-mid-step", fault_dir=tmp_path))
    run_id = turns.create([user_message(LONG)], "msg_a")
    driven = asyncio.create_task(turns.orchestrator.drive(run_id))
    # The fault is triggered by what the log shows: the second step's call, logged (so shown).
    deadline = time.monotonic() + 30
    while not any(c.get("toolCallId") == "call_work_2" for c in log_chunks(turns.log, run_id)):
        assert time.monotonic() < deadline and not driven.done(), "the second step's call was never logged"
        await asyncio.sleep(0.01)
    agents.kill_mid_step(run_id, tmp_path)
    state = await asyncio.wait_for(driven, 30)
    assert state is not None
    cut = log_chunks(turns.log, run_id)
    assert state.status == "finished"
    assert types(cut).count("reset-step") == 1
    reset = types(cut).index("reset-step")
    assert "call_work_2" in [c.get("toolCallId") for c in cut[:reset]]  # the step was cut after its tool-call
    assert parts_of(cut) == parts_of(whole)


async def test_a_program_that_exits_without_finish_is_retried_from_its_checkpoint(tmp_path: Path) -> None:
    whole, _ = await Turns(agents.example).ask(LONG)
    retried, state = await Turns(agents.faulty("exit-early", fault_dir=tmp_path)).ask(LONG)
    assert state.status == "finished" and parts_of(retried) == parts_of(whole)


async def test_a_program_that_ignores_stop_is_killed_after_the_grace_period(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    whole, _ = await Turns(agents.example).ask(LONG)
    began = time.monotonic()
    with caplog.at_level(logging.WARNING, "durable_harness.harness.process"):
        program = agents.faulty("ignore-stop", grace=0.5, fault_dir=tmp_path)
        sliced, state = await Turns(program, slice_seconds=0).ask(LONG)
    assert time.monotonic() - began >= 0.5
    assert state.status == "finished" and parts_of(sliced) == parts_of(whole)
    # the step it was in is redone (with reset-step if the client could have seen some of it)
    assert any("did not reach a slice point within 0.5 s of stop" in r.message for r in caplog.records)


def test_the_grace_period_is_ten_seconds_unless_configured() -> None:
    assert DEFAULT_STOP_GRACE_SECONDS == 10.0
    assert ProcessHarness(command=["true"]).stop_grace_seconds == 10.0
    assert agents.example.stop_grace_seconds == 10.0  # the example agent file keeps the default
    with pytest.raises(AgentConfigError, match="stop_grace_seconds"):
        ProcessHarness(command=["true"], stop_grace_seconds=0)
    with pytest.raises(AgentConfigError, match="command"):
        ProcessHarness(command=[])


async def test_invalid_output_fails_the_run_with_an_error_and_finish() -> None:
    chunks, state = await Turns(agents.invalid_output).ask(LONG)
    assert state.status == "failed"
    assert types(chunks)[-2:] == ["error", "finish"] and chunks[-1]["finishReason"] == "error"
    assert chunks[-2]["errorText"] == state.error
    assert "output line 1 is invalid: it is not JSON" in chunks[-2]["errorText"]


async def test_a_part_that_breaks_the_protocol_fails_the_run(tmp_path: Path) -> None:
    program = tmp_path / "bad.py"
    program.write_text(
        'import sys; sys.stdin.readline()\nprint(\'{"type":"text-delta","id":"t","delta":1}\', flush=True)\n'
    )
    chunks, state = await Turns(ProcessHarness(command=[sys.executable, str(program)])).ask("hi")
    assert state.status == "failed" and types(chunks)[-2:] == ["error", "finish"]
    assert 'line 1 is invalid: harness stream part "text-delta"' in chunks[-2]["errorText"]


async def test_a_host_tool_runs_on_the_server_and_its_result_goes_back_to_the_program() -> None:
    chunks, state = await Turns(agents.example).ask("What is the weather in Paris?")
    assert state.status == "finished"
    expected = get_weather.execute(City(city="Paris"))  # type: ignore[misc]
    call = next(p for p in parts_of(chunks) if p["type"] == "tool-get_weather")
    assert call["state"] == "output-available" and call["output"] == expected and "providerExecuted" not in call
    assert parts_of(chunks)[-1]["text"] == f"It is {expected['conditions']} in Paris, {expected['tempC']} °C."


async def test_a_host_tool_that_needs_approval_pauses_the_program_and_runs_once_approved() -> None:
    runs: list[str] = []

    def weather(input: City) -> dict[str, object]:
        runs.append(input.city)
        return dict(get_weather.execute(input))  # type: ignore[misc]

    gated = Tool(name="get_weather", execute=weather, input_model=City, needs_approval=True)
    harness = ProcessHarness(command=agents.example.command, tools=[gated])
    turns = Turns(harness, slice_seconds=0)
    ask = "What is the weather in Oslo?"
    chunks, state = await turns.ask(ask)
    assert state.status == "awaiting_tool_approval" and runs == []
    assert next(c for c in chunks if c["type"] == "tool-approval-request")["toolCallId"] == "call_weather"
    more, state = await turns.run(answered(ask, chunks, "call_weather", True), "msg_a")
    assert state.status == "finished" and runs == ["Oslo"]
    assert parts_of(chunks + more[1:])[-1]["text"].endswith(
        "in Oslo, " + str(weather(City(city="Oslo"))["tempC"]) + " °C."
    )


async def test_stderr_goes_to_the_log_never_to_the_client(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    program = tmp_path / "noisy.py"
    program.write_text(
        "import json, sys\nsys.stdin.readline()\n"
        "print('secret diagnostics', file=sys.stderr, flush=True)\n"
        "u = {'inputTokens': {}, 'outputTokens': {}}\n"
        "r = {'unified': 'stop'}\n"
        "for p in [{'type': 'text-start', 'id': 't'}, {'type': 'text-delta', 'id': 't', 'delta': 'ok'},\n"
        "          {'type': 'text-end', 'id': 't'}, {'type': 'finish-step', 'finishReason': r, 'usage': u},\n"
        "          {'type': 'finish', 'finishReason': r, 'totalUsage': u}]:\n"
        "    print(json.dumps(p), flush=True)\n"
    )
    with caplog.at_level(logging.INFO, "durable_harness.harness.process"):
        chunks, state = await Turns(ProcessHarness(command=[sys.executable, str(program)])).ask("hi")
    assert state.status == "finished" and parts_of(chunks)[-1]["text"] == "ok"
    assert "secret diagnostics" not in str(chunks)
    assert any("secret diagnostics" in r.getMessage() for r in caplog.records)


def test_the_servers_secrets_never_reach_the_program(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOL_APPROVAL_SECRET", "s3cret-" + "0" * 32)
    harness = ProcessHarness(command=["true"], env={"EXTRA": "1"})
    env = harness.child_env()
    assert not HIDDEN_ENV & env.keys() and env["EXTRA"] == "1" and env["PATH"]


class Recording(ProcessHarness):
    """The example harness, keeping the turns it opened and the cancel notices it got."""

    def __init__(self) -> None:
        super().__init__(command=agents.example.command, builtin_tools=agents.BUILTIN)
        self.turns: list[ProcessTurn] = []
        self.cancelled: list[str] = []

    def open(self, request: TurnRequest) -> ProcessTurn:
        turn = super().open(request)
        self.turns.append(turn)
        return turn

    async def on_cancel(self, notice: CancelNotice) -> None:
        self.cancelled.append(notice.run_id)


async def test_a_cancelled_run_kills_its_program_and_tells_the_harness(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STEP_SECONDS", "5")  # the program is mid-step when the cancel comes
    harness = Recording()
    turns = Turns(harness)
    run_id = turns.runner.create_run(to_model([user_message(LONG)]), message_id="msg_c").run_id
    turns.orchestrator.start(run_id)
    deadline = time.monotonic() + 10
    while turns.log.count(run_id) < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    turns.orchestrator.cancel(run_id)
    state = await turns.runner.finalize(run_id, status="cancelled")
    assert state.status == "cancelled" and harness.cancelled == [run_id]
    chunks = log_chunks(turns.log, run_id)
    assert chunks[-1] == {"type": "finish", "finishReason": "other"} and types(chunks).count("finish") == 1
    (turn,) = harness.turns
    assert turn.proc is not None
    await asyncio.wait_for(turn.proc.wait(), 5)  # killed, long before its 5 s step would end


def to_model(ui: list[dict[str, Any]]) -> list[Any]:
    return convert_to_model_messages(parse_ui_messages(ui))


# --- parity with the built-in agent: protocol field, call options, output, results ----------------


class Tone(BaseModel):
    tone: str = "plain"
    answer: dict[str, Any] | None = None


class Answer(BaseModel):
    city: str
    degrees: int


async def run_with_options(harness: ProcessHarness, raw: dict[str, Any]) -> tuple[Turns, list[dict[str, Any]], Any]:
    turns = Turns(harness)
    options = harness.parse_call_options(raw)
    run_id = turns.runner.create_run(to_model([user_message("hi")]), message_id="msg_p", call_options=options).run_id
    state = await turns.orchestrator.drive(run_id)
    return turns, log_chunks(turns.log, run_id), state


async def test_the_first_line_carries_the_protocol_version_and_the_validated_call_options(tmp_path: Path) -> None:
    harness = agents.misbehaving("echo", call_options=Tone, registry_dir=tmp_path)
    _, chunks, state = await run_with_options(harness, {"tone": "dry"})
    assert state.status == "finished"
    seen = json.loads(parts_of(chunks)[-1]["text"])
    assert seen == {"type": "start", "protocol": 1, "callOptions": {"tone": "dry", "answer": None}}
    with pytest.raises(InvalidRequestError, match="'tone'") as bad:
        harness.parse_call_options({"tone": 5})
    assert bad.value.status == 400
    # Without a model they still reach the program, as the client sent them.
    _, chunks, _ = await run_with_options(agents.misbehaving("echo", registry_dir=tmp_path), {"locale": "fr"})
    assert json.loads(parts_of(chunks)[-1]["text"])["callOptions"] == {"locale": "fr"}


def test_a_bad_call_option_is_a_400_through_the_api(tmp_path: Path) -> None:
    harness = agents.misbehaving("echo", call_options=Tone, registry_dir=tmp_path)
    kit = build_local_kit(harness, tmp_path / "data", static_dir=None)
    with serve(kit.app) as url:
        response = httpx.post(f"{url}/api/chat", json={"messages": [user_message("hi")], "tone": 5})
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_call_options"


async def test_structured_output_comes_from_the_checkpoint_after_finish(tmp_path: Path) -> None:
    harness = agents.misbehaving("echo", call_options=Tone, output=Output.object(Answer), registry_dir=tmp_path)
    assert harness.options.has_output
    turns, _, state = await run_with_options(harness, {"answer": {"city": "Oslo", "degrees": "4"}})
    assert state.status == "finished" and state.final_result.output == {"city": "Oslo", "degrees": 4}
    assert turns.runner.result(state)["output"] == {"city": "Oslo", "degrees": 4}
    _, chunks, state = await run_with_options(harness, {"answer": {"city": "Oslo"}})
    assert state.status == "failed" and chunks[-1] == {"type": "finish", "finishReason": "error"}
    assert "output does not fit the agent's output" in state.error and "degrees" in state.error


async def test_every_harness_result_has_text_steps_and_response_messages() -> None:
    turns = Turns(agents.example)
    chunks, state = await turns.ask("What is the weather in Paris?")
    result = turns.runner.result(state)
    expected = get_weather.execute(City(city="Paris"))  # type: ignore[misc]
    assert result["text"] == parts_of(chunks)[-1]["text"]
    assert [s["finishReason"] for s in result["steps"]] == ["tool-calls", "stop"]
    (call,) = result["steps"][0]["toolCalls"]
    assert call["toolName"] == "get_weather" and call["input"] == {"city": "Paris"}
    assert result["steps"][0]["toolResults"][0]["output"] == {"type": "json", "value": expected}
    roles = [m["role"] for m in result["responseMessages"]]
    assert roles == ["assistant", "tool", "assistant"]
    assert result["responseMessages"][-1]["content"] == [{"type": "text", "text": result["text"]}]


async def test_the_result_steps_carry_the_usage_of_each_finish_step(tmp_path: Path) -> None:
    turns, chunks, state = await run_with_options(agents.misbehaving("echo", registry_dir=tmp_path), {})
    (step,) = turns.runner.result(state)["steps"]
    assert step["usage"] == {"inputTokens": 3, "outputTokens": 2, "totalTokens": 5}
    assert step["text"] == parts_of(chunks)[-1]["text"]


async def test_a_host_result_the_program_echoes_is_logged_once(tmp_path: Path) -> None:
    chunks, state = await Turns(agents.misbehaving("host-echo", registry_dir=tmp_path)).ask("hi")
    assert state.status == "finished"
    outputs = [c for c in chunks if c["type"] == "tool-output-available" and c["toolCallId"] == "call_w"]
    assert len(outputs) == 1


async def test_in_slice_mode_each_step_runs_once_across_slice_boundaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After ``stop`` the program finishes the step it is in and the runner records it: over many
    slices each of the four steps is executed once (the program logs each), none is reset."""
    log = tmp_path / "steps.log"
    monkeypatch.setenv("STEP_LOG", str(log))
    turns = Turns(agents.example, slice_seconds=0)
    sliced, state = await turns.ask("Run a long task in 4 parts")
    assert state.status == "finished" and state.slices >= 3
    assert [line.split()[1:] for line in log.read_text().splitlines()] == [["work", str(i)] for i in (1, 2, 3, 4)]
    assert "reset-step" not in types(sliced)
    whole, _ = await Turns(agents.example).ask("Run a long task in 4 parts")
    assert parts_of(sliced) == parts_of(whole)


async def test_a_later_turn_of_a_chat_starts_with_the_previous_turns_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sessionState``: the program's state at the last checkpoint of the chat's previous turn."""
    monkeypatch.setenv("PIDS_DIR", str(tmp_path / "pids"))
    turns = Turns(agents.misbehaving("echo-session"))
    first = turns.runner.create_run(to_model([user_message("one")]), message_id="msg_1", chat_id="chat_s")
    state = await turns.orchestrator.drive(first.run_id)
    assert state is not None and state.status == "finished"
    second = turns.runner.create_run(to_model([user_message("two")]), message_id="msg_2", chat_id="chat_s")
    state = await turns.orchestrator.drive(second.run_id)
    assert state is not None and state.status == "finished"
    texts = [p["text"] for p in parts_of(log_chunks(turns.log, second.run_id)) if p["type"] == "text"]
    assert texts == ["previous: one"]
    first_texts = [p["text"] for p in parts_of(log_chunks(turns.log, first.run_id)) if p["type"] == "text"]
    assert first_texts == ["previous: none"]
