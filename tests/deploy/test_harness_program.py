"""A harness program (``ProcessHarness``) under the real state machine in moto: the example program
as the deployed agent (``Agent=tests.harness.agents:example``), a run over several slices, each
a Lambda invocation that starts the program again from its last checkpoint, and a continue-as-new
(``SlicesPerExecution=2``) in the middle of it; and two turns of one chat through the chat function,
the second starting from the first's last checkpoint (``sessionState``)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from durable_harness.aws.stepfunctions import execution_name
from durable_harness.messages import TextPart, UserMessage
from durable_harness.protocol.assemble import assemble_ui_message
from durable_harness.runner.runner import Runner

from tests.harness import agents as harnesses
from tests.support import user_message

from .chat import call, sample_event
from .helpers import log_of, runtime_of, state_of, types
from .stack import MotoStack
from .test_inline_slice import chat_app


@pytest.mark.stack_parameters(Agent="tests.harness.agents:example", SlicesPerExecution="2")
def test_a_harness_program_runs_over_slices_and_continues_as_new(
    stack: MotoStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEP_SECONDS", "0.05")
    runtime = runtime_of(stack)
    runner = Runner(harnesses.example, runtime.store, runtime.log)
    run_id = runner.create_run([UserMessage(content=[TextPart(text="Run a long task in 6 parts")])]).run_id
    runtime.orchestrator.start(run_id)
    executions = stack.wait_for_executions(run_id, count=2, timeout=60)
    inc = runtime.store.incarnation(run_id)
    assert [(e["name"], e["status"]) for e in executions] == [
        (execution_name(run_id, 0, inc), "SUCCEEDED"),
        (execution_name(run_id, 1, inc), "SUCCEEDED"),
    ]
    slices = stack.calls_of("SliceFunction", run_id)
    # SliceSeconds=0: a slice per two steps (after stop the program finishes the step it is in,
    # recorded): six work steps, then the answer that ends the turn.
    assert [s.result["status"] for s in slices] == ["ready_for_next_step"] * 3 + ["finished"]
    assert [s.event["generation"] for s in slices] == [0, 0, 1, 1]
    chunks = log_of(stack, run_id)
    assert types(chunks).count("finish") == 1 and types(chunks)[-1] == "finish" and "reset-step" not in types(chunks)
    message = assemble_ui_message(chunks)
    work = [(p["toolCallId"], p["state"]) for p in message["parts"] if p["type"] == "tool-work"]
    assert work == [(f"call_work_{i}", "output-available") for i in range(1, 7)]
    assert message["parts"][-1] == {"type": "text", "text": "All 6 parts are done.", "state": "done"}
    state = state_of(stack, run_id)
    assert state.status == "finished" and state.slices == 4
    assert not stack.calls_of("FinalizerFunction")


def post_of(chat_id: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """A chat POST's Function URL event (``events/chat-post.json``) with this body."""
    event = sample_event("chat-post.json")
    event["body"] = json.dumps({"id": chat_id, "messages": messages})
    return event


def texts(chunks: list[dict[str, Any]]) -> list[str]:
    """The texts of the message the chunks make."""
    return [p["text"] for p in assemble_ui_message(chunks)["parts"] if p["type"] == "text"]


@pytest.mark.stack_parameters(Agent="tests.harness.agents:session_steps")
async def test_a_later_turn_of_a_chat_starts_with_the_previous_turns_last_checkpoint_state(
    stack: MotoStack, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``sessionState`` deployed (issue 18): two turns of one chat through the chat function (its
    in-process first slice, handed over to the state machine and the slice function). Each turn
    spans two slices (``SliceSeconds=0``: the program checkpoints, gets ``stop`` and the next
    slice's program ends the turn); turn 2's ``start`` line carries turn 1's last checkpoint state,
    the one written after its ``finish``; turn 1's has none."""
    monkeypatch.setenv("PIDS_DIR", str(tmp_path / "pids"))
    app = chat_app(stack)
    one = user_message("one")
    first = await call(app, post_of("chat-steps", [one]), timeout=60)
    assert first.status == 200, first.body
    first_run = first.headers["x-workflow-run-id"]
    assert texts(first.chunks()) == ["previous: none", "said: one"]
    assistant = {"id": first.chunks()[0]["messageId"], "role": "assistant",
                 "parts": [{"type": "text", "text": text} for text in texts(first.chunks())]}  # fmt: skip
    second = await call(app, post_of("chat-steps", [one, assistant, user_message("two", "u2")]), timeout=60)
    assert second.status == 200, second.body
    second_run = second.headers["x-workflow-run-id"]
    last = {"said": "one", "step": "done"}
    assert state_of(stack, first_run).turn["program"] == last  # what the slice function checkpointed last
    assert texts(second.chunks()) == [f"previous: {json.dumps(last, sort_keys=True)}", "said: two"]
    for run_id, response in ((first_run, first), (second_run, second)):
        assert response.chunks() == log_of(stack, run_id)
        assert types(response.chunks()).count("finish") == 1 and "reset-step" not in types(response.chunks())
        assert [s.result["slices"] for s in stack.calls_of("SliceFunction", run_id)] == [2]  # the chat function ran 1
        [execution] = await asyncio.to_thread(stack.wait_for_executions, run_id)
        assert execution["status"] == "SUCCEEDED", execution
