"""DynamoChunkLog's S3 side: sealed segments (the log of record), the segment index, reads from
segments when items are gone, crashes mid-seal."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from durable_harness.aws import DynamoCheckpointStore
from durable_harness.aws.chunklog.log import record_segment
from durable_harness.errors import FatalError, FencedError, FormatVersionError, StorageError
from durable_harness.ids import new_run_id
from durable_harness.ports import StoredRun

from tests.aws.conftest import BUCKET, TABLE, Fault, RequestCounter, new_log, set_format

FINISH = '{"type":"finish","finishReason":"stop"}'


def chunks(first: int, n: int, tag: str = "t") -> list[str]:
    return [f'{{"type":"text-delta","id":"{tag}","delta":"{i}"}}' for i in range(first, first + n)]


def log_items(ddb: Any, run_id: str) -> dict[str, dict[str, Any]]:
    found = ddb.query(
        TableName=TABLE,
        KeyConditionExpression="pk = :p AND begins_with(sk, :c)",
        ExpressionAttributeValues={":p": {"S": run_id}, ":c": {"S": "c#"}},
    )["Items"]
    return {item["sk"]["S"]: item for item in found}


def index_of(ddb: Any, run_id: str) -> tuple[int, list[int]]:
    """``(sealed, segment ends)`` of the run's (only) segment index."""
    [index] = [item for key, item in log_items(ddb, run_id).items() if key.endswith("#~")]
    return int(index["sealed"]["N"]), [int(e["N"]) for e in index.get("ends", {}).get("L", [])]


def segments(s3: Any, run_id: str) -> dict[str, list[str]]:
    """The run's sealed segment objects: key -> chunks."""
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=f"runs/{run_id}/").get("Contents", [])
    keys = [o["Key"] for o in listed if "/seg/" in o["Key"] and o["Key"].endswith(".ndjson")]
    return {k: s3.get_object(Bucket=BUCKET, Key=k)["Body"].read().decode().splitlines() for k in keys}


def delete_chunk_items(ddb: Any, run_id: str, keep: int = 0) -> None:
    """Delete the run's append items (all but the last ``keep``), as if they had expired."""
    keys = sorted(k for k in log_items(ddb, run_id) if not k.endswith("#~"))
    for key in keys[: len(keys) - keep]:
        ddb.delete_item(TableName=TABLE, Key={"pk": {"S": run_id}, "sk": {"S": key}})


def every_read(ddb: Any, s3: Any, run_id: str, expected: list[str]) -> None:
    """Cold readers read ``expected`` from every start, with and without limits, and its tail."""
    for start in range(len(expected) + 2):
        for limit in (None, 1, 3):
            reader = new_log(ddb, s3)
            stop = None if limit is None else start + limit
            assert reader.read(run_id, start, limit) == expected[start:stop], (start, limit)
            reader.close()
    for n in (0, 1, 4, len(expected) + 3):
        reader = new_log(ddb, s3)
        assert reader.tail(run_id, n) == (len(expected), expected[max(0, len(expected) - n) :])
        assert reader.count(run_id) == len(expected)
        reader.close()


def created(ddb: Any) -> str:
    """A run created as deployed: its record and the empty log of its incarnation."""
    run_id = new_run_id()
    DynamoCheckpointStore(TABLE, client=ddb).create(StoredRun(run_id=run_id, state="{}", status="running"))
    return run_id


# --- sealing --------------------------------------------------------------------------------------


def test_the_runs_finish_seals_its_log_into_one_segment_and_records_it(ddb: Any, s3: Any) -> None:
    run_id = created(ddb)
    log = new_log(ddb, s3)
    counter = RequestCounter(ddb, s3)
    count = log.open(run_id, 1)
    for size in (3, 1, 7, 2):
        counter.reset()
        count = log.append(run_id, count, chunks(count, size), 1)
        assert counter.total == 1  # the hot path: one PutItem per flush, nothing sealed yet
    assert segments(s3, run_id) == {} and index_of(ddb, run_id) == (0, [])
    expected = [*chunks(0, count), FINISH]
    counter.reset()
    assert log.append(run_id, count, [FINISH], 1) == count + 1
    # The seal is a copy of what this writer wrote: no read, one object, one index update.
    assert counter.counts == {"PutItem": 1, "PutObject": 1, "UpdateItem": 1}
    [(key, body)] = segments(s3, run_id).items()
    assert key.endswith(f"/seg/{0:013d}-{len(expected):013d}.ndjson") and body == expected
    assert index_of(ddb, run_id) == (len(expected), [len(expected)])
    every_read(ddb, s3, run_id, expected)


