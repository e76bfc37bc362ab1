"""Persistent-session runs under the real state machine in moto, their sessions in the emulated
AgentCore Runtime: the example program in ``--persistent`` mode as the deployed agent
(``Agent=tests.harness.agents:persistent``, ``SessionRuntime=agentcore``). A step longer than a
slice, several slices and a continue-as-new (``SlicesPerExecution=2``); and what the boot id rule
does deployed: a program killed mid-step, a session lost between slices (both resume from the
checkpoint in a new boot with ``reset-step``), a session lost before the turn's first program
checkpoint (the run fails, and says why).

moto has no AgentCore data plane: :mod:`.agentcore_emulator` serves ``InvokeAgentRuntime`` at the
stack's runtime ARN in front of the real bridge (``--agentcore`` mode, a subprocess per session:
the "microVM"), running the example program; the slices reach it through the functions' own
AgentCore transport, and its requests are held against the slice function's IAM policy. A session
is lost as AgentCore loses one (its microVM ends, the next invoke gets a new one): between two
slices, decided by what the run's checkpoint says, through the stack's fault hook on the slice
function's invocation (the state machine's ``RunSlice``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from durable_harness.aws.agentcore import RUNTIME_ARN_ENV, AgentCoreConnection, runtime_session_id
from durable_harness.harness.bridge import transport
from durable_harness.messages import TextPart, UserMessage
from durable_harness.protocol.assemble import assemble_ui_message
from durable_harness.runner.runner import Runner
from durable_harness.runner.state import RunState
from lambda_fastpath.aws import _client

from tests.harness import agents as harnesses
from tests.harness.support import parts_of
from tests.support import user_message

from .agentcore_emulator import AgentCoreEmulator, agentcore_emulator, bridge_argv
from .chat import call, load_chat_app, sample_event
from .helpers import log_of, runtime_of, state_of, types, wait_until
from .iam import ACTOR
from .stack import MotoStack

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = [sys.executable, str(ROOT / "examples" / "harness_program" / "notes_harness.py"), "--persistent"]
AGENTCORE = {"SessionRuntime": "agentcore", "SessionCodeBucket": "code-bucket", "SessionCodeKey": "s/session-1.zip"}
SESSIONS = {"Agent": "tests.harness.agents:persistent", "SliceSeconds": "1", **AGENTCORE}
LONG = "Run a long task in 3 parts"


@contextmanager
def session_runtime(
    stack: MotoStack, monkeypatch: pytest.MonkeyPatch, program: list[str], microvm_env: Mapping[str, str]
) -> Iterator[AgentCoreEmulator]:
    """The emulated AgentCore Runtime at the stack's runtime ARN, its microVMs running ``program``
    with the runtime's variables ``microvm_env`` (the program reads them through the bridge's
    ``--pass-env``); its requests are held against the slice function's policy at the end (the
    chat function's in-process slice makes some of them: it holds the same invoke policy)."""
    monkeypatch.setattr(_client, "backoff", lambda attempt, **_: 0.0)
    monkeypatch.setattr(transport, "_factory", None)  # (the functions' build_runtime installs theirs)
    runtime_arn = stack.resolver.attributes[("HarnessSessionRuntime", "AgentRuntimeArn")]
    argv = bridge_argv(program)
    argv[argv.index("--"):argv.index("--")] = [a for name in microvm_env for a in ("--pass-env", name)]
    with agentcore_emulator(runtime_arn, argv, microvm_env) as emulator:
        monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_AGENTCORE", emulator.url)
        # The functions' own variable, which their transport reads at each connect: the chat
        # function's in-process slice runs on the test's loop, outside its environment's patch.
        monkeypatch.setenv(RUNTIME_ARN_ENV, runtime_arn)
        yield emulator
        stack.record_agentcore("SliceFunction", [request.path for request in emulator.requests])


def create_run(stack: MotoStack, text: str = LONG) -> RunState:
    """A new run of the persistent harness (a session of its own), as the chat function creates it."""
    runtime = runtime_of(stack, "SliceFunction")
    runner = Runner(harnesses.persistent, runtime.store, runtime.log)
    return runner.create_run([UserMessage(content=[TextPart(text=text)])])


def drive(stack: MotoStack, run: RunState, *, executions: int = 1) -> RunState:
    """Start the run's state machine execution and wait until it has ended; the run's last state."""
    runtime_of(stack, "SliceFunction").orchestrator.start(run.run_id)
    stack.wait_for_executions(run.run_id, count=executions, timeout=120)
    return state_of(stack, run.run_id)


