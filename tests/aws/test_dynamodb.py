"""DynamoCheckpointStore beyond the shared contract: the head and its records, offloading, TTL,
idempotent create, lost replies, errors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from durable_harness.aws import AwsRequestError, DynamoCheckpointStore
from durable_harness.aws.chunklog.items import unpacked_text
from durable_harness.errors import (
    FatalError,
    FencedError,
    FormatVersionError,
    RetryableError,
    RunNotFoundError,
    StorageError,
)
from durable_harness.ports import StoredRun

from tests.aws.conftest import BUCKET, TABLE, Fault, RequestCounter, set_format

DAY = 86400


def record(run_id: str = "run-1", state: str = '{"step":0}', **fields: Any) -> StoredRun:
    return StoredRun(run_id=run_id, state=state, status=fields.pop("status", "not_started"), **fields)


def item(ddb: Any, run_id: str = "run-1") -> dict[str, Any]:
    found: dict[str, Any] = ddb.get_item(TableName=TABLE, Key={"pk": {"S": run_id}, "sk": {"S": "run"}})["Item"]
    return found


def state_objects(s3: Any, run_id: str = "run-1") -> list[str]:
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=f"runs/{run_id}/state/").get("Contents", [])
    return [obj["Key"] for obj in listed]


def big_state(tag: str, size: int = 5_000) -> str:
    return json.dumps({"tag": tag, "history": "x" * size}, separators=(",", ":"))


class Clock:
    """A settable clock (epoch seconds) for TTL tests."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def records(ddb: Any, run_id: str = "run-1") -> dict[str, dict[str, Any]]:
    """The run's checkpoint record items by sort key (``run#00000001``, ...)."""
    found = ddb.query(
        TableName=TABLE, KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": run_id}}
    )["Items"]
    return {i["sk"]["S"]: i for i in found if i["sk"]["S"].startswith("run#")}


def item_bytes(item: dict[str, Any]) -> int:
    """A DynamoDB item's size as moto holds it (DynamoDB's sizing rules)."""
    from moto.dynamodb.models.dynamo_type import DynamoType

    return sum(len(k.encode()) + DynamoType(v).size() for k, v in item.items())


def history(steps: int, size: int = 1_000) -> str:
    """A state whose history grows by one ``size``-byte entry per step (as a run's messages do)."""
    return json.dumps({"step": steps, "history": [f"{i}:" + "x" * size for i in range(steps)]}, separators=(",", ":"))


def test_the_record_layout(store: DynamoCheckpointStore, ddb: Any) -> None:
    store.create(record(principal="alice", chat_id="chat-1", meta={"origin": "event"}))
    stored = item(ddb)
    assert stored["sk"] == {"S": "run"}
    assert stored["state"] == {"S": '{"step":0}'}  # a small state stays in the head
    assert (stored["status"], stored["principal"], stored["chat_id"]) == (
        {"S": "not_started"},
        {"S": "alice"},
        {"S": "chat-1"},
    )
    assert stored["meta"] == {"M": {"origin": {"S": "event"}}}
    assert "state_key" not in stored and "seq" not in stored and int(stored["expires_at"]["N"]) > 0
    store.save(record(principal=None, chat_id=None), 1)
    assert "principal" not in item(ddb) and "chat_id" not in item(ddb) and records(ddb) == {}

    # A bigger state goes to records, counted by the head: a full state (it has little in common
    # with the small one before it), then what each save added.
    store.save(record(state=history(3)), 2)
    assert records(ddb).keys() == {"run#00000001"} and item(ddb)["seq"] == {"N": "1"} and "state" not in item(ddb)
    saved = store.save(record(state=history(4)), 3)
    assert records(ddb).keys() == {"run#00000001", "run#00000002"} and item(ddb)["seq"] == {"N": "2"}
    first, second = records(ddb)["run#00000001"], records(ddb)["run#00000002"]
    assert (first["kind"], second["kind"]) == ({"S": "full"}, {"S": "delta"})
    added = [["s", ["step"], 4], ["t", ["history"], 3, ["3:" + "x" * 1_000]]]
    assert json.loads(unpacked_text(second["body"])) == added
    assert second["inc"] == item(ddb)["inc"] and second["expires_at"] == item(ddb)["expires_at"]
    assert DynamoCheckpointStore(TABLE, client=ddb).load("run-1") == saved


