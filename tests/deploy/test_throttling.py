"""A sustained Lambda throttle under the real state machine (issue 22): the run still ends.

The slice and the finalizer functions are throttled (Lambda answers ``Invoke`` with
``TooManyRequestsException``, the handler never runs) for good. The state machine retries each for
minutes on AWS; here the test shortens those two retriers (moto sleeps retries in real time; their
lengths are checked in test_template.py), and everything else runs as deployed: the finalizer's
catch leads to ``EndWithoutLambda``, which claims the run record and appends ``error`` and ``finish``
to the chunk log with the state machine's own DynamoDB calls (the optimized integration, and the
AWS SDK integration's Query), checked against the state machine's IAM policy.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from durable_harness.errors import FencedError
from durable_harness.runner.runner import Runner
from durable_harness.runner.state import ENDED_WITHOUT_LAMBDA

from . import agents
from .conftest import DEFAULT_OVERRIDES
from .helpers import log_of, runtime_of, start_run, state_of, types
from .stack import MotoStack

THROTTLED = "TooManyRequestsException"


def shorten_throttle_retries(definition: dict[str, Any]) -> None:
    """The throttle retriers of RunSlice and Finalize, two attempts a second apart."""
    for name in ("RunSlice", "Finalize"):
        for retrier in definition["States"][name]["Retry"]:
            if "Lambda.TooManyRequestsException" in retrier["ErrorEquals"]:
                retrier.update(IntervalSeconds=1, MaxAttempts=2, MaxDelaySeconds=1)


@pytest.fixture
def throttled(aws_environment: None) -> Iterator[MotoStack]:
    """The stack, with the throttle retriers shortened; IAM checked on a clean exit."""
    agents.reset()
    made = MotoStack(DEFAULT_OVERRIDES, definition_edit=shorten_throttle_retries)
    with made.deployed():
        yield made
        made.check_iam()


def entered(stack: MotoStack, execution: dict[str, Any]) -> list[str]:
    """The states the execution entered, in order."""
    return [
        e["stateEnteredEventDetails"]["name"]
        for e in stack.history(execution["executionArn"])
        if "stateEnteredEventDetails" in e
    ]


def head(stack: MotoStack, run_id: str) -> dict[str, Any]:
    ddb, table = stack.client("dynamodb"), runtime_of(stack).store.table_name
    item: dict[str, Any] = ddb.get_item(TableName=table, Key={"pk": {"S": run_id}, "sk": {"S": "run"}})["Item"]
    return item


def test_a_run_whose_slices_and_finalizer_stay_throttled_ends_failed_with_error_and_one_finish(
    throttled: MotoStack,
) -> None:
    stack = throttled
    # The first slice runs (one tool step, streamed); then Lambda throttles both functions for good.
    stack.invoke_faults["SliceFunction"] = ["", f"{THROTTLED}*"]
    stack.invoke_faults["FinalizerFunction"] = [f"{THROTTLED}*"]
    run_id = start_run(stack)
    [execution] = stack.wait_for_executions(run_id, timeout=60)
    assert execution["status"] == "FAILED" and execution["error"] == "RunFinalized", execution
    [first] = stack.calls_of("SliceFunction", run_id)
    assert first.result["status"] == "ready_for_next_step"
    assert not stack.calls_of("FinalizerFunction")  # it never ran
    assert {fn for fn, code in stack.refused if code == THROTTLED} == {"SliceFunction", "FinalizerFunction"}
    # RunSlice's catch, the finalizer's catch, then the Lambda-free end: the log's top is its index
    # and the first slice's last append, of one generation; error and finish go after that append.
    assert entered(stack, execution)[-10:] == [
        "RunSlice", "Finalize", "EndWithoutLambda", "FindLogEnd", "WhereLogEnds", "CompareGenerations",
        "SameGeneration", "EndAfterSecondItem", "AppendErrorAndFinish", "SliceFailed",
    ]  # fmt: skip

    # What a reader sees (the deployed chunk log's own reader): the first slice's chunks as they
    # were, then error and one finish, last.
    chunks = log_of(stack, run_id)
    assert types(chunks)[-2:] == ["error", "finish"] and types(chunks).count("finish") == 1
    assert chunks[-2] == {"type": "error", "errorText": ENDED_WITHOUT_LAMBDA}
    assert chunks[-1] == {"type": "finish", "finishReason": "error"}
    streamed = chunks[:-2]
    assert streamed and types(streamed)[0] == "start" and "error" not in types(streamed)
    # The run is failed for the store (its record) and for the runner (Runner.state_of).
    record = head(stack, run_id)
    assert record["status"]["S"] == "failed"
    state = state_of(stack, run_id)
    runtime = runtime_of(stack)
    runner = Runner(agents.build_agent(), runtime.store, runtime.log)
    assert runner.load(run_id).status == "failed" and runner.load(run_id).error == ENDED_WITHOUT_LAMBDA
    assert state.status != "failed"  # the state inside the record is as the slice left it
    # Ending it again (a cancel, a late finalizer) changes nothing: still one finish.
    assert asyncio.run(runner.finalize(run_id, status="cancelled")).status == "failed"
    assert log_of(stack, run_id) == chunks

    # Fenced like the finalizer: the first slice's epoch can append no more, nor checkpoint.
    old_epoch = int(record["epoch"]["N"]) - 1
    with pytest.raises(FencedError):
        runtime.log.append(run_id, len(chunks), ['{"type":"text-delta","id":"t","delta":"late"}'], old_epoch)
    assert log_of(stack, run_id) == chunks


def test_a_run_throttled_before_its_first_slice_ends_with_error_and_finish_only(throttled: MotoStack) -> None:
    stack = throttled
    stack.invoke_faults["SliceFunction"] = [f"{THROTTLED}*"]
    stack.invoke_faults["FinalizerFunction"] = [f"{THROTTLED}*"]
    run_id = start_run(stack)
    [execution] = stack.wait_for_executions(run_id, timeout=60)
    assert execution["status"] == "FAILED" and execution["error"] == "RunFinalized", execution
    assert not stack.calls_of("SliceFunction") and not stack.calls_of("FinalizerFunction")
    assert "EndEmptyGeneration" in entered(stack, execution)
    assert log_of(stack, run_id) == [
        {"type": "error", "errorText": ENDED_WITHOUT_LAMBDA},
        {"type": "finish", "finishReason": "error"},
    ]
    assert head(stack, run_id)["status"]["S"] == "failed"


def test_a_throttled_finalizer_that_comes_back_ends_the_run_itself(throttled: MotoStack) -> None:
    # A throttle that passes: the finalizer's retry runs it, and the Lambda-free path is not taken.
    stack = throttled
    stack.invoke_faults["SliceFunction"] = [f"{THROTTLED}*"]
    stack.invoke_faults["FinalizerFunction"] = [THROTTLED]
    run_id = start_run(stack)
    [execution] = stack.wait_for_executions(run_id, timeout=60)
    assert execution["status"] == "FAILED" and execution["error"] == "RunFinalized", execution
    [finalizer] = stack.calls_of("FinalizerFunction", run_id)
    assert finalizer.result == {"runId": run_id, "status": "failed"}
    assert "EndWithoutLambda" not in entered(stack, execution)
    chunks = log_of(stack, run_id)
    assert types(chunks)[-2:] == ["error", "finish"] and types(chunks).count("finish") == 1
    assert state_of(stack, run_id).status == "failed"


@pytest.mark.stack_parameters(SliceSeconds="600")  # the whole turn fits in the chat function's slice
async def test_await_chat_slice_retries_its_own_throttled_dynamodb_call(stack: MotoStack) -> None:
    from .chat import call, load_chat_app, sample_event

    # The task's UpdateItem (the task token onto the run record) is throttled twice, then goes
    # through: the state machine still waits for the chat function's slice, nothing is handed over.
    stack.api_faults[("RunStateMachine", "UpdateItem")] = ["ProvisionedThroughputExceededException"] * 2
    with stack.function_env("ChatFunction"):
        app = load_chat_app()
    response = await call(app, sample_event("chat-post.json"))
    run_id = response.headers["x-workflow-run-id"]
    assert response.chunks() == log_of(stack, run_id) and types(response.chunks())[-1] == "finish"
    [execution] = await asyncio.to_thread(stack.wait_for_executions, run_id)
    assert execution["status"] == "SUCCEEDED", execution
    failed = [e["taskFailedEventDetails"]["error"] for e in stack.history(execution["executionArn"])
              if e["type"] == "TaskFailed"]  # fmt: skip
    assert failed == ["DynamoDb.ProvisionedThroughputExceededException"] * 2
    assert stack.api_faults[("RunStateMachine", "UpdateItem")] == []
    assert stack.calls_of("SliceFunction", run_id) == []  # the chat function's slice was the run's
