"""EventPublisher (verified through a rule that targets an SQS queue in moto) and inbound events."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from durable_harness.aws import EventPublisher, parse_start_run_event, run_id_for_event, start_run_pattern
from durable_harness.aws.events import (
    MAX_DETAIL_BYTES,
    SCHEDULE_SOURCE,
    START_RUN_DETAIL_TYPE,
    START_RUN_SOURCE,
    kind_for_status,
)
from durable_harness.errors import InvalidRequestError, StorageError
from durable_harness.ids import is_run_id, new_run_id
from durable_harness.runner.state import FinalResult, RunState

from tests.aws.conftest import REGION

BUS = "harness-bus"


@pytest.fixture
def events(aws: None) -> Any:
    client = boto3.client("events", region_name=REGION)
    client.create_event_bus(Name=BUS)
    return client


@pytest.fixture
def queue(events: Any) -> str:
    """A queue receiving every event from source durable-harness on the bus."""
    sqs = boto3.client("sqs", region_name=REGION)
    url: str = sqs.create_queue(QueueName="lifecycle")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(Name="lifecycle", EventBusName=BUS, EventPattern=json.dumps({"source": ["durable-harness"]}))
    events.put_targets(Rule="lifecycle", EventBusName=BUS, Targets=[{"Id": "queue", "Arn": arn}])
    return url


def received(url: str) -> list[dict[str, Any]]:
    sqs = boto3.client("sqs", region_name=REGION)
    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
    return [json.loads(m["Body"]) for m in messages]


def finished_state() -> RunState:
    return RunState(
        run_id="wrun_0123456789abcdefghjkmnpqrs",
        session_id="s",
        chat_id="chat-1",
        origin="event",
        status="finished",
        message_id="msg_1",
        input_messages=[],
        final_result=FinalResult(finish_reason="stop", output="the secret answer"),
    )


def test_lifecycle_events_carry_ids_and_outcome_but_no_content(events: Any, queue: str) -> None:
    state = finished_state()
    EventPublisher(BUS, client=events).publish(state, "Run Finished")
    [event] = received(queue)
    assert event["source"] == "durable-harness" and event["detail-type"] == "Run Finished"
    assert event["detail"] == {
        "runId": state.run_id,
        "chatId": "chat-1",
        "status": "finished",
        "origin": "event",
        "finishReason": "stop",
        "error": None,
    }
    assert "secret" not in json.dumps(event)


def entry_size(event: dict[str, Any]) -> int:
    """An entry's size as EventBridge counts it against its 256 KB limit (Time counts 14 bytes)."""
    parts = (event["source"], event["detail-type"], json.dumps(event["detail"], separators=(",", ":")))
    return sum(len(p.encode()) for p in parts) + 14 + sum(len(r.encode()) for r in event.get("resources", []))


def test_run_finished_carries_a_summary_of_the_result(events: Any, queue: str) -> None:
    state = finished_state().model_copy(update={"final_result": FinalResult(finish_reason="stop")})
    result = {"text": "Two items are in stock.", "output": {"count": 2},
              "totalUsage": {"inputTokens": 30, "outputTokens": 9, "totalTokens": 39}}  # fmt: skip
    EventPublisher(BUS, client=events).publish(state, "Run Finished", result)
    [event] = received(queue)
    assert event["detail"]["result"] == {
        "text": "Two items are in stock.", "output": {"count": 2}, "usage": result["totalUsage"],
    }  # fmt: skip
    assert event["detail"]["runId"] == state.run_id


def test_the_summary_of_a_long_answer_stays_under_the_limit(events: Any, queue: str) -> None:
    # Characters whose JSON escaping costs the most bytes: quotes, newlines, non-ASCII, emoji.
    text = ('He said "ok".\nÜber 🚀 — ' * 40_000)[:1_000_000]
    result = {"text": text, "output": {"rows": ["x" * 1000] * 200},
              "totalUsage": {"inputTokens": 10, "outputTokens": 250_000, "totalTokens": 250_010}}  # fmt: skip
    EventPublisher(BUS, client=events).publish(finished_state(), "Run Finished", result)
    [event] = received(queue)
    summary = event["detail"]["result"]
    assert len(json.dumps(event["detail"], separators=(",", ":")).encode()) <= MAX_DETAIL_BYTES
    assert entry_size(event) < 256 * 1024
    assert summary["textTruncated"] is True and text.startswith(summary["text"])
    assert len(summary["text"]) > 5_000  # as much of the text as fits, not a token stub
    assert summary["outputTruncated"] is True and "output" not in summary  # too big to keep whole
    assert summary["usage"]["outputTokens"] == 250_000


