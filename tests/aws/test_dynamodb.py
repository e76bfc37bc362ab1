"""DynamoCheckpointStore beyond the shared contract: offloading, TTL, idempotent create, errors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from durable_harness.aws import AwsRequestError, DynamoCheckpointStore
from durable_harness.errors import FencedError, RetryableError, RunExistsError, RunNotFoundError, StorageError
from durable_harness.ports import Checkpoint

from tests.aws.conftest import BUCKET, TABLE, Fault, RequestCounter

DAY = 86400


def record(run_id: str = "run-1", state: str = '{"step":0}', **fields: Any) -> Checkpoint:
    return Checkpoint(run_id=run_id, state=state, status=fields.pop("status", "not_started"), **fields)


def item(ddb: Any, run_id: str = "run-1") -> dict[str, Any]:
    found: dict[str, Any] = ddb.get_item(TableName=TABLE, Key={"pk": {"S": run_id}, "sk": {"S": "run"}})["Item"]
    return found


def state_objects(s3: Any, run_id: str = "run-1") -> list[str]:
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=f"runs/{run_id}/state/").get("Contents", [])
    return [obj["Key"] for obj in listed]


def big_state(tag: str, size: int = 5_000) -> str:
    return json.dumps({"tag": tag, "history": "x" * size})


class Clock:
    """A settable clock (epoch seconds) for TTL tests."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_the_record_layout(store: DynamoCheckpointStore, ddb: Any) -> None:
    store.create(record(principal="alice", chat_id="chat-1", meta={"origin": "event"}))
    stored = item(ddb)
    assert stored["sk"] == {"S": "run"}
    assert stored["state"] == {"S": '{"step":0}'}
    assert (stored["status"], stored["principal"], stored["chat_id"]) == (
        {"S": "not_started"},
        {"S": "alice"},
        {"S": "chat-1"},
    )
    assert stored["meta"] == {"M": {"origin": {"S": "event"}}}
    assert "state_key" not in stored and int(stored["expires_at"]["N"]) > 0
    store.save(record(principal=None, chat_id=None), 1)
    assert "principal" not in item(ddb) and "chat_id" not in item(ddb)


def test_large_states_round_trip_through_s3(ddb: Any, s3: Any) -> None:
    store = DynamoCheckpointStore(TABLE, client=ddb, s3_client=s3, bucket=BUCKET, offload_bytes=1_000)
    created = store.create(record(state=big_state("v1")))
    first_key = item(ddb)["state_key"]["S"]
    assert "state" not in item(ddb) and first_key.startswith("runs/run-1/state/0000000001-")
    assert created.state == big_state("v1")
    cold = DynamoCheckpointStore(TABLE, client=ddb, s3_client=s3, bucket=BUCKET, offload_bytes=1_000)
    assert cold.load("run-1") == created

    claimed = cold.claim("run-1", 1)
    assert claimed.state == big_state("v1") and (claimed.version, claimed.epoch) == (2, 1)
    saved = cold.save(record(state=big_state("v3")), 2)
    assert store.load("run-1") == saved
    assert state_objects(s3) == [item(ddb)["state_key"]["S"]]  # the superseded object is gone

    # A stale writer's object is removed when its conditional write fails.
    with pytest.raises(FencedError):
        store.save(record(state=big_state("stale")), 2)
    assert state_objects(s3) == [item(ddb)["state_key"]["S"]]
    assert cold.load("run-1").state == big_state("v3")

    # Back under the limit: the state returns to the item and the object is deleted.
    small = cold.save(record(state='{"small":true}'), 3)
    assert item(ddb)["state"] == {"S": '{"small":true}'} and "state_key" not in item(ddb)
    assert state_objects(s3) == []
    assert store.load("run-1") == small


def test_a_summary_never_reads_the_state_even_when_it_is_offloaded(ddb: Any, s3: Any) -> None:
    store = DynamoCheckpointStore(TABLE, client=ddb, s3_client=s3, bucket=BUCKET, offload_bytes=1_000)
    store.create(record(state=big_state("v1"), principal="alice", chat_id="c1"))
    cold = DynamoCheckpointStore(TABLE, client=ddb, s3_client=s3, bucket=BUCKET, offload_bytes=1_000)
    counter = RequestCounter(ddb, s3)
    summary = cold.summary("run-1")
    assert (summary.status, summary.principal, summary.chat_id) == ("not_started", "alice", "c1")
    assert "GetObject" not in counter.counts
    with pytest.raises(RunNotFoundError):
        cold.summary("run-2")


