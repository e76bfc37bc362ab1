"""Event-triggered runs (decision D9): the trigger function, its rule, and following the run by chat."""

from __future__ import annotations

import json
from typing import Any

import pytest
from durable_harness.aws.events import run_id_for_event, start_run_pattern
from durable_harness.ids import new_run_id
from moto.events.models import EventPattern

from . import agents
from .chat import call, load_chat_app, sample_event, with_path
from .helpers import lifecycle_listener, log_of, state_of, types
from .stack import MotoStack


def test_the_rule_matches_the_sample_event_and_not_the_runs_own_events(stack: MotoStack) -> None:
    # moto implements neither TestEventPattern nor Lambda targets: match with its own matcher.
    assert stack.rule_pattern == start_run_pattern()
    pattern = EventPattern.load(json.dumps(stack.rule_pattern))
    assert pattern.matches_event(sample_event("start-run.json"))
    lifecycle = {"source": "durable-harness", "detail-type": "Run Finished", "detail": {}}
    assert not pattern.matches_event(lifecycle)  # a run's own events never start runs


async def test_an_event_delivered_twice_starts_one_run_that_a_chat_client_follows(stack: MotoStack) -> None:
    with stack.function_env("ChatFunction"):
        app = load_chat_app()
    event = sample_event("start-run.json")
    run_id = run_id_for_event(event)
    # EventBridge delivers at least once: the same event (same id) arrives twice.
    assert stack.invoke("TriggerFunction", event) == {"runId": run_id}
    assert stack.invoke("TriggerFunction", event) == {"runId": run_id}
    [execution] = stack.wait_for_executions(run_id)
    assert execution["status"] == "SUCCEEDED"
    assert len(stack.executions()) == 1
    # A late redelivery after the run ended starts nothing either.
    assert stack.invoke("TriggerFunction", event) == {"runId": run_id}
    assert len(stack.executions()) == 1

    state = state_of(stack, run_id)
    assert (state.status, state.origin, state.chat_id, state.principal) == ("finished", "event", "ops-daily", None)
    assert state.input_messages == [] and state.turn is not None
    first = state.turn["messages"][0]
    assert first["role"] == "user" and first["content"][0]["text"] == event["detail"]["prompt"]

    # Followed with the chat API, by run id (the sample GET, with this run's id).
    log = log_of(stack, run_id)
    get = with_path(sample_event("chat-get.json"), f"/api/chat/{run_id}/stream", "startIndex=0")
    response = await call(app, get)
    assert response.status == 200, response.body
    assert response.chunks() == log and types(log)[-1] == "finish"
    assert int(response.headers["x-workflow-stream-tail-index"]) == len(log) - 1
    tail = await call(app, with_path(get, get["rawPath"], "startIndex=-2"))
    assert tail.chunks() == log[-2:]


def test_runs_announce_their_lifecycle_on_the_bus(stack: MotoStack) -> None:
    listen = lifecycle_listener(stack)
    event = sample_event("start-run.json")
    run_id = stack.invoke("TriggerFunction", event)["runId"]
    stack.wait_for_executions(run_id)
    received = listen()
    assert [(e["detail-type"], e["detail"]["runId"]) for e in received] == [
        ("Run Started", run_id),
        ("Run Finished", run_id),
    ]
    finished = received[-1]["detail"]
    assert (finished["status"], finished["origin"], finished["chatId"]) == ("finished", "event", "ops-daily")
    # The answer itself, so that a consumer needs no second call; the usage of the whole run.
    assert finished["result"]["text"] == agents.ANSWER
    usage = finished["result"]["usage"]
    assert usage["inputTokens"] == 30 and usage["totalTokens"] == usage["inputTokens"] + usage["outputTokens"]