def test_failed_runs_report_a_bounded_error(events: Any, queue: str) -> None:
    state = finished_state().model_copy(update={"status": "failed", "final_result": None, "error": "x" * 5000})
    EventPublisher(BUS, client=events).publish(state, kind_for_status("failed") or "")
    [event] = received(queue)
    assert event["detail-type"] == "Run Failed" and len(event["detail"]["error"]) == 1000


def test_rejected_entries_raise_storage_error(events: Any) -> None:
    # PutEvents answers 200 with FailedEntryCount when it rejects an entry (here: no Source).
    with pytest.raises(StorageError, match="InvalidArgument"):
        EventPublisher(BUS, client=events, source="").publish(finished_state(), "Run Finished")


def test_unknown_kinds_are_refused(events: Any) -> None:
    with pytest.raises(ValueError):
        EventPublisher(BUS, client=events).publish(finished_state(), "Run Exploded")
    assert kind_for_status("ready_for_next_step") is None
    assert kind_for_status("awaiting_tool_approval") == "Run Awaiting Approval"


def start_event(event_id: str = "6a7e8feb-b491-4cf7-a9f1-bf3703467718", **detail: Any) -> dict[str, Any]:
    return {
        "version": "0",
        "id": event_id,
        "source": START_RUN_SOURCE,
        "detail-type": START_RUN_DETAIL_TYPE,
        "detail": detail or {"prompt": "Summarize today's tickets"},
    }


def test_run_ids_for_events_are_deterministic_and_valid() -> None:
    first, again = run_id_for_event(start_event()), run_id_for_event(start_event())
    assert first == again and is_run_id(first)
    assert run_id_for_event(start_event("another-id")) != first
    given = new_run_id()
    assert run_id_for_event(start_event(runId=given, prompt="hi")) == given
    assert run_id_for_event(start_event(runId="not-a-run-id", prompt="hi")) == first  # ignored
    with pytest.raises(InvalidRequestError):
        run_id_for_event({"detail": {}})


def test_scheduled_events_are_keyed_by_schedule_and_scheduled_time_not_by_attempt() -> None:
    def scheduled(execution_id: str, at: str, schedule: str = "arn:aws:scheduler:us-east-1:1:schedule/s") -> Any:
        return {"id": execution_id, "source": SCHEDULE_SOURCE, "time": at, "resources": [schedule],
                "detail-type": START_RUN_DETAIL_TYPE, "detail": {"prompt": "hi"}}  # fmt: skip

    first = run_id_for_event(scheduled("attempt-1", "2026-11-29T08:00:00Z"))
    assert is_run_id(first)
    assert run_id_for_event(scheduled("attempt-2", "2026-11-29T08:00:00Z")) == first  # a retry
    assert run_id_for_event(scheduled("attempt-1", "2026-11-30T08:00:00Z")) != first  # the next time
    assert run_id_for_event(scheduled("attempt-1", "2026-11-29T08:00:00Z", "arn:other")) != first
    # A client event with the same id is another run (the id is not what keys scheduled runs).
    assert run_id_for_event({"id": "attempt-1", "source": START_RUN_SOURCE, "detail": {}}) != first
    for broken in ({"resources": []}, {"time": None}, {"resources": "arn"}):
        with pytest.raises(InvalidRequestError, match="scheduled time"):
            run_id_for_event(scheduled("attempt-1", "2026-11-29T08:00:00Z") | broken)


def test_start_run_events_are_parsed_and_validated() -> None:
    request = parse_start_run_event(start_event(prompt="Hello there", chatId="ops"))
    assert (request.run_id, request.chat_id) == (run_id_for_event(start_event()), "ops")
    [message] = request.messages
    assert message.role == "user" and message.parts[0].text == "Hello there"  # type: ignore[union-attr]
    ui = [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": "from messages"}]}]
    assert parse_start_run_event(start_event(messages=ui)).messages[0].id == "m1"
    assert parse_start_run_event(start_event(prompt="hi", callOptions={"locale": "fr"})).call_options == {
        "locale": "fr"
    }
    for bad in ({"prompt": ""}, {"prompt": "a", "messages": ui}, {"messages": [{"role": "user"}]}, {"chatId": 5},
                {"prompt": "a", "callOptions": "fr"}):  # fmt: skip
        with pytest.raises(InvalidRequestError):
            parse_start_run_event(start_event(**bad))
    with pytest.raises(InvalidRequestError):
        parse_start_run_event({**start_event(), "source": "someone.else"})
    assert start_run_pattern() == {"source": [START_RUN_SOURCE], "detail-type": [START_RUN_DETAIL_TYPE, "Run Event"]}
