"""The real state machine (statemachine/run.asl.json) driving the real slice and finalizer handlers.

Everything runs in moto (aws-notes 9): DynamoDB, S3, Step Functions' interpreter, EventBridge;
the handlers run in this process with their functions' environments from template.yaml. The
stack fixture also checks every AWS call made against the template's IAM policies.
"""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from durable_harness.approvals import verify_tool_approval
from durable_harness.aws.stepfunctions import execution_name
from durable_harness.messages import TextPart, UserMessage
from durable_harness.runner.runner import Runner

from . import agents
from .chat import call, load_chat_app, sample_event, with_path
from .helpers import (
    assert_complete_turn,
    lifecycle_listener,
    log_of,
    runtime_of,
    start_run,
    state_of,
    types,
    wait_until,
)
from .stack import MotoStack


def test_a_run_takes_several_slices_in_one_execution(stack: MotoStack) -> None:
    run_id = start_run(stack)
    [execution] = stack.wait_for_executions(run_id)
    assert execution["status"] == "SUCCEEDED", execution
    slices = stack.calls_of("SliceFunction", run_id)
    # SliceSeconds=0: one step per slice. Tool step, tool step, and the answer step, whose slice also
    # ends the turn (no slice runs only to send `finish`).
    assert [s.result["status"] for s in slices] == ["ready_for_next_step"] * 2 + ["finished"]
    assert [s.result["slices"] for s in slices] == [1, 2, 3]
    assert [s.event["generation"] for s in slices] == [0, 0, 0]
    state = state_of(stack, run_id)
    assert state.status == "finished" and state.slices == 3
    chunks = log_of(stack, run_id)
    assert_complete_turn(chunks)
    assert "reset-step" not in types(chunks)
    assert agents.CONTROL.executions == {"alpha": 1, "beta": 1}
    # Decision D6's arithmetic: 7 history events per slice (Task + Choice), plus the fixed ones.
    history = stack.history(execution["executionArn"])
    assert len(history) == 8 + 7 * len(slices)
    assert not stack.calls_of("FinalizerFunction")


def test_a_crashed_slice_is_retried_and_redoes_only_its_step(stack: MotoStack) -> None:
    agents.CONTROL.retryable_crashes = 1
    run_id = start_run(stack)
    [execution] = stack.wait_for_executions(run_id)
    assert execution["status"] == "SUCCEEDED", execution
    slices = stack.calls_of("SliceFunction", run_id)
    assert [s.error for s in slices].count("RetryableSliceError") == 1
    assert [s.event["attempt"] for s in slices if s.event["attempt"]] == [1]
    failed = [e for e in stack.history(execution["executionArn"]) if e["type"] == "TaskFailed"]
    assert [e["taskFailedEventDetails"]["error"] for e in failed] == ["RetryableSliceError"]
    chunks = log_of(stack, run_id)
    # The crashed attempt had streamed part of step 2: the retry tells the client to drop it.
    assert types(chunks).count("reset-step") == 1
    assert_complete_turn(chunks)
    assert agents.CONTROL.executions == {"alpha": 1, "beta": 1}
    assert agents.CONTROL.model_calls[1] == 2  # step 2 was called again, step 1 was not
    assert agents.CONTROL.model_calls[0] == 1
    assert state_of(stack, run_id).status == "finished"


def test_a_slice_killed_by_lambda_is_retried_as_lambda_unknown_and_resumes_with_reset_step(stack: MotoStack) -> None:
    # Simulated: the slice streams part of step 2 and then its sandbox is killed (a timeout or out
    # of memory). Lambda answers such an invocation with a function error that has no errorType,
    # which Step Functions reports as Lambda.Unknown (moto names it so after repair_lambda_unknown).
    agents.CONTROL.sandbox_kills = 2
    run_id = start_run(stack)
    [execution] = stack.wait_for_executions(run_id)
    assert execution["status"] == "SUCCEEDED", execution
    failed = [e for e in stack.history(execution["executionArn"]) if e["type"] == "TaskFailed"]
    assert [e["taskFailedEventDetails"]["error"] for e in failed] == ["Lambda.Unknown", "Lambda.Unknown"]
    slices = stack.calls_of("SliceFunction", run_id)
    assert [s.error for s in slices].count("SandboxKilled") == 2
    assert [s.event["attempt"] for s in slices if s.event["attempt"]] == [1, 2]  # the retries of one task
    chunks = log_of(stack, run_id)
    # Each killed attempt had committed part of step 2: each retry tells the client to drop it.
    assert types(chunks).count("reset-step") == 2
    assert_complete_turn(chunks)
    assert agents.CONTROL.executions == {"alpha": 1, "beta": 1}  # no tool ran twice
    assert agents.CONTROL.model_calls[1] == 3 and agents.CONTROL.model_calls[0] == 1
    assert state_of(stack, run_id).status == "finished"
    assert not stack.calls_of("FinalizerFunction")