def test_the_unsealed_tail_is_sealed_when_it_passes_the_size_bound(ddb: Any, s3: Any) -> None:
    run_id = created(ddb)
    log = new_log(ddb, s3, seal_chunks=10)
    count = log.open(run_id, 1)
    for size in (4, 4, 4, 1, 9, 3, 6):
        count = log.append(run_id, count, chunks(count, size), 1)
    sealed, ends = index_of(ddb, run_id)
    assert ends == [12, 22] and sealed == 22  # contiguous segments, at append boundaries
    assert count - sealed < 10
    by_start = sorted(segments(s3, run_id).items())  # keys name their ranges, zero-padded
    assert [c for _, body in by_start for c in body] == chunks(0, 22)
    every_read(ddb, s3, run_id, chunks(0, count))
    # By bytes too: what this writer appended since the last seal.
    other = created(ddb)
    by_bytes = new_log(ddb, s3, seal_bytes=200)
    count = by_bytes.open(other, 1)
    for _ in range(4):
        count = by_bytes.append(other, count, chunks(count, 2), 1)  # ~90 bytes each
    assert index_of(ddb, other)[0] == 6


def test_a_new_writer_seals_what_an_earlier_one_wrote_from_the_items(ddb: Any, s3: Any) -> None:
    run_id = created(ddb)
    first = new_log(ddb, s3)
    count = first.open(run_id, 1)
    count = first.append(run_id, count, chunks(0, 5), 1)  # then this slice ends (time slice)
    second = new_log(ddb, s3)
    assert second.open(run_id, 2) == 5
    second.append(run_id, 5, [*chunks(5, 2), FINISH], 2)
    assert index_of(ddb, run_id) == (8, [8])
    assert list(segments(s3, run_id).values()) == [[*chunks(0, 7), FINISH]]


def test_reads_fall_back_to_the_segments_for_chunks_whose_items_are_gone(ddb: Any, s3: Any) -> None:
    run_id = created(ddb)
    log = new_log(ddb, s3, seal_chunks=6)
    count = log.open(run_id, 1)
    for size in (2, 5, 1, 3, 4, 2):
        count = log.append(run_id, count, chunks(count, size), 1)
    sealed, _ = index_of(ddb, run_id)
    assert 0 < sealed < count  # some sealed, a tail that is not
    expected = chunks(0, count)
    delete_chunk_items(ddb, run_id, keep=1)  # every sealed append's item gone; the last one stays
    every_read(ddb, s3, run_id, expected)
    # Everything sealed, every item gone: the segments alone are the log.
    log.append(run_id, count, [FINISH], 1)
    delete_chunk_items(ddb, run_id)
    every_read(ddb, s3, run_id, [*expected, FINISH])


def test_a_chunk_neither_an_item_nor_a_segment_holds_is_an_error_not_a_gap(ddb: Any, s3: Any) -> None:
    run_id = created(ddb)
    log = new_log(ddb, s3)
    count = log.open(run_id, 1)
    for size in (2, 3, 4):
        count = log.append(run_id, count, chunks(count, size), 1)
    delete_chunk_items(ddb, run_id, keep=1)  # nothing sealed: chunks 0-4 are lost
    reader = new_log(ddb, s3)
    with pytest.raises(StorageError, match="no item or segment"):
        reader.read(run_id, 0)
    with pytest.raises(StorageError, match="no item or segment"):
        reader.tail(run_id, 8)
    assert reader.tail(run_id, 4) == (9, chunks(5, 4))  # what is there is still served


