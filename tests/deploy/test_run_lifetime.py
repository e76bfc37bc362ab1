"""How long a run lives, and what happens after: its chunk log (items and sealed segments)
outlives its record, and a run id used again after the record expired is a new run with a new
execution (the real state machine,
the real handlers, moto; see stack.py)."""

from __future__ import annotations

import copy
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from durable_harness.ids import new_run_id

from . import agents
from .chat import sample_event
from .helpers import log_of, runtime_of, state_of, types
from .stack import MotoStack
from .test_state_machine import assert_complete_turn

DAY = 86400


def start_run_event(run_id: str, event_id: str, chat_id: str) -> dict[str, Any]:
    """A "Start Run" event naming its run id (as a client that keys runs itself would send)."""
    event = copy.deepcopy(sample_event("start-run.json"))
    event["id"] = event_id
    event["detail"] = {"prompt": "Check alpha and beta.", "runId": run_id, "chatId": chat_id}
    return event


def run_items(stack: MotoStack, run_id: str) -> dict[str, dict[str, Any]]:
    """The run's items in the runs table by sort key: the record ("run") and its log ("c#...")."""
    ddb = stack.client("dynamodb")
    table = runtime_of(stack).store.table_name
    found = ddb.query(
        TableName=table, KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": run_id}}
    )["Items"]
    return {item["sk"]["S"]: item for item in found}


def segment_keys(stack: MotoStack, run_id: str) -> list[str]:
    """Every sealed chunk-log segment of the run id in the bucket (all incarnations)."""
    bucket = stack.functions["ChatFunction"].env["CHUNK_BUCKET"]
    listed = stack.client("s3").list_objects_v2(Bucket=bucket, Prefix=f"runs/{run_id}/")
    return [o["Key"] for o in listed.get("Contents", []) if "/seg/" in o["Key"]]


@pytest.mark.parametrize("ttl", ["expired-not-yet-deleted", "deleted-by-ttl"])
def test_a_run_id_used_again_after_its_record_expired_is_a_new_run_with_its_own_execution(
    stack: MotoStack, ttl: str
) -> None:
    run_id = new_run_id()
    assert stack.invoke("TriggerFunction", start_run_event(run_id, "event-1", "first")) == {"runId": run_id}
    [first] = stack.wait_for_executions(run_id)
    assert first["status"] == "SUCCEEDED"
    first_log = log_of(stack, run_id)
    old_segments = segment_keys(stack, run_id)
    assert len(old_segments) == 1  # the finish sealed the whole log
    old_items = {k for k in run_items(stack, run_id) if k.startswith("c#")}

    # RunTtlDays later. Simulated: DynamoDB's TTL expiry of the run's record is set to the past
    # (DynamoDB deletes expired items lazily, up to days later: it may still be read), or the
    # record is deleted as TTL finally does. Its log stays: its items and segments live longer
    # (see below), and the new run must not see them.
    ddb, table = stack.client("dynamodb"), runtime_of(stack).store.table_name
    key = {"pk": {"S": run_id}, "sk": {"S": "run"}}
    if ttl == "deleted-by-ttl":
        ddb.delete_item(TableName=table, Key=key)
    else:
        past = {":x": {"N": str(int(time.time()) - 1)}}
        ddb.update_item(TableName=table, Key=key, UpdateExpression="SET expires_at = :x",
                        ExpressionAttributeValues=past)  # fmt: skip
    assert segment_keys(stack, run_id) == old_segments

    # The same run id again, from another event: a new run, driven by a new execution (Step
    # Functions keeps the first execution's name taken for 90 days).
    assert stack.invoke("TriggerFunction", start_run_event(run_id, "event-2", "second")) == {"runId": run_id}
    executions = stack.wait_for_executions(run_id, count=2)
    assert [e["status"] for e in executions] == ["SUCCEEDED", "SUCCEEDED"]
    assert executions[0]["name"] == first["name"] != executions[1]["name"]
    state = state_of(stack, run_id)
    assert (state.status, state.chat_id, state.slices) == ("finished", "second", 3)
    # Its log is its own: one whole turn, nothing of the first run's (whose log was just as long).
    second_log = log_of(stack, run_id)
    assert_complete_turn(second_log)
    assert "reset-step" not in types(second_log) and len(second_log) == len(first_log)
    new_segments = [k for k in segment_keys(stack, run_id) if k not in old_segments]
    assert new_segments and all(k.split("/")[2] != old_segments[0].split("/")[2] for k in new_segments)
    new_items = {k for k in run_items(stack, run_id) if k.startswith("c#")} - old_items
    assert new_items and min(new_items) > max(old_items)  # the new incarnation's keys sort above
    assert agents.CONTROL.executions == {"alpha": 2, "beta": 2}  # each run ran its tools once
    # A redelivery of the second event starts nothing more.
    assert stack.invoke("TriggerFunction", start_run_event(run_id, "event-2", "second")) == {"runId": run_id}
    assert len(stack.wait_for_executions(run_id, count=2)) == 2


def test_every_segment_and_state_object_of_a_run_expires_after_its_record(stack: MotoStack) -> None:
    """The rule: a record expires at most ChunkRetentionDays after its creation (its TTL, pushed
    out by every write, is capped there); S3's lifecycle rule keeps every object that long after
    the object was written, and every object of a run is written after its record was created."""
    run_id = new_run_id()
    stack.invoke("TriggerFunction", start_run_event(run_id, "event-1", "ops"))
    stack.wait_for_executions(run_id)
    bucket = stack.functions["ChatFunction"].env["CHUNK_BUCKET"]
    s3 = stack.client("s3")
    [rule] = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    days = rule["Expiration"]["Days"]
    items = run_items(stack, run_id)
    record_expiry = int(items["run"]["expires_at"]["N"])
    created = int(datetime.fromisoformat(items["run"]["created_at"]["S"]).timestamp())
    assert record_expiry <= created + days * DAY
    objects = s3.list_objects_v2(Bucket=bucket, Prefix=f"runs/{run_id}/")["Contents"]
    assert objects
    for obj in objects:
        # S3 expires an object `days` after it was written, rounded up to the next midnight UTC.
        written = obj["LastModified"].astimezone(UTC).timestamp()
        assert written >= created - 1  # (second resolution of created_at's parse vs LastModified)
        assert written + days * DAY >= record_expiry, obj["Key"]
    # So does every item of its chunk log in the table.
    log_items = [item for key, item in items.items() if key.startswith("c#")]
    assert log_items
    for item in log_items:
        assert int(item["expires_at"]["N"]) >= record_expiry, item["sk"]