def test_a_fatal_error_ends_in_the_finalizer_with_error_and_finish(stack: MotoStack) -> None:
    agents.CONTROL.fatal = True
    run_id = start_run(stack)
    [execution] = stack.wait_for_executions(run_id)
    assert execution["status"] == "FAILED"
    assert execution["error"] == "RunFinalized"
    [slice_error] = [s.error for s in stack.calls_of("SliceFunction", run_id) if s.error]
    assert slice_error == "RuntimeError"  # not retryable: straight to the catch
    [finalizer] = stack.calls_of("FinalizerFunction", run_id)
    assert finalizer.event["error"]["Error"] == "RuntimeError"
    assert finalizer.result == {"runId": run_id, "status": "failed"}
    chunks = log_of(stack, run_id)
    assert types(chunks)[-2:] == ["error", "finish"]
    assert chunks[-2]["errorText"] == "The run failed because of an internal error."
    assert chunks[-1]["finishReason"] == "error"
    state = state_of(stack, run_id)
    assert state.status == "failed" and state.error == "The run failed because of an internal error."
    # The cause (with its "secret") reached neither the client nor the run's state.
    assert agents.SECRET not in json.dumps(chunks)
    assert agents.SECRET not in state.model_dump_json()


def test_a_run_of_another_agent_than_the_stacks_fails_with_a_message_that_says_so(stack: MotoStack) -> None:
    # A run recorded by the stack's agent before its Agent parameter changed: the slice function
    # (of the agent now) does not drive it, and the finalizer ends it saying why.
    runtime = runtime_of(stack)
    before = Runner(agents.build_agent(), runtime.store, runtime.log, agent_id="tests.deploy.agents:before")
    run_id = before.create_run([UserMessage(content=[TextPart(text="Check alpha and beta.")])]).run_id
    runtime.orchestrator.start(run_id)
    [execution] = stack.wait_for_executions(run_id)
    assert execution["status"] == "FAILED"
    [slice_error] = [s.error for s in stack.calls_of("SliceFunction", run_id) if s.error]
    assert slice_error == "OtherAgentError"
    state = state_of(stack, run_id)
    assert state.status == "failed" and state.error is not None and "Agent parameter has changed" in state.error
    assert types(log_of(stack, run_id)) == ["start", "error", "finish"]
    assert agents.CONTROL.executions == {} and not any(agents.CONTROL.model_calls)


@pytest.mark.stack_parameters(SlicesPerExecution="2")
def test_a_long_run_continues_as_new_with_the_same_run_id(stack: MotoStack) -> None:
    run_id = start_run(stack)
    executions = stack.wait_for_executions(run_id, count=2)
    inc = runtime_of(stack).store.incarnation(run_id)
    assert inc is not None
    first, second = f"{run_id}-{inc}", f"{run_id}-{inc}-c1"
    assert [(e["name"], e["status"]) for e in executions] == [(first, "SUCCEEDED"), (second, "SUCCEEDED")]
    # The names the orchestrator derives (to cancel every generation) are the ones the ASL makes.
    assert [e["name"] for e in executions] == [execution_name(run_id, 0, inc), execution_name(run_id, 1, inc)]
    continued = json.loads(executions[1]["input"])
    assert continued["runId"] == run_id and continued["generation"] == 1 and continued["sliceLimit"] == 4
    assert continued["base"] == first
    assert continued["AWS_STEP_FUNCTIONS_STARTED_BY_EXECUTION_ID"] == executions[0]["executionArn"]
    slices = stack.calls_of("SliceFunction", run_id)
    assert [(s.event["generation"], s.event["execution"]) for s in slices] == [
        (0, first),
        (0, first),
        (1, second),
    ]
    assert_complete_turn(log_of(stack, run_id))
    assert state_of(stack, run_id).slices == 3