def test_a_record_body_over_900_bytes_is_stored_compressed(store: DynamoCheckpointStore, ddb: Any) -> None:
    """A step's record shares the head's transaction, billed two units per started KB of each item:
    a compressible body over 900 bytes is stored as zlib bytes (as chunk data is), so a step of
    about 1.3 KB of JSON costs one KB unit, not two, and it loads as it was saved (issue 20)."""
    store.create(record(state=history(1, 1_300)))
    saved = store.save(record(state=history(2, 1_300)), 1)
    step = records(ddb)["run#00000002"]
    assert step["kind"] == {"S": "delta"} and set(step["body"]) == {"B"}
    assert item_bytes(step) < 1_024
    assert DynamoCheckpointStore(TABLE, client=ddb).load("run-1") == saved


def test_no_item_grows_with_the_history_and_a_history_past_400_kb_saves(ddb: Any, s3: Any) -> None:
    """Each save writes the step's record and the small head in one transaction; the whole history
    (here 450 KB, more than a DynamoDB item holds) is only ever put together by a load."""
    store = DynamoCheckpointStore(TABLE, client=ddb, s3_client=s3, bucket=BUCKET)
    counter = RequestCounter(ddb)
    version = store.create(record(state=history(1, 10_000))).version
    for step in range(2, 46):
        version = store.save(record(state=history(step, 10_000)), version).version
    assert counter.counts == {"TransactWriteItems": 45}  # the create, then one write per save
    found = records(ddb)
    assert len(found) == 45
    assert max(item_bytes(r) for r in found.values()) < 10_200  # each record: one step, not the history
    assert item_bytes(item(ddb)) < 400  # the head
    final = DynamoCheckpointStore(TABLE, client=ddb, s3_client=s3, bucket=BUCKET).load("run-1")
    assert final.state == history(45, 10_000) and len(final.state) > 450_000
    assert not state_objects(s3)  # nothing needed offloading


def test_large_record_bodies_round_trip_through_s3(ddb: Any, s3: Any) -> None:
    store = DynamoCheckpointStore(TABLE, client=ddb, s3_client=s3, bucket=BUCKET, offload_bytes=1_000)
    created = store.create(record(state=big_state("v1")))
    head, first = item(ddb), records(ddb)["run#00000001"]
    assert "state" not in head and "state_key" not in head and head["seq"] == {"N": "1"}
    assert first["kind"] == {"S": "full"} and "body" not in first
    inc = head["inc"]["S"]
    assert first["body_key"]["S"].startswith(f"runs/run-1/state/{inc}-00000001-")
    assert state_objects(s3) == [first["body_key"]["S"]]
    cold = DynamoCheckpointStore(TABLE, client=ddb, s3_client=s3, bucket=BUCKET, offload_bytes=1_000)
    assert cold.load("run-1") == created

    claimed = cold.claim("run-1", 1)
    assert claimed.state == big_state("v1") and (claimed.version, claimed.epoch) == (2, 1)
    saved = cold.save(record(state=big_state("v3")), 2)  # only the tag changed: a small delta
    assert records(ddb)["run#00000002"]["kind"] == {"S": "delta"} and "body" in records(ddb)["run#00000002"]
    assert store.load("run-1") == saved

    # A stale writer's object is removed when its transaction fails.
    with pytest.raises(FencedError):
        store.save(record(state=json.dumps({"other": "y" * 5_000})), 2)
    assert len(state_objects(s3)) == 1 and len(records(ddb)) == 2
    assert cold.load("run-1").state == big_state("v3")

    # A new state unlike the last is a full record; records are immutable, so both objects stay.
    other = cold.save(record(state=json.dumps({"other": "z" * 5_000})), 3)
    assert records(ddb)["run#00000003"]["kind"] == {"S": "full"} and len(state_objects(s3)) == 2
    assert DynamoCheckpointStore(TABLE, client=ddb, s3_client=s3, bucket=BUCKET).load("run-1") == other


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


def test_a_record_over_the_limit_without_a_bucket_fails_before_writing(ddb: Any) -> None:
    store = DynamoCheckpointStore(TABLE, client=ddb, offload_bytes=1_000)
    with pytest.raises(StorageError):
        store.create(record(state=big_state("x", 2_000)))
    with pytest.raises(RunNotFoundError):
        store.load("run-1")


