"""A run id used again after its record expired: a new incarnation, with a log and executions of
its own; and the expiry rule that keeps every record younger than its chunk log (items and segments)."""

from __future__ import annotations

import json
import time
from typing import Any

import boto3
import pytest
from durable_harness.aws import DynamoCheckpointStore, DynamoChunkLog, StepFunctionsOrchestrator, build_runtime
from durable_harness.aws.stepfunctions import ExecutionNameTakenError, execution_name
from durable_harness.errors import FencedError, RetryableError, RunExistsError, RunNotFoundError, StorageError
from durable_harness.ids import new_run_id
from durable_harness.ports import StoredRun

from tests.aws.conftest import BUCKET, REGION, TABLE, Fault, RequestCounter
from tests.aws.test_stepfunctions import ASL, executions

DAY = 86400


class Clock:
    """A settable clock (epoch seconds)."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def record(run_id: str, state: str = "{}") -> StoredRun:
    return StoredRun(run_id=run_id, state=state, status="not_started")


def items(ddb: Any, run_id: str) -> dict[str, dict[str, Any]]:
    found = ddb.query(
        TableName=TABLE, KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": run_id}}
    )["Items"]
    return {item["sk"]["S"]: item for item in found}


def chunks(tag: str, n: int) -> list[str]:
    return [f'{{"type":"text-delta","id":"{tag}","delta":"{i}"}}' for i in range(n)]


def finish() -> str:
    return '{"type":"finish","finishReason":"stop"}'


def log_keys(found: dict[str, dict[str, Any]]) -> list[str]:
    """The chunk-log keys among a run's items."""
    return sorted(k for k in found if k.startswith("c#"))


def test_creating_a_run_makes_an_incarnation_and_an_empty_log_of_it_in_one_transaction(ddb: Any, s3: Any) -> None:
    clock = Clock()
    store = DynamoCheckpointStore(TABLE, client=ddb, ttl_seconds=30 * DAY, max_age_seconds=40 * DAY, clock=clock)
    run_id = new_run_id()
    store.create(record(run_id))
    found = items(ddb, run_id)
    inc = found["run"]["inc"]["S"]
    assert store.incarnation(run_id) == inc and len(inc) == 10
    index = f"c#{int(clock.now * 1000):013d}.{inc}#~"  # the incarnation's segment index: nothing sealed
    assert log_keys(found) == [index]
    assert found[index] == {
        "pk": {"S": run_id}, "sk": {"S": index}, "sealed": {"N": "0"}, "format": {"N": "1"},
        "expires_at": {"N": str(int(clock.now) + 40 * DAY)},  # as long as segments live
    }  # fmt: skip
    # A create that finds the run alive writes nothing: not the record, not the log.
    log = DynamoChunkLog(TABLE, dynamodb_client=ddb, s3_client=s3, bucket=BUCKET)
    assert log.open(run_id, 1) == 0
    log.append(run_id, 0, chunks("a", 2), 1)
    with pytest.raises(RunExistsError):
        store.create(record(run_id, '{"other":1}'))
    assert store.load(run_id).state == "{}" and log.read(run_id, 0) == chunks("a", 2)
    # The open's marker at 0 became the append; the index stays the incarnation's last key.
    assert log_keys(items(ddb, run_id)) == [f"c#{int(clock.now * 1000):013d}.{inc}#{0:013d}", index]
    with pytest.raises(RunExistsError):  # a store that knows nothing of the run: the transaction's condition
        DynamoCheckpointStore(TABLE, client=ddb).create(record(run_id, '{"x":1}'))
    assert store.load(run_id).state == "{}"
    # Records that are not runs (the approval ledger's) get no log.
    store.create(record("apv_" + "0" * 48))
    assert set(items(ddb, "apv_" + "0" * 48)) == {"run"}


