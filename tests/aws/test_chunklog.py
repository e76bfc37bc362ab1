"""DynamoChunkLog beyond the shared contract: fencing without a head, lost replies, spills, tails.

Request costs are asserted as bounds that do not grow with the log (the protocol's promise);
the exact figures are measured in bench/ (``deployed_wiring.py``, ``resume_cost.py``).
"""

from __future__ import annotations

import itertools
import random
import threading
from typing import Any

import boto3
import pytest
from durable_harness.aws import AwsRequestError, DynamoChunkLog
from durable_harness.errors import FencedError, LogConflictError, RetryableError, StorageError

from tests.aws.conftest import BUCKET, FAST_RETRIES, REGION, TABLE, Fault, RequestCounter, atomic_requests, new_log


def incompressible(n: int, seed: int = 0) -> str:
    """A chunk of about ``n`` bytes that zlib cannot shrink much (so it spills)."""
    return '{"delta":"' + random.Random(seed).randbytes(n // 2).hex() + '"}'


def chunks(first: int, n: int, tag: str = "t") -> list[str]:
    return [f'{{"type":"text-delta","id":"{tag}","delta":"{i}"}}' for i in range(first, first + n)]


def items(ddb: Any, run_id: str) -> list[dict[str, Any]]:
    """The run's chunk-log items as stored, in key order."""
    found: list[dict[str, Any]] = ddb.query(
        TableName=TABLE,
        KeyConditionExpression="pk = :p AND begins_with(sk, :c)",
        ExpressionAttributeValues={":p": {"S": run_id}, ":c": {"S": "c#"}},
    )["Items"]
    return found


def objects(s3: Any, run_id: str) -> list[str]:
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=f"runs/{run_id}/")
    return [o["Key"] for o in listed.get("Contents", [])]


def check_every_read(
    ddb: Any, s3: Any, run_id: str, expected: list[str], starts: list[int] | None = None, **options: Any
) -> None:
    """Cold readers (new objects) read ``expected`` from every start (or ``starts``), with and without limits."""
    for start in range(len(expected) + 2) if starts is None else starts:
        for limit in (None, 1, 3):
            reader = new_log(ddb, s3, **options)
            stop = None if limit is None else start + limit
            assert reader.read(run_id, start, limit) == expected[start:stop], (start, limit)
            reader.close()


# --- fencing --------------------------------------------------------------------------------------


def test_a_fenced_writer_in_another_process_writes_nothing(ddb: Any, s3: Any) -> None:
    a, b = new_log(ddb, s3), new_log(ddb, s3)
    assert a.open("r1", 1) == 0
    a.append("r1", 0, chunks(0, 3, "a"), 1)
    assert b.open("r1", 2) == 3
    # A still believes the log ends at 3: b's marker holds that key, so A learns it is fenced.
    with pytest.raises(FencedError) as info:
        a.append("r1", 3, chunks(3, 4, "a"), 1)
    assert type(info.value) is FencedError
    b.append("r1", 3, chunks(3, 2, "b"), 2)
    with pytest.raises(FencedError):
        a.append("r1", 3, chunks(3, 1, "a"), 1)
    expected = chunks(0, 3, "a") + chunks(3, 2, "b")
    check_every_read(ddb, s3, "r1", expected)
    assert a.read("r1", 0) == expected
    assert b.count("r1") == 5


def test_an_older_open_after_a_newer_writer_is_fenced_by_the_last_item(ddb: Any, s3: Any) -> None:
    newer = new_log(ddb, s3)
    newer.open("r1", 5)
    newer.append("r1", 0, ["a", "b"], 5)
    for stale in (new_log(ddb, s3), newer):
        with pytest.raises(FencedError):
            stale.open("r1", 4)
        with pytest.raises(FencedError):
            stale.append("r1", 2, ["x"], 4)
    assert new_log(ddb, s3).read("r1", 0) == ["a", "b"]
    assert newer.append("r1", 2, ["c"], 5) == 3


def test_a_newer_open_takes_over_an_older_marker(ddb: Any, s3: Any) -> None:
    older, newer = new_log(ddb, s3), new_log(ddb, s3)
    older.append("r1", 0, ["a0"], 1)
    assert older.open("r1", 1) == 1
    assert newer.open("r1", 2) == 1  # replaces the older marker at 1
    with pytest.raises(FencedError):
        older.append("r1", 1, ["orphan"], 1)
    newer.append("r1", 1, ["b1"], 2)
    assert [int(i["e"]["N"]) for i in items(ddb, "r1")] == [1, 2]
    check_every_read(ddb, s3, "r1", ["a0", "b1"])