def test_an_event_passes_call_options_validated_by_the_agent(stack: MotoStack) -> None:
    event = sample_event("start-run.json")
    event["detail"] = {**event["detail"], "callOptions": {"tone": "brief"}}
    run_id = stack.invoke("TriggerFunction", event)["runId"]
    stack.wait_for_executions(run_id)
    assert state_of(stack, run_id).call_options == {"tone": "brief"}
    assert agents.CONTROL.call_options[-1] == agents.Options(tone="brief")
    bad = sample_event("start-run.json") | {"id": "another-event"}
    bad["detail"] = {**bad["detail"], "callOptions": {"tone": "shouty"}}
    result = stack.invoke("TriggerFunction", bad)
    assert "'tone'" in result["error"]
    assert [json.loads(e["input"])["runId"] for e in stack.executions()] == [run_id]  # the bad event started nothing


def test_a_malformed_event_is_rejected_without_a_run(stack: MotoStack) -> None:
    event = sample_event("start-run.json") | {"detail": {"chatId": "ops"}}  # neither prompt nor messages
    result = stack.invoke("TriggerFunction", event)
    assert "prompt" in result["error"]
    assert stack.executions() == []


def scheduled_event(stack: MotoStack, execution_id: str, scheduled_time: str) -> dict[str, Any]:
    """What EventBridge Scheduler sends the trigger: the template's input, its placeholders filled in."""
    schedule = stack.template["Resources"]["StartRunSchedule"]
    assert stack.resolver.exists("StartRunSchedule")
    text = stack.resolver.resolve(schedule["Properties"]["Target"]["Input"])
    text = text.replace("<aws.scheduler.execution-id>", execution_id)
    text = text.replace("<aws.scheduler.scheduled-time>", scheduled_time)
    text = text.replace("<aws.scheduler.schedule-arn>", "arn:aws:scheduler:us-east-1:123456789012:schedule/x")
    event: dict[str, Any] = json.loads(text)
    return event


@pytest.mark.stack_parameters(ScheduleExpression="rate(1 day)", SchedulePrompt="Summarize the day")
def test_a_scheduled_invocation_starts_a_run(stack: MotoStack) -> None:
    event = scheduled_event(stack, "5b1d3c54-0d6e-4a4c-8f0a-1b2c3d4e5f60", "2026-11-29T08:00:00Z")
    run_id = stack.invoke("TriggerFunction", event)["runId"]
    assert run_id == run_id_for_event(event)
    [execution] = stack.wait_for_executions(run_id)
    assert execution["status"] == "SUCCEEDED"
    assert state_of(stack, run_id).turn["messages"][0]["content"][0]["text"] == "Summarize the day"  # type: ignore[index]


@pytest.mark.stack_parameters(ScheduleExpression="rate(1 day)", SchedulePrompt="Summarize the day")
def test_two_deliveries_of_one_scheduled_time_start_one_run(stack: MotoStack) -> None:
    # Scheduler retries an invocation with a new execution id each attempt (its docs: "a unique ID
    # ... for each attempted invocation"); the scheduled time and the schedule stay the same.
    first = scheduled_event(stack, "d32c5kddcf5bb8c3", "2026-11-29T08:00:00Z")
    retry = scheduled_event(stack, "a91f0c2e7d4b6e10", "2026-11-29T08:00:00Z")
    run_id = stack.invoke("TriggerFunction", first)["runId"]
    assert stack.invoke("TriggerFunction", retry) == {"runId": run_id}
    [execution] = stack.wait_for_executions(run_id)
    assert execution["status"] == "SUCCEEDED"
    assert stack.invoke("TriggerFunction", retry) == {"runId": run_id}  # a late retry, after the run ended
    assert len(stack.executions()) == 1 and len(stack.calls_of("SliceFunction", run_id)) == 3
    # The next day's invocation is another run.
    next_day = stack.invoke("TriggerFunction", scheduled_event(stack, "0e44b2c1f9aa7d35", "2026-11-30T08:00:00Z"))
    assert next_day["runId"] != run_id
    stack.wait_for_executions(next_day["runId"])
    assert len(stack.executions()) == 2


