"""A harness program (``ProcessHarness``) under the real state machine in moto: the example program
as the deployed agent (``Agent=tests.harness.agents:example``), a run over several slices, each
a Lambda invocation that starts the program again from its last checkpoint, and a continue-as-new
(``SlicesPerExecution=2``) in the middle of it."""

from __future__ import annotations

import pytest
from durable_harness.aws.stepfunctions import execution_name
from durable_harness.messages import TextPart, UserMessage
from durable_harness.protocol.assemble import assemble_ui_message
from durable_harness.runner.runner import Runner

from tests.harness import agents as harnesses

from .helpers import log_of, runtime_of, state_of, types
from .stack import MotoStack


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