async def test_a_cancelled_run_stops_and_its_log_ends_with_finish(stack: MotoStack) -> None:
    listen = lifecycle_listener(stack)
    with stack.function_env("ChatFunction"):
        app = load_chat_app()
    agents.CONTROL.gate = gate = threading.Event()
    run_id = start_run(stack)
    wait_until(agents.CONTROL.entered_gate.is_set, what="the second slice to start")
    # POST /api/runs/{runId}/cancel through the chat function (stops the execution, then ends the run).
    cancel = with_path(sample_event("chat-post.json"), f"/api/runs/{run_id}/cancel")
    cancel["body"] = ""
    response = await call(app, cancel)
    assert response.status == 200, response.body
    gate.set()  # the slice in flight goes on, and finds itself fenced off
    [in_flight] = [s for s in stack.calls_of("SliceFunction", run_id) if s.event["attempt"] == 0][1:2]
    wait_until(lambda: in_flight.done, what="the slice in flight to end")
    assert in_flight.result == {"runId": run_id, "status": "fenced", "slices": 0, "wait": None}
    [execution] = stack.wait_for_executions(run_id)
    assert execution["status"] == "ABORTED"
    assert len(stack.calls_of("SliceFunction", run_id)) == 2  # nothing ran after the cancel
    chunks = log_of(stack, run_id)
    assert types(chunks)[-1] == "finish" and chunks[-1]["finishReason"] == "other"
    assert types(chunks).count("finish") == 1
    assert state_of(stack, run_id).status == "cancelled"
    assert agents.CONTROL.executions == {"alpha": 1}  # beta's tool call never ran
    # on_abort ran once, in the chat function that ended the run, with the step that had finished;
    # the fenced slice did not call it again.
    assert agents.CONTROL.aborted == [[0]]
    # The chat function announced the cancel on the bus (the slice had announced the start).
    announced = [(e["detail-type"], e["detail"]["runId"], e["detail"]["status"]) for e in listen()]
    assert announced == [("Run Started", run_id, "ready_for_next_step"), ("Run Cancelled", run_id, "cancelled")]


async def test_ten_simultaneous_cancels_in_ten_chat_functions_all_answer_200_with_one_finish(stack: MotoStack) -> None:
    listen = lifecycle_listener(stack)
    with stack.function_env("ChatFunction"):
        apps = [load_chat_app() for _ in range(10)]  # ten instances of the function: nothing shared in-process
    agents.CONTROL.gate = gate = threading.Event()
    run_id = start_run(stack)
    wait_until(agents.CONTROL.entered_gate.is_set, what="the second slice to start")
    cancel = with_path(sample_event("chat-post.json"), f"/api/runs/{run_id}/cancel")
    cancel["body"] = ""
    answers = await asyncio.gather(*(call(app, cancel) for app in apps))
    gate.set()
    assert [(a.status, a.json()["status"]) for a in answers] == [(200, "cancelled")] * 10, [a.body for a in answers]
    [execution] = stack.wait_for_executions(run_id)
    assert execution["status"] == "ABORTED"
    chunks = log_of(stack, run_id)
    assert types(chunks).count("finish") == 1 and chunks[-1]["finishReason"] == "other"
    assert state_of(stack, run_id).status == "cancelled"
    assert [e["detail-type"] for e in listen()].count("Run Cancelled") == 1


SIGNING_KEY = "s3cr3t-signing-key-0123456789abcdef"


@pytest.mark.stack_parameters(Agent="tests.deploy.agents:build_approval_agent")
@pytest.mark.stack_secrets(ApprovalSecretArn=("approval-signing-key", SIGNING_KEY))
def test_a_run_that_needs_approval_pauses_with_a_request_signed_by_the_secret(stack: MotoStack) -> None:
    run_id = start_run(stack, "Remove gamma.")
    [execution] = stack.wait_for_executions(run_id)
    assert execution["status"] == "SUCCEEDED"
    assert json.loads(execution["output"])["result"]["status"] == "awaiting_tool_approval"
    assert state_of(stack, run_id).status == "awaiting_tool_approval"
    chunks = log_of(stack, run_id)
    [request] = [c for c in chunks if c["type"] == "tool-approval-request"]
    assert types(chunks)[-1] == "finish"
    # Signed with the key the slice read from Secrets Manager (TOOL_APPROVAL_SECRET_ARN).
    assert verify_tool_approval(
        SIGNING_KEY, request["signature"], request["approvalId"], "c9", "remove", {"name": "gamma"}
    )
    assert "s3cr3t" not in json.dumps(chunks)
    assert agents.CONTROL.executions == {}  # nothing runs before the user answers


@pytest.mark.stack_parameters(Agent="tests.deploy.agents:build_approval_agent")
async def test_cancelling_a_run_paused_for_approval_announces_run_cancelled(stack: MotoStack) -> None:
    listen = lifecycle_listener(stack)
    run_id = start_run(stack, "Remove gamma.")
    stack.wait_for_executions(run_id)
    with stack.function_env("ChatFunction"):
        app = load_chat_app()
    cancel = with_path(sample_event("chat-post.json"), f"/api/runs/{run_id}/cancel")
    cancel["body"] = ""
    response = await call(app, cancel)
    assert response.status == 200 and response.json()["status"] == "cancelled"
    kinds = [(e["detail-type"], e["detail"]["status"]) for e in listen()]
    assert kinds[-1] == ("Run Cancelled", "cancelled") and ("Run Awaiting Approval", "awaiting_tool_approval") in kinds
    again = await call(app, cancel)
    assert again.status == 200 and again.json()["status"] == "cancelled"  # idempotent; nothing announced again
    assert listen() == []