def put_start_run(stack: MotoStack, run_id: str) -> None:
    """Put a "Start Run" event on the stack's bus, as a client would."""
    detail = {"prompt": "Check alpha and beta.", "runId": run_id}
    entry = {"Source": "durable-harness.client", "DetailType": "Start Run", "Detail": json.dumps(detail)}
    response = stack.client("events").put_events(Entries=[{**entry, "EventBusName": "default"}])
    assert response["FailedEntryCount"] == 0


def test_a_start_run_event_that_cannot_be_delivered_lands_in_the_dead_letter_queue(stack: MotoStack) -> None:
    # Simulated (tests/deploy/eventbridge.py): EventBridge's side of delivering to the trigger
    # function, which moto does not do: an asynchronous Invoke, retried per the target's retry
    # policy, and the event sent to the target's dead-letter queue when that fails. Real: the bus,
    # the rule, the retry policy and queue as the template sets them, moto's Lambda and SQS.
    sqs, cloudwatch = stack.client("sqs"), stack.client("cloudwatch")
    queue = stack.dead_letter_queue_url
    assert stack.resolver.resolve({"Ref": "StartRunDeadLetterQueue"}) == queue  # the queue of the Outputs
    attributes = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["All"])["Attributes"]
    assert attributes["SqsManagedSseEnabled"] == "true"  # encrypted at rest

    # Delivered on the third attempt (Lambda throttled the first two Invoke calls): one run.
    stack.async_invoke_faults["TriggerFunction"] = ["TooManyRequestsException"] * 2
    delivered = new_run_id()
    put_start_run(stack, delivered)
    [execution] = stack.wait_for_executions(delivered)
    assert execution["status"] == "SUCCEEDED"
    assert stack.lambda_targets.deliveries[-1].attempts == 3

    # Throttled past the retry policy (4 retries): the event goes to the dead-letter queue.
    stack.async_invoke_faults["TriggerFunction"] = ["TooManyRequestsException"] * 5
    throttled = new_run_id()
    put_start_run(stack, throttled)
    # The trigger function is gone (say, a failed deployment): no retry, straight to the queue.
    stack.client("lambda").delete_function(FunctionName=stack.functions["TriggerFunction"].name)
    missing = new_run_id()
    put_start_run(stack, missing)

    letters = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, MessageAttributeNames=["All"])["Messages"]
    by_run = {json.loads(m["Body"])["detail"]["runId"]: m for m in letters}
    assert set(by_run) == {throttled, missing}  # nothing lost, nothing delivered twice
    for run_id, code, retries in ((throttled, "THROTTLING", "4"), (missing, "RESOURCE_NOT_FOUND", "0")):
        body = json.loads(by_run[run_id]["Body"])
        assert (body["source"], body["detail-type"]) == ("durable-harness.client", "Start Run")  # the event itself
        found = {k: v["StringValue"] for k, v in by_run[run_id]["MessageAttributes"].items()}
        assert found["RULE_ARN"] == stack.rule_arn
        assert found["TARGET_ARN"] == stack.functions["TriggerFunction"].arn
        assert (found["ERROR_CODE"], found["RETRY_ATTEMPTS"]) == (code, retries)
    assert [e["name"] for e in stack.executions()] == [execution["name"]]  # the undelivered events started no run

    # The alarm watches exactly this queue's depth, and goes off at one message.
    [alarm] = cloudwatch.describe_alarms(AlarmNames=[stack.resolver.physical["StartRunDeadLetterAlarm"]])[
        "MetricAlarms"
    ]
    assert (alarm["Namespace"], alarm["MetricName"]) == ("AWS/SQS", "ApproximateNumberOfMessagesVisible")
    assert alarm["Dimensions"] == [{"Name": "QueueName", "Value": queue.rsplit("/", 1)[-1]}]
    assert (alarm["ComparisonOperator"], alarm["Threshold"]) == ("GreaterThanThreshold", 0.0)