def test_stale_epoch_cannot_append_after_a_newer_open_even_without_cached_state(ddb: Any, s3: Any) -> None:
    new_log(ddb, s3).open("r1", 5)
    stale = new_log(ddb, s3)
    with pytest.raises(FencedError):
        stale.append("r1", 0, ["x"], 4)
    with pytest.raises(FencedError):
        stale.open("r1", 4)
    assert stale.count("r1") == 0
    assert [int(i["n"]["N"]) for i in items(ddb, "r1")] == [0]  # only the newer writer's marker


def test_many_overtaken_writers_write_nothing(ddb: Any, s3: Any) -> None:
    keeper = new_log(ddb, s3)
    keeper.open("r1", 1)
    keeper.append("r1", 0, ["a0", "a1"], 1)
    for epoch in range(2, 22):  # each writer opens, is overtaken, then tries to append at 2
        stale = new_log(ddb, s3)
        stale.open("r1", epoch)
        new_log(ddb, s3).open("r1", epoch + 1)
        with pytest.raises(FencedError):
            stale.append("r1", 2, [f"orphan-{epoch}"], epoch)
    winner = new_log(ddb, s3)
    winner.open("r1", 22)
    winner.append("r1", 2, ["w2", "w3"], 22)
    winner.append("r1", 4, ["w4"], 22)
    check_every_read(ddb, s3, "r1", ["a0", "a1", "w2", "w3", "w4"])


def test_an_open_racing_an_older_writer_retries_until_its_marker_holds_the_end(ddb: Any, s3: Any) -> None:
    """An older writer keeps appending while the newer one opens: the open reads the end, the
    older append lands there first, the marker's put fails, the open looks again and wins."""
    older = new_log(ddb, s3)
    older.open("r1", 1)
    older.append("r1", 0, ["o0"], 1)
    ddb2 = boto3.client("dynamodb", region_name=REGION, config=FAST_RETRIES)  # the newer writer's process
    newer = DynamoChunkLog(TABLE, dynamodb_client=ddb2, s3_client=s3, bucket=BUCKET)
    count = itertools.count(1)

    def older_appends_first(event_name: str, **_: Any) -> None:
        n = next(count)
        if n <= 3:  # the first three marker puts each lose to an older append at the same end
            older.append("r1", n, [f"o{n}"], 1)

    ddb2.meta.events.register_first("before-send.dynamodb.PutItem", older_appends_first)
    assert newer.open("r1", 2) == 4
    with pytest.raises(FencedError):
        older.append("r1", 4, ["late"], 1)
    newer.append("r1", 4, ["n4"], 2)
    assert new_log(ddb, s3).read("r1", 0) == ["o0", "o1", "o2", "o3", "n4"]


