"""S3ChunkLog beyond the shared contract: strict fencing, orphans, request counts, failures."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pytest
from durable_harness.aws import S3ChunkLog
from durable_harness.errors import FencedError, LogConflictError, StorageError

from tests.aws.conftest import BUCKET, TABLE, Fault, RequestCounter, atomic_requests, new_log


def chunks(first: int, n: int, tag: str = "t") -> list[str]:
    return [f'{{"type":"text-delta","id":"{tag}","delta":"{i}"}}' for i in range(first, first + n)]


def segment_keys(s3: Any, run_id: str) -> list[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"runs/{run_id}/seg/")
    return [obj["Key"] for page in pages for obj in page.get("Contents", [])]


def head_item(ddb: Any, run_id: str) -> dict[str, Any]:
    item: dict[str, Any] = ddb.get_item(TableName=TABLE, Key={"pk": {"S": run_id}, "sk": {"S": "log"}})["Item"]
    return item


# --- fencing --------------------------------------------------------------------------------------


def test_a_fenced_writer_in_another_process_leaves_only_an_invisible_orphan(ddb: Any, s3: Any) -> None:
    a, b = new_log(ddb, s3), new_log(ddb, s3)
    assert a.open("r1", 1) == 0
    a.append("r1", 0, chunks(0, 3, "a"), 1)
    assert b.open("r1", 2) == 3
    b.append("r1", 3, chunks(3, 2, "b"), 2)
    # A still believes the log ends at 3 under its fence: its segment reaches S3, its commit fails.
    with pytest.raises(FencedError) as info:
        a.append("r1", 3, chunks(3, 4, "a"), 1)
    assert type(info.value) is FencedError
    assert len(segment_keys(s3, "r1")) == 3  # a at 0, b at 3, and a's orphan at 3
    expected = chunks(0, 3, "a") + chunks(3, 2, "b")
    for start in range(6):  # every start, from a reader with cold caches, skips the orphan
        assert new_log(ddb, s3).read("r1", start) == expected[start:], start
    assert a.read("r1", 0) == expected
    assert b.count("r1") == 5


def test_a_newer_writer_commits_over_an_orphan_at_the_same_start(ddb: Any, s3: Any) -> None:
    a, b = new_log(ddb, s3), new_log(ddb, s3)
    a.open("r1", 1)
    a.append("r1", 0, ["a0"], 1)
    b.open("r1", 2)
    with pytest.raises(FencedError):
        a.append("r1", 1, ["orphan-1", "orphan-2"], 1)
    b.append("r1", 1, ["b1"], 2)
    b.append("r1", 2, ["b2", "b3"], 2)
    reader = new_log(ddb, s3)
    assert reader.read("r1", 1) == ["b1", "b2", "b3"]
    assert reader.read("r1", 2, 1) == ["b2"]


def test_stale_epoch_cannot_append_after_a_newer_open_even_without_cached_state(ddb: Any, s3: Any) -> None:
    new_log(ddb, s3).open("r1", 5)
    stale = new_log(ddb, s3)
    with pytest.raises(FencedError):
        stale.append("r1", 0, ["x"], 4)
    with pytest.raises(FencedError):
        stale.open("r1", 4)
    assert segment_keys(s3, "r1") == []  # the fence was checked before any segment was written
    assert stale.count("r1") == 0


def test_many_fenced_writers_leave_orphans_that_no_read_returns(ddb: Any, s3: Any) -> None:
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
    assert len(segment_keys(s3, "r1")) == 1 + 20 + 2
    for start in range(5):
        for limit in (None, 1, 2):
            got = new_log(ddb, s3).read("r1", start, limit)
            assert got == ["a0", "a1", "w2", "w3", "w4"][start : None if limit is None else start + limit]


def test_reads_stay_correct_when_the_segment_cache_is_tiny(ddb: Any, s3: Any) -> None:
    writer = new_log(ddb, s3)
    count = writer.open("r1", 1)
    for n in range(30):
        count = writer.append("r1", count, chunks(count, n % 4 + 1), 1)
    expected = chunks(0, count)
    reader = S3ChunkLog(BUCKET, s3_client=s3, dynamodb_client=ddb, table_name=TABLE, cache_bytes=300)
    for start in range(0, count, 7):
        assert reader.read("r1", start) == expected[start:]
        assert reader.read("r1", start, 5) == expected[start : start + 5]
    reader.close()


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


# --- request counts -------------------------------------------------------------------------------


def build_10k(log: S3ChunkLog) -> list[int]:
    """10,000 chunks in segments of varied sizes, two epochs; returns the segment starts."""
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


def touched(starts: list[int], start: int, stop: int) -> int:
    """How many segments (given their starts, in a 10k log) hold chunks ``[start, stop)``."""
    return sum(1 for a, b in itertools.pairwise([*starts, 10_000]) if a < stop and b > start)


def test_read_costs_at_most_three_requests_at_any_start_of_a_10k_log(ddb: Any, s3: Any, log: S3ChunkLog) -> None:
    starts = build_10k(log)
    expected = chunks(0, 10_000)
    counter = RequestCounter(ddb, s3)
    cases = [(0, 1), (5_000, 1), (5_001, None), (9_999, None), (3, 50), (5_000, 10), (6_000, 5), (9_990, None)]
    for start, limit in cases:
        reader = new_log(ddb, s3)  # a cold process each time: no cached segments or boundaries
        counter.reset()
        got = reader.read("big", start, limit if limit is not None else None)
        assert got == expected[start : None if limit is None else start + limit]
        stop = 10_000 if limit is None else start + limit
        # The head, one listing, and one GetObject per segment the range touches: never a
        # function of the log's length. Within one segment that is three requests.
        assert counter.counts == {"GetItem": 1, "ListObjectsV2": 1, "GetObject": touched(starts, start, stop)}, start
        if touched(starts, start, stop) == 1:
            assert counter.total == 3
    reader = new_log(ddb, s3)
    counter.reset()
    assert reader.read("big", 5_000, 512) == expected[5_000:5_512]
    assert counter.counts == {"GetItem": 1, "ListObjectsV2": 1, "GetObject": touched(starts, 5_000, 5_512)}


def test_request_counts_of_append_open_and_a_following_reader(ddb: Any, s3: Any) -> None:
    writer, follower = new_log(ddb, s3), new_log(ddb, s3)
    counter = RequestCounter(ddb, s3)
    assert writer.open("r1", 1) == 0
    assert counter.counts == {"UpdateItem": 1}
    for n in range(3):
        counter.reset()
        writer.append("r1", n * 4, chunks(n * 4, 4), 1)
        assert counter.counts == {"PutObject": 1, "UpdateItem": 1}
    counter.reset()
    assert follower.read("r1", 0) == chunks(0, 12)
    assert counter.total <= 3 + 2  # head, listing, three segments (in parallel)

    # The follower's poll at its last index: one GetItem when nothing is new...
    counter.reset()
    assert follower.read("r1", 12, 512) == []
    assert counter.counts == {"GetItem": 1}
    # ...and the new segment by key, without listing, when something is.
    writer.append("r1", 12, chunks(12, 5), 1)
    counter.reset()
    assert follower.read("r1", 12, 512) == chunks(12, 5)
    assert counter.counts == {"GetItem": 1, "GetObject": 1}
    # Re-reading (another client resuming the same run) costs only the head: segments are cached.
    counter.reset()
    assert follower.read("r1", 3, 512) == chunks(3, 14)
    assert counter.counts == {"GetItem": 1}
    counter.reset()
    assert writer.count("r1") == 17
    assert counter.counts == {"GetItem": 1}


def test_a_resumed_slice_opens_with_one_request_and_its_appends_stay_two(ddb: Any, s3: Any) -> None:
    first = new_log(ddb, s3)
    first.open("r1", 1)
    first.append("r1", 0, ["a"], 1)
    resumed = new_log(ddb, s3)
    counter = RequestCounter(ddb, s3)
    assert resumed.open("r1", 2) == 1
    assert counter.counts == {"UpdateItem": 1}
    counter.reset()
    resumed.append("r1", 1, ["b"], 2)
    assert counter.counts == {"PutObject": 1, "UpdateItem": 1}
    item = head_item(ddb, "r1")
    fields = {name: int(item[name]["N"]) for name in ("count", "epoch", "writer", "writer_from")}
    assert fields == {"count": 2, "epoch": 2, "writer": 2, "writer_from": 1}


# --- failures -------------------------------------------------------------------------------------


def test_a_throttled_segment_write_fails_as_storage_error_after_the_clients_retries(ddb: Any, s3: Any) -> None:
    log = new_log(ddb, s3)
    log.open("r1", 1)
    fault = Fault.s3(s3, "PutObject", "SlowDown", 503)
    with pytest.raises(StorageError):
        log.append("r1", 0, ["a"], 1)
    assert fault.attempts == 3  # the client's max_attempts, all used
    fault.armed = False
    assert log.count("r1") == 0
    assert log.append("r1", 0, ["a"], 1) == 1
    assert log.read("r1", 0) == ["a"]


@pytest.mark.parametrize("same_bytes", [True, False])
def test_a_commit_that_failed_after_its_put_can_be_retried_by_the_same_epoch(
    ddb: Any, s3: Any, same_bytes: bool
) -> None:
    log = new_log(ddb, s3)
    log.open("r1", 1)
    log.append("r1", 0, ["a"], 1)
    fault = Fault.dynamodb(ddb, "UpdateItem", "ProvisionedThroughputExceededException")
    with pytest.raises(StorageError):
        log.append("r1", 1, ["b", "c"], 1)
    fault.armed = False
    assert log.count("r1") == 1
    assert new_log(ddb, s3).read("r1", 0) == ["a"]
    # The uncommitted segment is in S3 under this epoch's key: the retry finds it (412) and commits
    # it as it is, or replaces it first when the retry carries other chunks.
    retry = ["b", "c"] if same_bytes else ["b2"]
    assert log.append("r1", 1, retry, 1) == 1 + len(retry)
    assert new_log(ddb, s3).read("r1", 0) == ["a", *retry]
    assert len(segment_keys(s3, "r1")) == 2


def test_a_commit_whose_reply_was_lost_is_reported_as_a_conflict_on_retry(ddb: Any, s3: Any) -> None:
    log = new_log(ddb, s3)
    log.open("r1", 1)
    log.append("r1", 0, ["a"], 1)
    # The commit executes, but every reply is lost (then retries fail their condition, unseen).
    fault = Fault.dynamodb(ddb, "UpdateItem", "InternalServerError", 500, lost_reply=True)
    with pytest.raises(StorageError):
        log.append("r1", 1, ["b"], 1)
    assert fault.attempts == 3
    fault.armed = False
    assert new_log(ddb, s3).read("r1", 0) == ["a", "b"]  # it did land
    with pytest.raises(LogConflictError):
        log.append("r1", 1, ["b"], 1)  # so the log no longer ends at 1: nothing is written twice
    assert log.append("r1", 2, ["c"], 1) == 3
    assert new_log(ddb, s3).read("r1", 0) == ["a", "b", "c"]


def test_timeouts_become_storage_errors_after_the_clients_retries(ddb: Any, s3: Any) -> None:
    log = new_log(ddb, s3)
    fault = Fault.timeout(ddb, "GetItem")
    with pytest.raises(StorageError, match="timeout"):
        log.count("r1")
    assert fault.attempts == 3


def test_conditional_request_conflict_409_is_retried(ddb: Any, s3: Any) -> None:
    log = new_log(ddb, s3)
    log.open("r1", 1)
    fault = Fault.s3(s3, "PutObject", "ConditionalRequestConflict", 409, times=1)  # botocore does not retry 409
    assert log.append("r1", 0, ["a"], 1) == 1
    assert fault.attempts == 1
    assert log.read("r1", 0) == ["a"]


def test_access_denied_is_not_retryable(ddb: Any, s3: Any) -> None:
    from durable_harness.aws import AwsRequestError
    from durable_harness.errors import RetryableError

    log = new_log(ddb, s3)
    log.open("r1", 1)
    log.append("r1", 0, ["a"], 1)
    fault = Fault.s3(s3, "GetObject", "AccessDenied", 403)
    with pytest.raises(AwsRequestError) as info:
        new_log(ddb, s3).read("r1", 0)
    assert not isinstance(info.value, RetryableError)
    assert fault.attempts == 1  # botocore does not retry a 403


def test_foreign_objects_under_the_prefix_are_ignored(ddb: Any, s3: Any, log: S3ChunkLog) -> None:
    log.append("r1", 0, ["a", "b"], 0)
    s3.put_object(Bucket=BUCKET, Key="runs/r1/seg/README", Body=b"not a segment")
    s3.put_object(Bucket=BUCKET, Key="runs/r1/seg/0999999999999-x", Body=b"nor this")
    assert new_log(ddb, s3).read("r1", 1) == ["b"]


def test_run_ids_that_could_escape_the_prefix_are_refused(log: S3ChunkLog) -> None:
    for bad in ("../x", "a/b", "", "-x"):
        with pytest.raises(ValueError):
            log.count(bad)