@pytest.mark.parametrize("found", [None, "2"], ids=["no-format", "another-format"])
def test_a_record_of_another_storage_format_is_refused_saying_what_to_do(
    store: DynamoCheckpointStore, ddb: Any, found: str | None
) -> None:
    """Create stamps the head with the storage format it writes; a head of another format (or of
    none) is never read as if it were this one: its attributes may mean something else."""
    store.create(record(state=history(3)))
    assert item(ddb)["format"] == {"N": "1"}
    key = {"pk": {"S": "run-1"}, "sk": {"S": "run"}}
    set_format(ddb, key, found)
    cold = DynamoCheckpointStore(TABLE, client=ddb)
    for read in (cold.load, cold.summary, lambda run_id: cold.claim(run_id, 1)):
        with pytest.raises(
            FormatVersionError, match=r"run 'run-1' is in storage format .*reads format 1.*release"
        ) as caught:
            read("run-1")
        assert isinstance(caught.value, FatalError)  # running the slice again cannot help
    assert item(ddb)["version"] == {"N": "1"}  # nothing was written


def test_a_run_whose_records_expired_is_missing(store: DynamoCheckpointStore, ddb: Any) -> None:
    store.create(record(state=history(2)))
    store.save(record(state=history(3)), 1)
    ddb.delete_item(TableName=TABLE, Key={"pk": {"S": "run-1"}, "sk": {"S": "run#00000001"}})  # TTL got there first
    with pytest.raises(RunNotFoundError):
        DynamoCheckpointStore(TABLE, client=ddb).load("run-1")


def test_a_save_whose_reply_was_lost_is_not_a_conflict(store: DynamoCheckpointStore, ddb: Any) -> None:
    """DynamoDB applied the transaction but the reply was lost; botocore's retry then fails the
    version condition against our own write (unless DynamoDB recognised the request token)."""
    store.create(record(state=history(2)))
    fault = Fault(ddb, "TransactWriteItems", 500, b"{}", "application/x-amz-json-1.0", times=1, lost_reply=True)
    saved = store.save(record(state=history(3)), 1)
    assert fault.attempts == 1 and saved.version == 2
    assert DynamoCheckpointStore(TABLE, client=ddb).load("run-1") == saved
    assert store.save(record(state=history(4)), 2).version == 3


def test_a_cancelled_transaction_is_retryable_and_writes_nothing(store: DynamoCheckpointStore, ddb: Any) -> None:
    store.create(record(state=history(2)))
    body = {
        "__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
        "message": "Transaction cancelled, please refer cancellation reasons [TransactionConflict]",
        "CancellationReasons": [{"Code": "TransactionConflict"}, {"Code": "None"}],
    }
    fault = Fault(ddb, "TransactWriteItems", 400, json.dumps(body).encode(), "application/x-amz-json-1.0", times=1)
    with pytest.raises(StorageError) as info:
        store.save(record(state=history(3)), 1)
    assert isinstance(info.value, RetryableError) and fault.attempts == 1
    assert records(ddb).keys() == {"run#00000001"} and store.load("run-1").version == 1
    assert store.save(record(state=history(3)), 1).version == 2


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


def test_a_fresh_store_without_cached_records_writes_the_same(ddb: Any, s3: Any) -> None:
    # The first store caches what it wrote; the others must take the uncached paths.
    DynamoCheckpointStore(TABLE, client=ddb).create(record(meta={"a": "1"}))
    claimed = DynamoCheckpointStore(TABLE, client=ddb).claim("run-1", 1)
    assert (claimed.version, claimed.epoch, claimed.meta) == (2, 1, {"a": "1"})
    saved = DynamoCheckpointStore(TABLE, client=ddb).save(record(state='{"s":2}', epoch=7), 2)
    assert (saved.version, saved.epoch, saved.state) == (3, 1, '{"s":2}')


def test_cached_writes_do_not_read_or_ship_the_state_back(store: DynamoCheckpointStore, ddb: Any) -> None:
    store.create(record(state=big_state("inline", 50_000)))
    counter = RequestCounter(ddb)
    responses: list[dict[str, Any]] = []
    ddb.meta.events.register("after-call.dynamodb.UpdateItem", lambda parsed, **_: responses.append(parsed))
    store.claim("run-1", 1)
    store.save(record(state=big_state("inline", 50_001)), 2)
    # The record this store wrote is not read again, and no write returns the 50 KB state.
    assert not {"GetItem", "Query", "GetObject"} & set(counter.counts), counter.counts
    assert responses and all("state" not in r.get("Attributes", {}) for r in responses)


def test_throttling_becomes_storage_error_after_the_clients_retries(store: DynamoCheckpointStore, ddb: Any) -> None:
    store.create(record())
    fault = Fault.dynamodb(ddb, "Query", "ProvisionedThroughputExceededException")
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