@pytest.mark.parametrize("deleted", [False, True], ids=["expired-not-deleted", "deleted"])
def test_a_new_incarnation_has_an_empty_log_that_never_shows_the_old_one(ddb: Any, s3: Any, deleted: bool) -> None:
    clock = Clock()
    store = DynamoCheckpointStore(TABLE, client=ddb, ttl_seconds=30 * DAY, max_age_seconds=30 * DAY, clock=clock)
    log = DynamoChunkLog(TABLE, dynamodb_client=ddb, s3_client=s3, bucket=BUCKET, ttl_seconds=30 * DAY, clock=clock)
    run_id = new_run_id()
    store.create(record(run_id))
    old = store.incarnation(run_id)
    for epoch, start, tag in ((1, 0, "a"), (2, 3, "b"), (5, 6, "c")):  # three slices, fences up to 5
        assert log.open(run_id, epoch) == start
        log.append(run_id, start, chunks(tag, 3 if tag != "c" else 4), epoch)
    log.append(run_id, 10, [finish()], 5)  # the run's end: sealed into S3
    old_log = log.read(run_id, 0)
    assert old_log[-2:] == [chunks("c", 4)[-1], finish()]  # this reader's cache now holds the old log
    old_keys = log_keys(items(ddb, run_id))

    clock.now += 31 * DAY  # the record has expired (its log's items not yet: they outlive it)
    if deleted:  # ... and DynamoDB's TTL deleted it
        ddb.delete_item(TableName=TABLE, Key={"pk": {"S": run_id}, "sk": {"S": "run"}})
    created = store.create(record(run_id, '{"again":1}'))
    assert (created.version, created.epoch) == (1, 0)
    new = store.incarnation(run_id)
    assert new not in (None, old)
    # The reader that cached the old log, and a new one, see the new incarnation's empty log.
    fresh = DynamoChunkLog(TABLE, dynamodb_client=ddb, s3_client=s3, bucket=BUCKET)
    for reader in (log, fresh):
        assert reader.read(run_id, 0) == [] and reader.read(run_id, 3, 2) == []
        assert reader.count(run_id) == 0 and reader.tail(run_id, 5) == (0, [])
    # The new run's first slice claims epoch 1, below the old fence: its log takes it.
    claimed = store.claim(run_id, 1)
    assert log.open(run_id, claimed.epoch) == 0
    log.append(run_id, 0, [*chunks("new", 2), finish()], claimed.epoch)
    for reader in (log, fresh, DynamoChunkLog(TABLE, dynamodb_client=ddb, s3_client=s3, bucket=BUCKET)):
        assert reader.read(run_id, 0) == [*chunks("new", 2), finish()]
        assert reader.read(run_id, 1, 1) == chunks("new", 2)[1:]
        assert reader.tail(run_id, 2) == (3, [chunks("new", 2)[1], finish()])
    # The old items are still there, below the new ones; each run's sealed segment is apart.
    new_keys = set(log_keys(items(ddb, run_id))) - set(old_keys)
    assert all(old in k for k in old_keys) and all(new in k for k in new_keys) and max(old_keys) < min(new_keys)
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=f"runs/{run_id}/")["Contents"]]
    assert sorted(keys) == sorted([f"runs/{run_id}/{old}/seg/{0:013d}-{11:013d}.ndjson",
                                   f"runs/{run_id}/{new}/seg/{0:013d}-{3:013d}.ndjson"])  # fmt: skip
    body = s3.get_object(Bucket=BUCKET, Key=f"runs/{run_id}/{old}/seg/{0:013d}-{11:013d}.ndjson")["Body"].read()
    assert body.decode().splitlines() == old_log