def test_concurrent_writers_with_different_epochs_never_interleave(ddb: Any, s3: Any) -> None:
    atomic_requests(ddb, s3)  # DynamoDB applies each conditional write atomically; moto needs help
    results: dict[int, list[str]] = {}

    def writer(epoch: int) -> None:
        log = new_log(ddb, s3)
        mine: list[str] = []
        try:
            count = log.open("r1", epoch)
            for n in range(5):
                batch = [f"e{epoch}-{n}"]
                count = log.append("r1", count, batch, epoch)
                mine += batch
        except (FencedError, LogConflictError):
            pass
        results[epoch] = mine

    threads = [threading.Thread(target=writer, args=(e,)) for e in (1, 2, 3, 4, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Each epoch's successful appends, in epoch order: no chunk of a fenced writer, no gap.
    assert new_log(ddb, s3).read("r1", 0) == [c for e in (1, 2, 3, 4, 5) for c in results[e]]
    assert results[5]  # the newest writer can never be fenced off


# --- reading --------------------------------------------------------------------------------------


def build_10k(log: DynamoChunkLog) -> list[int]:
    """10,000 chunks in appends of varied sizes, two epochs; returns the append starts."""
    sizes = itertools.cycle([1, 7, 64, 128, 33, 2, 90])
    starts, count, epoch = [], log.open("big", 1), 1
    while count < 10_000:
        if count >= 6_000 and epoch == 1:
            epoch = 2
            count = log.open("big", 2)
        n = min(next(sizes), 10_000 - count)
        starts.append(count)
        count = log.append("big", count, chunks(count, n), epoch)
    return starts


def test_reads_at_any_start_of_a_10k_log_cost_the_same_few_requests(ddb: Any, s3: Any, log: DynamoChunkLog) -> None:
    starts = build_10k(log)
    expected = chunks(0, 10_000)
    counter = RequestCounter(ddb, s3)
    cases = [(0, 1), (5_000, 1), (5_001, None), (9_999, None), (3, 50), (5_000, 10), (6_000, 5), (9_990, None)]
    for start, limit in cases:
        reader = new_log(ddb, s3)  # a cold process each time: no cached appends or boundaries
        counter.reset()
        got = reader.read("big", start, limit)
        assert got == expected[start : None if limit is None else start + limit]
        # Queries only, and a handful: never a function of the log's length before ``start``. A
        # cold reader first finds the run's current incarnation at the top of its keys (one
        # Query, which also serves a start among the last appends); then a start at an append
        # boundary takes one more, another start two in parallel (the item holding it, the rest).
        assert set(counter.counts) == {"Query"} and counter.total <= 3, (start, counter.counts)
        assert counter.total <= 2 or start not in starts, (start, counter.counts)
        reader.close()


def test_a_follower_reads_what_is_new_in_one_request_and_never_twice(ddb: Any, s3: Any) -> None:
    writer, follower = new_log(ddb, s3), new_log(ddb, s3)
    writer.open("r1", 1)
    for n in range(3):
        writer.append("r1", n * 4, chunks(n * 4, 4), 1)
    counter = RequestCounter(ddb, s3)
    assert follower.read("r1", 0) == chunks(0, 12)
    assert counter.total == 1
    counter.reset()
    assert follower.read("r1", 12, 512) == []  # nothing new: still one request
    writer.append("r1", 12, chunks(12, 5), 1)
    assert follower.read("r1", 12, 512) == chunks(12, 5)
    assert counter.counts == {"Query": 2, "PutItem": 1}  # the writer's append, the follower's two polls
    # A read stopped by its limit inside an append continues from the cache, then from its end.
    counter.reset()
    assert follower.read("r1", 10, 4) == chunks(10, 4)
    assert follower.read("r1", 14, 512) == chunks(14, 3)
    assert counter.total == 1


def test_what_a_read_brought_beyond_its_limit_serves_the_next_read(ddb: Any, s3: Any) -> None:
    writer, reader = new_log(ddb, s3), new_log(ddb, s3)
    count = writer.open("r1", 1)
    for _ in range(10):
        count = writer.append("r1", count, chunks(count, 10), 1)
    assert reader.read("r1", 0, 20) == chunks(0, 20)  # a Query sized for 20 one-chunk items
    counter = RequestCounter(ddb, s3)
    assert reader.read("r1", 20, 20) == chunks(20, 20)
    assert reader.read("r1", 40, 60) == chunks(40, 60)
    assert counter.total == 0  # committed appends never change: what was read is kept


WRITES = {"PutItem", "UpdateItem", "PutObject", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}


def test_an_append_after_open_is_at_most_one_write_and_reads_nothing(ddb: Any, s3: Any) -> None:
    writer = new_log(ddb, s3)
    counter = RequestCounter(ddb, s3)
    assert writer.open("r1", 1) == 0
    assert sum(n for op, n in counter.counts.items() if op in WRITES) <= 1  # the fence (a marker)
    for n in range(20):
        counter.reset()
        writer.append("r1", n * 10, chunks(n * 10, 10), 1)
        assert set(counter.counts) <= WRITES and counter.total <= 1, counter.counts


@pytest.mark.parametrize("n", [0, 5, 11, 1000])
def test_tail_reads_the_count_and_the_last_chunks_in_one_request(ddb: Any, s3: Any, n: int) -> None:
    writer = new_log(ddb, s3)
    count = writer.open("r1", 1)
    for size in [3, 1, 10, 2, 7] * 4:
        count = writer.append("r1", count, chunks(count, size), 1)
    expected = chunks(0, count)
    writer.open("r1", 2)  # a marker at the end changes nothing
    counter = RequestCounter(ddb, s3)
    reader = new_log(ddb, s3)
    assert reader.tail("r1", n) == (count, expected[max(0, count - n) :] if n else [])
    assert counter.total == 1 or n >= 16  # beyond 16 items a longer tail may take another page
    # The reader then follows from the end with one request per poll.
    counter.reset()
    assert reader.read("r1", count, 512) == []
    assert counter.total == 1


def test_tail_of_a_log_never_written(log: DynamoChunkLog) -> None:
    assert log.tail("nothing", 5) == (0, [])
    with pytest.raises(ValueError):
        log.tail("nothing", -1)


# --- storage --------------------------------------------------------------------------------------


def test_long_appends_are_compressed_and_large_ones_spill_to_s3(ddb: Any, s3: Any) -> None:
    log = new_log(ddb, s3, spill_bytes=4096)
    small = chunks(0, 3)
    long = chunks(3, 200)  # ~8 KB of repetitive JSON: compresses well under 4 KB
    huge = [incompressible(20_000), *chunks(204, 2)]
    count = log.append("r1", 0, small, 1)
    count = log.append("r1", count, long, 1)
    count = log.append("r1", count, [f'{{"type":"text-delta","delta":"{i:05d}-{"yz" * 40}"}}' for i in range(1)], 1)
    count = log.append("r1", count, huge, 1)
    stored = items(ddb, "r1")
    assert "S" in stored[0]["d"] and "B" in stored[1]["d"] and "k" in stored[3] and "d" not in stored[3]
    assert len(stored[1]["d"]["B"]) < 4096 < sum(len(c) + 1 for c in long)
    assert objects(s3, "r1") == [stored[3]["k"]["S"]]
    expected = log.read("r1", 0)
    assert expected[:203] == small + long and expected[-3:] == huge
    edges = [0, 1, 2, 3, 4, 101, 202, 203, 204, 205, 206, 207, 208, 209]  # around every item boundary
    check_every_read(ddb, s3, "r1", expected, edges, spill_bytes=4096)
    assert new_log(ddb, s3).tail("r1", 4) == (count, expected[-4:])


def test_a_spill_whose_append_was_fenced_is_never_read(ddb: Any, s3: Any) -> None:
    older, newer = new_log(ddb, s3, spill_bytes=1024), new_log(ddb, s3)
    older.open("r1", 1)
    newer.open("r1", 2)
    big = [incompressible(3000)]
    with pytest.raises(FencedError):
        older.append("r1", 0, big, 1)
    assert len(objects(s3, "r1")) == 1  # written before its item failed: an orphan
    newer.append("r1", 0, ["n0"], 2)
    assert new_log(ddb, s3).read("r1", 0) == ["n0"]


# --- failures -------------------------------------------------------------------------------------


def test_an_append_whose_reply_was_lost_is_recognized_on_the_clients_retry(ddb: Any, s3: Any) -> None:
    log = new_log(ddb, s3)
    log.open("r1", 1)
    fault = Fault.dynamodb(ddb, "PutItem", "InternalServerError", 500, lost_reply=True, times=1)
    assert log.append("r1", 0, ["a", "b"], 1) == 2  # executed, reply lost, retried: its own write id
    assert fault.attempts == 1
    assert log.append("r1", 2, ["c"], 1) == 3
    assert new_log(ddb, s3).read("r1", 0) == ["a", "b", "c"]


def test_an_append_whose_every_reply_was_lost_is_a_conflict_when_repeated(ddb: Any, s3: Any) -> None:
    log = new_log(ddb, s3)
    log.open("r1", 1)
    log.append("r1", 0, ["a"], 1)
    fault = Fault.dynamodb(ddb, "PutItem", "InternalServerError", 500, lost_reply=True)
    with pytest.raises(StorageError):
        log.append("r1", 1, ["b"], 1)
    assert fault.attempts == 3
    fault.armed = False
    assert new_log(ddb, s3).read("r1", 0) == ["a", "b"]  # it did land
    with pytest.raises(LogConflictError):
        log.append("r1", 1, ["b"], 1)  # so the log no longer ends at 1: nothing is written twice
    assert log.append("r1", 2, ["c"], 1) == 3
    assert new_log(ddb, s3).read("r1", 0) == ["a", "b", "c"]


def test_a_throttled_append_fails_as_storage_error_and_can_be_retried(ddb: Any, s3: Any) -> None:
    log = new_log(ddb, s3)
    log.open("r1", 1)
    fault = Fault.dynamodb(ddb, "PutItem", "ProvisionedThroughputExceededException")
    with pytest.raises(StorageError) as info:
        log.append("r1", 0, ["a"], 1)
    assert isinstance(info.value, RetryableError) and fault.attempts == 3
    fault.armed = False
    assert log.count("r1") == 0
    assert log.append("r1", 0, ["a"], 1) == 1
    assert log.read("r1", 0) == ["a"]


def test_a_spill_whose_reply_was_lost_is_written_once(ddb: Any, s3: Any) -> None:
    log = new_log(ddb, s3, spill_bytes=1024)
    fault = Fault.s3(s3, "PutObject", "InternalError", 500, lost_reply=True, times=1)
    big = [incompressible(3000), "{}"]
    assert log.append("r1", 0, big, 1) == 2
    assert fault.attempts == 1 and len(objects(s3, "r1")) == 1
    assert new_log(ddb, s3).read("r1", 0) == big


def test_timeouts_become_storage_errors_after_the_clients_retries(ddb: Any, s3: Any) -> None:
    log = new_log(ddb, s3)
    fault = Fault.timeout(ddb, "Query")
    with pytest.raises(StorageError, match="timeout"):
        log.count("r1")
    assert fault.attempts == 3


def test_access_denied_is_not_retryable(ddb: Any, s3: Any) -> None:
    log = new_log(ddb, s3, spill_bytes=1024)
    log.append("r1", 0, [incompressible(3000)], 0)
    fault = Fault.s3(s3, "GetObject", "AccessDenied", 403)
    with pytest.raises(AwsRequestError) as info:
        new_log(ddb, s3).read("r1", 0)
    assert not isinstance(info.value, RetryableError)
    assert fault.attempts == 1  # botocore does not retry a 403


def test_a_missing_spill_object_is_reported_not_skipped(ddb: Any, s3: Any) -> None:
    log = new_log(ddb, s3, spill_bytes=1024)
    log.append("r1", 0, ["a"], 0)
    log.append("r1", 1, [incompressible(3000)], 0)
    (key,) = objects(s3, "r1")
    s3.delete_object(Bucket=BUCKET, Key=key)
    with pytest.raises(StorageError, match="missing"):
        new_log(ddb, s3).read("r1", 0)


def test_run_ids_that_could_escape_the_prefix_are_refused(log: DynamoChunkLog) -> None:
    for bad in ("../x", "a/b", "", "-x"):
        with pytest.raises(ValueError):
            log.count(bad)


def test_a_follower_learns_when_the_next_append_is_due(ddb: Any, s3: Any) -> None:
    now = [100.0]  # the writer's clock
    writer = new_log(ddb, s3, clock=lambda: now[0])
    follower = new_log(ddb, s3)

    def append_at(at: float, start: int, chunk: str) -> None:
        now[0] = at
        writer.append("r1", start, [chunk], 1)

    writer.open("r1", 1)  # a marker: not an append, says nothing of the pace
    append_at(100.0, 0, "a")
    assert follower.read("r1", 0) == ["a"] and follower.next_commit("r1") is None  # one append: no pace yet
    append_at(100.07, 1, "b")
    append_at(100.14, 2, "c")
    assert follower.read("r1", 1) == ["b", "c"]
    due = follower.next_commit("r1")
    assert due is not None and 100.14 + 0.07 <= due <= 100.14 + 0.07 + 0.05
    append_at(100.21, 3, "d")
    append_at(100.8, 4, "e")  # after a pause: the median gap stays the pace
    assert follower.read("r1", 3) == ["d", "e"]
    due = follower.next_commit("r1")
    assert due is not None and 100.8 + 0.07 <= due <= 100.8 + 0.07 + 0.05
    assert new_log(ddb, s3).next_commit("r1") is None  # learnt by reading, per process


def test_every_append_and_marker_names_the_key_after_it(log: DynamoChunkLog, ddb: Any) -> None:
    # The state machine's failure path without Lambda appends error and finish at the log's end;
    # ASL cannot format a 13-digit key, so every item carries the key that follows it.
    assert log.open("rx", 1) == 0
    log.append("rx", 0, chunks(0, 3), 1)
    log.append("rx", 3, chunks(3, 2), 1)
    assert log.open("rx", 2) == 5  # a marker at the end, of the newer epoch
    stored = items(ddb, "rx")
    for item in stored:
        start = int(item["sk"]["S"].rpartition("#")[2])
        assert item["x"]["S"] == item["sk"]["S"][:-13] + f"{start + int(item['n']['N']):013d}"
    assert stored[-1]["n"]["N"] == "0" and stored[-1]["x"]["S"] == stored[-1]["sk"]["S"]


def test_an_append_that_was_throttled_is_reported_as_retried(log: DynamoChunkLog, ddb: Any) -> None:
    assert log.open("rt", 1) == 0
    log.append("rt", 0, chunks(0, 1), 1)
    assert not log.retried("rt")
    fault = Fault.dynamodb(ddb, "PutItem", "ProvisionedThroughputExceededException", times=2)
    log.append("rt", 1, chunks(1, 1), 1)  # botocore retried it twice, then it went through
    assert fault.attempts == 2 and log.retried("rt") and not log.retried("other")
    log.append("rt", 2, chunks(2, 1), 1)  # at once again
    assert not log.retried("rt")
    assert log.read("rt", 0) == chunks(0, 3)