def test_a_state_over_the_limit_without_a_bucket_fails_before_writing(ddb: Any) -> None:
    store = DynamoCheckpointStore(TABLE, client=ddb, offload_bytes=100)
    with pytest.raises(StorageError):
        store.create(record(state=big_state("x", 200)))
    with pytest.raises(RunNotFoundError):
        store.load("run-1")


def test_a_record_past_its_ttl_is_missing_and_can_be_created_again(ddb: Any, s3: Any) -> None:
    clock = Clock()
    store = DynamoCheckpointStore(TABLE, client=ddb, ttl_seconds=30 * DAY, clock=clock)
    store.create(record())
    store.claim("run-1", 1)
    clock.now += 29 * DAY
    assert store.load("run-1").version == 2
    store.save(record(state='{"step":1}'), 2)  # every write pushes expiry out again
    clock.now += 29 * DAY
    assert store.load("run-1").state == '{"step":1}'
    clock.now += 2 * DAY
    # DynamoDB deletes expired items lazily: the item is still there, but it is treated as gone.
    assert item(ddb)["version"] == {"N": "3"}
    with pytest.raises(RunNotFoundError):
        store.load("run-1")
    with pytest.raises(RunNotFoundError):
        store.summary("run-1")
    with pytest.raises(RunNotFoundError):
        store.claim("run-1", 3)
    with pytest.raises(RunNotFoundError):
        store.save(record(), 3)
    again = store.create(record(state='{"new":true}'))
    assert (again.version, again.epoch, store.load("run-1").state) == (1, 0, '{"new":true}')


def test_create_if_absent_returns_the_existing_record(store: DynamoCheckpointStore) -> None:
    made, created = store.create_if_absent(record(state='{"first":true}', chat_id="c"))
    assert created and made.version == 1
    store.claim("run-1", 1)
    existing, created = store.create_if_absent(record(state='{"second":true}'))
    assert not created
    assert (existing.state, existing.version, existing.epoch, existing.chat_id) == ('{"first":true}', 2, 1, "c")
    with pytest.raises(RunExistsError):
        store.create(record())


def test_a_fresh_store_without_cached_records_writes_the_same(ddb: Any, s3: Any) -> None:
    # The first store caches what it wrote; the others must take the uncached paths.
    DynamoCheckpointStore(TABLE, client=ddb).create(record(meta={"a": "1"}))
    claimed = DynamoCheckpointStore(TABLE, client=ddb).claim("run-1", 1)
    assert (claimed.version, claimed.epoch, claimed.meta) == (2, 1, {"a": "1"})
    saved = DynamoCheckpointStore(TABLE, client=ddb).save(record(state='{"s":2}', epoch=7), 2)
    assert (saved.version, saved.epoch, saved.state) == (3, 1, '{"s":2}')


def test_cached_writes_do_not_ship_the_state_back(store: DynamoCheckpointStore, ddb: Any) -> None:
    store.create(record(state=big_state("inline", 50_000)))
    counter = RequestCounter(ddb)
    responses: list[dict[str, Any]] = []
    ddb.meta.events.register("after-call.dynamodb.UpdateItem", lambda parsed, **_: responses.append(parsed))
    store.claim("run-1", 1)
    store.save(record(state=big_state("inline", 50_000)), 2)
    # The record this store wrote is not read again, and no write returns the 50 KB state.
    assert not {"GetItem", "Query", "GetObject"} & set(counter.counts), counter.counts
    assert responses and all("state" not in r.get("Attributes", {}) for r in responses)


def test_throttling_becomes_storage_error_after_the_clients_retries(store: DynamoCheckpointStore, ddb: Any) -> None:
    store.create(record())
    fault = Fault.dynamodb(ddb, "GetItem", "ProvisionedThroughputExceededException")
    with pytest.raises(StorageError) as info:
        store.load("run-1")
    assert isinstance(info.value, RetryableError)
    assert fault.attempts == 3  # total_max_attempts of the client: it retried before giving up
    fault.armed = False
    assert store.load("run-1").version == 1


def test_a_5xx_on_a_conditional_write_is_retryable_and_writes_nothing(store: DynamoCheckpointStore, ddb: Any) -> None:
    store.create(record())
    fault = Fault.dynamodb(ddb, "UpdateItem", "InternalServerError", 500)
    with pytest.raises(StorageError):
        store.claim("run-1", 1)
    fault.armed = False
    assert store.load("run-1").version == 1
    assert store.claim("run-1", 1).epoch == 1


def test_configuration_errors_are_fatal(ddb: Any) -> None:
    store = DynamoCheckpointStore("no-such-table", client=ddb)
    with pytest.raises(AwsRequestError) as info:
        store.load("run-1")
    assert info.value.code == "ResourceNotFoundException"
    assert not isinstance(info.value, RetryableError)