def test_a_reader_that_trusts_the_old_incarnation_finds_the_new_one_at_the_top(ddb: Any, s3: Any) -> None:
    """A reader keeps the generation it learned for a while; a read that reaches the top of the
    run's keys meets the newer incarnation's and starts over."""
    clock = Clock()
    store = DynamoCheckpointStore(TABLE, client=ddb, ttl_seconds=30 * DAY, clock=clock)
    run_id = new_run_id()
    store.create(record(run_id))
    writer = DynamoChunkLog(TABLE, dynamodb_client=ddb, s3_client=s3, bucket=BUCKET, clock=clock)
    writer.open(run_id, 1)
    writer.append(run_id, 0, chunks("old", 5), 1)
    reader = DynamoChunkLog(TABLE, dynamodb_client=ddb, s3_client=s3, bucket=BUCKET)  # its clock does not move
    assert reader.read(run_id, 0) == chunks("old", 5)
    clock.now += 31 * DAY
    store.create(record(run_id))
    writer.open(run_id, 1)
    writer.append(run_id, 0, chunks("new", 2), 1)
    assert reader.read(run_id, 0) == chunks("new", 2)
    assert reader.read(run_id, 5) == []


def test_a_record_never_outlives_its_creation_plus_the_chunk_retention(ddb: Any, s3: Any) -> None:
    clock = Clock()
    created_at = int(clock.now)
    store = DynamoCheckpointStore(TABLE, client=ddb, ttl_seconds=30 * DAY, max_age_seconds=45 * DAY, clock=clock)
    run_id = new_run_id()
    store.create(record(run_id))
    expiry = lambda: int(items(ddb, run_id)["run"]["expires_at"]["N"])  # noqa: E731
    assert expiry() == created_at + 30 * DAY
    clock.now += 10 * DAY
    store.claim(run_id, 1)
    assert expiry() == created_at + 40 * DAY  # every write pushes it out ...
    clock.now += 10 * DAY
    store.save(record(run_id, '{"step":2}'), 2)
    assert expiry() == created_at + 45 * DAY  # ... but not past creation + retention
    cold = DynamoCheckpointStore(TABLE, client=ddb, ttl_seconds=30 * DAY, max_age_seconds=45 * DAY, clock=clock)
    clock.now += 10 * DAY
    cold.claim(run_id, 3)  # a process that never loaded the record caps it the same way
    assert expiry() == created_at + 45 * DAY
    clock.now = created_at + 45 * DAY
    with pytest.raises(RunNotFoundError):
        store.load(run_id)
    with pytest.raises(RunNotFoundError):
        store.incarnation(run_id)
    # A retention shorter than the TTL caps even the first expiry.
    short = DynamoCheckpointStore(TABLE, client=ddb, ttl_seconds=30 * DAY, max_age_seconds=7 * DAY, clock=clock)
    other = new_run_id()
    short.create(record(other))
    assert int(items(ddb, other)["run"]["expires_at"]["N"]) == int(clock.now) + 7 * DAY


def test_a_cap_computed_for_one_incarnation_never_lands_on_another(ddb: Any, s3: Any) -> None:
    clock = Clock()
    store = DynamoCheckpointStore(TABLE, client=ddb, ttl_seconds=30 * DAY, max_age_seconds=30 * DAY, clock=clock)
    other = DynamoCheckpointStore(TABLE, client=ddb, ttl_seconds=30 * DAY, max_age_seconds=30 * DAY, clock=clock)
    run_id = new_run_id()
    store.create(record(run_id))
    clock.now += 31 * DAY
    other.create(record(run_id, '{"new":1}'))  # elsewhere, the run id is used again
    # `store` still knows the old creation; a write computed from it is refused, not capped wrongly.
    with pytest.raises(FencedError):
        store.claim(run_id, 1)
    assert store.load(run_id).state == '{"new":1}'
    store.claim(run_id, 1)  # after a load it knows the new creation
    assert int(items(ddb, run_id)["run"]["expires_at"]["N"]) == int(clock.now) + 30 * DAY


# --- executions -----------------------------------------------------------------------------------