def test_a_crash_between_the_segment_and_its_record_is_sealed_again(ddb: Any, s3: Any, caplog: Any) -> None:
    run_id = created(ddb)
    log = new_log(ddb, s3, seal_chunks=5)
    count = log.open(run_id, 1)
    fault = Fault(ddb, "UpdateItem", 500, b'{"__type":"InternalServerError"}', "application/x-amz-json-1.0")
    with caplog.at_level(logging.WARNING):
        count = log.append(run_id, count, chunks(0, 6), 1)  # committed; its seal fails after the PUT
    assert count == 6 and "could not seal" in caplog.text
    orphan = list(segments(s3, run_id))
    assert len(orphan) == 1 and index_of(ddb, run_id) == (0, [])  # an object nobody points at
    assert new_log(ddb, s3).read(run_id, 0) == chunks(0, 6)  # readers do not care
    fault.armed = False
    count = log.append(run_id, count, [*chunks(6, 2), FINISH], 1)
    assert index_of(ddb, run_id) == (9, [9])
    assert segments(s3, run_id)[orphan[0].replace(f"{6:013d}", f"{9:013d}")] == [*chunks(0, 8), FINISH]
    # A seal whose record landed but whose reply was lost is recognised on botocore's retry.
    other = created(ddb)
    count = log.open(other, 1)
    Fault(ddb, "UpdateItem", 500, b'{"__type":"InternalServerError"}', "application/x-amz-json-1.0",
          times=1, lost_reply=True)  # fmt: skip
    log.append(other, count, [*chunks(0, 3), FINISH], 1)
    assert index_of(ddb, other) == (4, [4])


def test_a_seal_record_lands_only_where_the_index_ends(ddb: Any, s3: Any) -> None:
    """Two sealers of one log (a writer and the one that fenced it off, say) cannot both record:
    each record is conditional on the index ending where its segment starts."""
    run_id = created(ddb)
    slow, fast = new_log(ddb, s3), new_log(ddb, s3)
    slow.open(run_id, 1)
    slow.append(run_id, 0, chunks(0, 4), 1)
    fast.open(run_id, 2)
    fast.append(run_id, 4, [*chunks(4, 2), FINISH], 2)  # seals [0, 7), reading the first four chunks
    with pytest.raises(FencedError):
        slow.append(run_id, 4, chunks(4, 1), 1)
    [gen] = {key.split("#")[1] for key in log_items(ddb, run_id)}
    assert record_segment(ddb, TABLE, run_id, gen, 0, 4, None) == 7  # what the slow writer would have sealed: too late
    assert record_segment(ddb, TABLE, run_id, gen, 3, 5, None) == 7
    assert index_of(ddb, run_id) == (7, [7])
    assert record_segment(ddb, TABLE, run_id, gen, 7, 9, None) == 9  # the next segment goes after it
    assert index_of(ddb, run_id) == (9, [7, 9])


# --- the format version ---------------------------------------------------------------------------


@pytest.mark.parametrize("found", [None, "2"], ids=["no-format", "another-format"])
def test_a_log_of_another_storage_format_is_refused_saying_what_to_do(ddb: Any, s3: Any, found: str | None) -> None:
    """The segment index is the log's head: it carries the layout's format version whether the run
    record made it or the first seal did, and a reader refuses a log of another format (or none)."""
    bare = new_run_id()  # a log of no run record: its index comes with its first seal
    log = new_log(ddb, s3)
    assert log.open(bare, 1) == 0
    log.append(bare, 0, [*chunks(0, 2), FINISH], 1)
    run_id = created(ddb)
    log.open(run_id, 1)
    log.append(run_id, 0, [*chunks(0, 3), FINISH], 1)
    for run in (bare, run_id):
        [index] = [k for k in log_items(ddb, run) if k.endswith("#~")]
        assert log_items(ddb, run)[index]["format"] == {"N": "1"}
    key = {"pk": {"S": run_id}, "sk": {"S": index}}
    set_format(ddb, key, found)
    before = log_items(ddb, run_id)
    calls = {
        "read": lambda reader: reader.read(run_id, 0),
        "tail": lambda reader: reader.tail(run_id, 2),
        "count": lambda reader: reader.count(run_id),
        "open": lambda reader: reader.open(run_id, 2),
    }
    for name, call in calls.items():
        reader = new_log(ddb, s3)
        with pytest.raises(
            FormatVersionError, match=r"log of run .* storage format .*reads format 1.*release"
        ) as caught:
            call(reader)
        assert isinstance(caught.value, FatalError), name
        reader.close()
    assert log_items(ddb, run_id) == before  # nothing was written