def lose_between_slices(
    stack: MotoStack, emulator: AgentCoreEmulator, when: Callable[[dict[str, Any]], bool]
) -> list[dict[str, Any]]:
    """Lose a run's session (its microVM ends) once, before the first slice the state machine starts
    while that run's checkpointed turn state satisfies ``when``; the states it was lost at."""
    store = runtime_of(stack).store
    lost: list[dict[str, Any]] = []

    def before(actor: str, operation: str, params: Mapping[str, Any]) -> None:
        if (actor, operation) != ("SliceFunction", "Invoke") or lost:
            return None
        token = ACTOR.set("harness")  # the test's own read
        try:
            state = RunState.model_validate_json(store.load(params["runId"]).state)
        finally:
            ACTOR.reset(token)
        if isinstance(state.turn, dict) and when(state.turn):
            emulator.lose(runtime_session_id(state.session_id))
            lost.append(state.turn)
        return None  # the invocation goes on

    stack.fault_injector = before
    return lost


def work_parts(chunks: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """``(toolCallId, state)`` of the message's ``work`` tool parts."""
    return [(p["toolCallId"], p["state"]) for p in assemble_ui_message(chunks)["parts"] if p["type"] == "tool-work"]


def assert_resumed_once(chunks: list[dict[str, Any]], whole: list[dict[str, Any]]) -> None:
    """The client was told once to drop the step in flight (``reset-step``), the turn ended once,
    and the message is the uninterrupted run's (``whole``)."""
    assert types(chunks).count("reset-step") == 1
    assert types(chunks).count("finish") == 1 and types(chunks)[-1] == "finish"
    assert parts_of(chunks) == parts_of(whole)


def executed(log: Path) -> list[tuple[str, str]]:
    """``(pid, step)`` for each step the program executed (its ``STEP_LOG``)."""
    return [(pid, what) for pid, what in (line.split(" ", 1) for line in log.read_text().splitlines())]


@pytest.mark.stack_parameters(**SESSIONS, SlicesPerExecution="2")
def test_a_persistent_session_serves_every_slice_and_a_continue_as_new(
    stack: MotoStack, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    steps = tmp_path / "steps.log"
    with session_runtime(stack, monkeypatch, PROGRAM, {"STEP_SECONDS": "2.5", "STEP_LOG": str(steps)}) as emulator:
        run = create_run(stack)
        state = drive(stack, run, executions=2)
        executions = stack.wait_for_executions(run.run_id, count=2)
        assert state.status == "finished", (state.status, [e["status"] for e in executions])
        # One microVM (one bridge, one program) served every slice, across the continue-as-new.
        assert emulator.microvms_started == 1
    slices = stack.calls_of("SliceFunction", run.run_id)
    # More slices than steps (three work steps and the answer): a step spanned slices.
    assert len(slices) > 4 and {s.event["generation"] for s in slices} >= {0, 1}
    assert all(e["status"] == "SUCCEEDED" for e in executions)
    # A 2.5 s step in 1 s slices: steps spanned slices, and none was redone.
    chunks = log_of(stack, run.run_id)
    assert "reset-step" not in types(chunks) and types(chunks).count("finish") == 1
    assert len({pid for pid, _ in executed(steps)}) == 1  # one process
    assert len(executed(steps)) == len({what for _, what in executed(steps)})  # each step once
    assert work_parts(chunks) == [(f"call_work_{i}", "output-available") for i in (1, 2, 3)]
    last = {"type": "text", "text": "All 3 parts are done.", "state": "done"}
    assert assemble_ui_message(chunks)["parts"][-1] == last
    assert not stack.calls_of("FinalizerFunction")


@pytest.mark.stack_parameters(**SESSIONS)
def test_a_program_killed_mid_step_resumes_from_its_checkpoint_in_a_new_boot(
    stack: MotoStack, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The program dies mid-step (SIGKILL; its bridge, the microVM, stays): the slice that finds its
    boot gone starts a new boot, which gets ``continue`` from the last checkpoint with
    ``replayStep``; the client gets ``reset-step`` once and the message of an uninterrupted run."""
    faults, steps = tmp_path / "faults", tmp_path / "steps.log"
    faults.mkdir()
    # The example program, whose second step of each run waits mid-step to be killed (faulty_notes.py).
    program = [sys.executable, str(ROOT / "tests" / "harness" / "faulty_notes.py"), "kill-mid-step", str(faults),
               "--persistent"]  # fmt: skip
    with session_runtime(stack, monkeypatch, program, {"STEP_SECONDS": "0.3", "STEP_LOG": str(steps)}) as emulator:
        whole = create_run(stack)
        (faults / f"kill-mid-step-{whole.run_id}.killed").touch()  # this one runs uninterrupted
        assert drive(stack, whole).status == "finished"
        run = create_run(stack)
        runtime_of(stack, "SliceFunction").orchestrator.start(run.run_id)
        # Killed once the client could see the second step's tool call (a slice read it), never before.
        shown = lambda: any(c.get("toolCallId") == "call_work_2" for c in log_of(stack, run.run_id))  # noqa: E731
        wait_until(lambda: (faults / f"kill-mid-step-{run.run_id}.pid").exists() and shown(), 60, "the second step")
        boot = state_of(stack, run.run_id).turn["session"]["bootId"]
        harnesses.kill_mid_step(run.run_id, faults)
        stack.wait_for_executions(run.run_id, timeout=120)
        state = state_of(stack, run.run_id)
        assert emulator.microvms_started == 2  # one per run's session: the killed program's bridge stayed
    assert state.status == "finished", state.error
    assert state.turn["session"]["bootId"] != boot  # resumed in a new boot of the same session
    assert_resumed_once(log_of(stack, run.run_id), log_of(stack, whole.run_id))
    # The step in flight ran again in the new boot; the others once.
    mine = executed(steps)[3:]  # (after the uninterrupted run's three)
    assert [what for _, what in mine] == ["work 1", "work 2", "work 2", "work 3"]
    assert mine[0][0] == mine[1][0] != mine[2][0] == mine[3][0]  # the killed program's, then the new boot's
    assert not stack.calls_of("FinalizerFunction")


@pytest.mark.stack_parameters(**SESSIONS)
def test_a_session_lost_between_slices_resumes_from_its_checkpoint_in_a_new_microvm(
    stack: MotoStack, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """AgentCore ends the session's microVM between two slices (idle timeout, maximum lifetime, a
    host failure) while a step is in flight: the next slice finds no boot of its cursor's, resumes
    from the last checkpoint in a new microVM; ``reset-step`` once, the uninterrupted message."""
    steps = tmp_path / "steps.log"
    with session_runtime(stack, monkeypatch, PROGRAM, {"STEP_SECONDS": "0.3", "STEP_LOG": str(steps)}) as emulator:
        whole = create_run(stack)
        assert drive(stack, whole).status == "finished"
        emulator.state.env["STEP_SECONDS"] = "2.5"  # (the next microVMs') steps that span slices
        run = create_run(stack)
        # Lost once a step was checkpointed and the client was shown part of the next one.
        lost = lose_between_slices(stack, emulator, lambda turn: turn.get("program") is not None and bool(
            turn["session"]["shown"]))  # fmt: skip
        state = drive(stack, run)
        assert emulator.microvms_started == 3  # the reference's, the run's first, and the new one
    assert len(lost) == 1 and state.status == "finished", state.error
    assert state.turn["session"]["bootId"] != lost[0]["session"]["bootId"]
    assert_resumed_once(log_of(stack, run.run_id), log_of(stack, whole.run_id))
    assert len(stack.calls_of("SliceFunction", run.run_id)) > 4  # steps spanned slices
    assert not stack.calls_of("FinalizerFunction")


@pytest.mark.stack_parameters(**SESSIONS)
async def test_a_session_lost_before_the_turns_first_checkpoint_fails_the_run_with_a_clear_error(
    stack: MotoStack, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The boot id rule's other branch: a slice detached in the turn's first step (no program
    checkpoint yet) and the session was lost before the next one. There is nothing to resume from
    and the session is never restarted empty: the chat POST's client gets an ``error`` that says
    so, then ``finish``."""
    body = {"id": "chat-lost", "messages": [user_message(LONG)]}
    post = {**sample_event("chat-post.json"), "body": json.dumps(body)}
    with session_runtime(stack, monkeypatch, PROGRAM, {"STEP_SECONDS": "30"}) as emulator:
        with stack.function_env("ChatFunction"):
            app = load_chat_app()
        # The chat function's slice (1 s) detaches in the 30 s first step; lost before the next slice.
        lost = lose_between_slices(stack, emulator, lambda turn: turn.get("program") is None and bool(
            turn["session"]["bootId"]))  # fmt: skip
        response = await call(app, post, timeout=120)
        assert response.status == 200, response.body
        run_id = response.headers["x-workflow-run-id"]
        # Nothing was started in the new microVM: a program there would run with no turn to serve.
        status = await AgentCoreConnection.from_env(state_of(stack, run_id).session_id).status()
        assert (status["bootId"], status["running"]) == (None, False)
    chunks = response.chunks()
    assert len(lost) == 1 and chunks == log_of(stack, run_id)
    names = types(chunks)
    assert names.count("finish") == 1 and names[names.index("error"):] in (["error", "finish"],
                                                                          ["error", "finish-step", "finish"])
    error = chunks[names.index("error")]["errorText"]
    assert f"session {state_of(stack, run_id).session_id} was lost" in error
    assert "before its program's first checkpoint" in error and "Send the message again" in error
    state = state_of(stack, run_id)
    assert (state.status, state.error) == ("failed", error)
    assert [s.result["status"] for s in stack.calls_of("SliceFunction", run_id)] == ["failed"]