@pytest.fixture
def machine(aws: None) -> Any:
    sfn = boto3.client("stepfunctions", region_name=REGION)
    role = boto3.client("iam", region_name=REGION).create_role(RoleName="sfn", AssumeRolePolicyDocument="{}")
    arn = sfn.create_state_machine(name="runs", definition=json.dumps(ASL), roleArn=role["Role"]["Arn"])
    yield sfn, arn["stateMachineArn"]
    for ex in sfn.list_executions(stateMachineArn=arn["stateMachineArn"], statusFilter="RUNNING")["executions"]:
        sfn.stop_execution(executionArn=ex["executionArn"])


def test_executions_are_named_per_incarnation_and_a_reused_run_id_starts_a_new_one(
    ddb: Any, s3: Any, machine: Any
) -> None:
    sfn, arn = machine
    clock = Clock()
    store = DynamoCheckpointStore(TABLE, client=ddb, ttl_seconds=30 * DAY, clock=clock)
    orchestrator = StepFunctionsOrchestrator(arn, client=sfn, incarnation=store.incarnation)
    run_id = new_run_id()
    store.create(record(run_id))
    first = execution_name(run_id, 0, store.incarnation(run_id))
    orchestrator.start(run_id)
    orchestrator.start(run_id)  # idempotent while running
    sfn.stop_execution(executionArn=orchestrator.execution_arn(run_id, 0, store.incarnation(run_id)))
    orchestrator.start(run_id)  # closed, but its own: ExecutionAlreadyExists is success, nothing new
    assert executions(sfn, arn, {first: "ABORTED"}) == {first: "ABORTED"}
    assert json.loads(sfn.describe_execution(executionArn=f"{arn.replace(':stateMachine:', ':execution:')}:{first}")[
        "input"
    ]) == {"runId": run_id, "incarnation": store.incarnation(run_id)}  # fmt: skip

    clock.now += 31 * DAY
    store.create(record(run_id))  # the run id, used again after its record expired
    second = execution_name(run_id, 0, store.incarnation(run_id))
    assert second != first and len(second) <= 80
    orchestrator.start(run_id)
    assert executions(sfn, arn, {first: "ABORTED", second: "RUNNING"}) == {first: "ABORTED", second: "RUNNING"}
    # Cancel finds the new incarnation's generations by their derived names.
    sfn.start_execution(stateMachineArn=arn, name=f"{second}-c1", input=json.dumps({"runId": run_id}))
    orchestrator.cancel(run_id)
    expected = {first: "ABORTED", second: "ABORTED", f"{second}-c1": "ABORTED"}
    assert executions(sfn, arn, expected) == expected


def test_an_existing_execution_counts_as_started_only_when_it_is_this_runs_own(ddb: Any, machine: Any) -> None:
    sfn, arn = machine
    store = DynamoCheckpointStore(TABLE, client=ddb)
    run_id = new_run_id()
    store.create(record(run_id))
    name = execution_name(run_id, 0, store.incarnation(run_id))
    # Something else took the name (here: another input under it), and it is closed.
    sfn.start_execution(stateMachineArn=arn, name=name, input=json.dumps({"runId": "wrun_someone_else"}))
    sfn.stop_execution(executionArn=f"{arn.replace(':stateMachine:', ':execution:')}:{name}")
    orchestrator = StepFunctionsOrchestrator(arn, client=sfn, incarnation=store.incarnation)
    with pytest.raises(ExecutionNameTakenError, match="another run"):
        orchestrator.start(run_id)


def test_the_runtime_caps_records_at_the_chunk_retention_and_keeps_log_items_as_long(ddb: Any, s3: Any) -> None:
    env = {
        "RUNS_TABLE": TABLE, "CHUNK_BUCKET": BUCKET, "AWS_REGION": REGION, "RUN_TTL_DAYS": "30",
        "CHUNK_RETENTION_DAYS": "45", "STATE_MACHINE_ARN": f"arn:aws:states:{REGION}:123456789012:stateMachine:runs",
    }  # fmt: skip
    runtime = build_runtime(env, session=boto3.Session())
    run_id = new_run_id()
    runtime.store.create(record(run_id))
    runtime.log.open(run_id, 1)
    found = items(ddb, run_id)
    now = int(time.time())
    assert 29.9 * DAY < int(found["run"]["expires_at"]["N"]) - now <= 30 * DAY
    assert log_keys(found)  # the index, and the open's marker
    for key in log_keys(found):
        assert 44.9 * DAY < int(found[key]["expires_at"]["N"]) - now <= 45 * DAY, key
    assert runtime.orchestrator.current_incarnation(run_id) == found["run"]["inc"]["S"]


def test_a_create_cancelled_by_a_conflicting_transaction_is_retryable_and_writes_nothing(ddb: Any) -> None:
    body = {
        "__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
        "message": "Transaction cancelled [None, TransactionConflict]",
        "CancellationReasons": [{"Code": "None"}, {"Code": "TransactionConflict", "Message": "conflict"}],
    }
    fault = Fault(ddb, "TransactWriteItems", 400, json.dumps(body).encode(), "application/x-amz-json-1.0", times=1)
    store = DynamoCheckpointStore(TABLE, client=ddb)
    run_id = new_run_id()
    with pytest.raises(StorageError, match="TransactionConflict") as info:
        store.create(record(run_id))
    assert isinstance(info.value, RetryableError) and fault.attempts == 1
    assert items(ddb, run_id) == {}
    store.create(record(run_id))  # the retry goes through
    found = items(ddb, run_id)
    assert set(found) == {"run", *log_keys(found)} and [k[-2:] for k in log_keys(found)] == ["#~"]


def test_a_log_created_here_is_opened_without_a_look_at_its_top(ddb: Any, s3: Any) -> None:
    log = DynamoChunkLog(TABLE, dynamodb_client=ddb, s3_client=s3, bucket=BUCKET)
    store = DynamoCheckpointStore(TABLE, client=ddb, on_created=log.note_fresh)
    run_id = new_run_id()
    store.create(record(run_id))
    counter = RequestCounter(ddb, s3)
    assert log.open(run_id, 1) == 0
    assert "Query" not in counter.counts  # the creation told it the incarnation: only the fence is written
    log.append(run_id, 0, [*chunks("a", 2), finish()], 1)
    other = DynamoChunkLog(TABLE, dynamodb_client=ddb, s3_client=s3, bucket=BUCKET)
    assert other.read(run_id, 0) == [*chunks("a", 2), finish()]
    incarnation = store.incarnation(run_id)
    assert incarnation is not None and all(incarnation in key for key in log_keys(items(ddb, run_id)))


@pytest.mark.parametrize("epoch", [1, 3])
def test_a_log_created_here_but_written_elsewhere_since_is_still_fenced(ddb: Any, s3: Any, epoch: int) -> None:
    log = DynamoChunkLog(TABLE, dynamodb_client=ddb, s3_client=s3, bucket=BUCKET)
    store = DynamoCheckpointStore(TABLE, client=ddb, on_created=log.note_fresh)
    run_id = new_run_id()
    store.create(record(run_id))
    elsewhere = DynamoChunkLog(TABLE, dynamodb_client=ddb, s3_client=s3, bucket=BUCKET)  # another process
    assert elsewhere.open(run_id, 2) == 0
    elsewhere.append(run_id, 0, chunks("b", 3), 2)
    if epoch < 2:  # an older writer: fenced off by the newer one's items
        with pytest.raises(FencedError):
            log.open(run_id, epoch)
    else:  # a newer one: opens at the true end, not at the empty log it was told of
        assert log.open(run_id, epoch) == 3
        log.append(run_id, 3, [finish()], epoch)
        assert elsewhere.read(run_id, 0) == [*chunks("b", 3), finish()]
