"""The deployed chunk log: a DynamoDB hot tail, sealed into S3 segments (the log of record) (D4).

Layout (:class:`..table.Append`, :mod:`.items`, :mod:`.segments`). An append (one group-commit
flush) is one item in the runs table, next to the run record (``sk="c#<gen>#<start>"``); one over
``spill_bytes`` goes to an S3 object first and its item holds the key instead: the item stays the
commit point. The log's count is the end of its last item; items are contiguous.

Incarnations. ``<gen>`` names the incarnation of the run id: the run record's creation writes the
empty log of its generation (the segment index ``c#<gen>#~``, sealed 0) in the same transaction,
and a later incarnation's keys sort after an earlier one's. Readers and writers take the top of
the run's ``c#`` keys as the current log, so a run id used again after its record expired starts
with an empty log and never sees the old one's items, which stay (with their TTL) below it.

Sealing. The writer copies the committed chunks into S3 segments, one ``PutObject`` and one
conditional ``UpdateItem`` of the segment index per seal: when it appends the run's terminal
``finish``, and when the unsealed tail passes ``seal_chunks`` chunks or ``seal_bytes`` bytes (what
it wrote). Nothing per flush: the hot path stays one ``PutItem``. The index's conditional update
(``sealed = :a`` before, ``:b`` after) makes a seal that lost a race (or whose reply was lost)
change nothing. A crash between the two writes leaves an unrecorded object; the next seal writes
the same key again and records it. A seal that fails is only logged: the items stay readable, and
the next seal covers what this one missed.

Reading prefers the items (one Query reads any stretch near the end) and falls back to the sealed
segments for whatever has no item (items deleted).
Hot items carry the same TTL as the run's S3 objects (``ttl_seconds``: the runtime passes the
chunk retention), so they outlive the record: dropping them earlier would save little (a run's
items are a few hundred KB) and would lose a tail whose seal failed.

Fencing, without a head item: the last item's epoch is the fence. ``open(e)`` reads the last item
(fenced if its epoch is newer) and puts a marker (``n=0``) at the log's end; an append is a
``PutItem`` conditional on ``attribute_not_exists(pk) OR (n = 0 AND e <= :epoch)``, so nothing
overwrites committed chunks, and after ``open(e)`` returns no older epoch can append. A lost reply
is recognized on botocore's retry by the write id.

Requests: an append is 1 PutItem (plus 1 PutObject when it spills); ``open`` 1 Query + 1 PutItem
(only the PutItem for a log whose creation this object was told of, :meth:`DynamoChunkLog.note_fresh`);
``count`` and ``tail`` 1 Query; a follower's ``read`` at the end of what it read 1 Query, whether
or not anything is new. A cold ``read`` adds the Query that finds the current generation.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ...chunks.base import BaseChunkLog
from ...errors import HarnessError, LogConflictError, StorageError
from ...lru import LRU
from .._errors import error_code, error_item, translate
from ..table import EXPIRES_AT, FORMAT, PK, Append, Index, item_key
from .items import LOG_FORMAT, MAX_INDEX, LogItem, append_item, decode_item, encode_chunks, generation, index_key
from .reader import LogReader, NewGeneration, Top
from .segments import Segments

__all__ = ["DynamoChunkLog"]

logger = logging.getLogger(__name__)

_OPEN_ATTEMPTS = 20
_CONDITION = f"attribute_not_exists({PK}) OR (#n = :zero AND #e <= :e)"
_NAMES = {"#n": Append.N, "#e": Append.EPOCH}
_SEAL_NAMES = {"#s": Index.SEALED, "#ends": Index.ENDS, "#x": EXPIRES_AT, "#f": FORMAT}
_FINISH = '{"type":"finish"'
_FRESH_RUNS = 64


@dataclass(frozen=True)
class _Writer:
    """A log as this object last wrote it: an append at ``end`` by ``epoch`` needs no read."""

    gen: str
    epoch: int
    end: int
    sealed: int
    unsealed: int = 0
    """Bytes this object appended since ``sealed`` (what it knows of the unsealed tail)."""
    retry_at: int = 0
    """After a failed seal, the next size-triggered one waits for this count."""


class DynamoChunkLog(BaseChunkLog):
    """A :class:`~durable_harness.ports.ChunkLog` in the runs table, sealed into S3.

    ``table_name`` is the runs table; ``bucket`` and ``s3_client`` hold the sealed segments and
    appends over ``spill_bytes`` (after compression). ``seal_chunks`` and ``seal_bytes`` bound the
    unsealed tail. ``ttl_seconds`` (``None``: never) sets the items' ``expires_at``.
    ``cache_bytes`` bounds the cache of committed chunks; ``max_workers`` the parallel requests
    of one read.
    """

    max_epoch = MAX_INDEX

    def __init__(
        self,
        table_name: str,
        *,
        dynamodb_client: Any,
        s3_client: Any,
        bucket: str,
        prefix: str = "runs/",
        spill_bytes: int = 16 * 1024,
        seal_chunks: int = 20_000,
        seal_bytes: int = 4 * 1024 * 1024,
        ttl_seconds: int | None = 30 * 86400,
        cache_bytes: int = 8 * 1024 * 1024,
        max_workers: int = 8,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Use ``table_name`` and ``bucket`` through the given clients; see the class docstring."""
        if not 0 < spill_bytes <= 350_000:
            raise ValueError("spill_bytes must be in (0, 350000]: a DynamoDB item holds at most 400 KB")
        if seal_chunks < 1 or seal_bytes < 1:
            raise ValueError("seal_chunks and seal_bytes must be positive")
        self._table = table_name
        self._ddb = dynamodb_client
        self._spill = spill_bytes
        self._seal_chunks, self._seal_bytes = seal_chunks, seal_bytes
        self._ttl = ttl_seconds
        self._clock = clock
        self._segments = Segments(s3_client=s3_client, bucket=bucket, prefix=prefix)
        self._r = LogReader(dynamodb_client=dynamodb_client, table_name=table_name, segments=self._segments,
                            cache_bytes=cache_bytes, max_workers=max_workers, clock=clock)  # fmt: skip
        self._lock = threading.Lock()
        # Per run, the log as this object last wrote it. Dropped on any error, so a lost reply can
        # never leave it wrong.
        self._writers: dict[str, _Writer] = {}
        # Runs whose incarnation this process just created, with its (empty) log: see note_fresh.
        self._fresh: LRU[str, str] = LRU(_FRESH_RUNS)
        # Runs whose last append had to be retried (throttled, or failed and sent again): see retried.
        self._retried: set[str] = set()

    # --- the port ----------------------------------------------------------------------------------

    def _open(self, run_id: str, epoch: int) -> int:
        self._forget(run_id)
        fresh = self._fresh.pop(run_id)
        for _ in range(_OPEN_ATTEMPTS):
            # A log this process created empty needs no look at its top: the conditional marker
            # below is the fence all the same, and a log that is not empty after all fails it.
            writer = _Writer(fresh, epoch, 0, 0) if fresh else self._writer_at(run_id, epoch)
            fresh = None
            old = self._put(run_id, writer.gen, writer.end, epoch, secrets.token_hex(8), None)
            if old is None:
                self._remember(run_id, writer)
                return writer.end
            self._check_fence(run_id, epoch, old.epoch)
            # An older writer appended at the end meanwhile: look again.
        raise StorageError(f"run {run_id!r}: the chunk log kept growing under an older writer; could not open it")

    def _append(self, run_id: str, start: int, chunks: Sequence[str], epoch: int) -> int:
        writer = self._writers.get(run_id)
        # Fences only rise, so what this object wrote with is a lower bound: no request needed.
        self._check_fence(run_id, epoch, writer.epoch if writer is not None else 0)
        try:
            if writer is None or (writer.epoch, writer.end) != (epoch, start):
                writer = self._writer_at(run_id, epoch)
                self._check_start(run_id, start, writer.end)
            if not chunks:
                return start  # an empty item would take the key of the next real one
            return self._put_chunks(run_id, writer, tuple(chunks))
        except BaseException:
            self._forget(run_id)
            raise

    def _read(self, run_id: str, start: int, limit: int | None) -> list[str]:
        return self._r.read(run_id, start, None if limit is None else start + limit)

    def _count(self, run_id: str) -> int:
        return self._r.tail(run_id, 0)[0]

    def _tail(self, run_id: str, n: int) -> tuple[int, list[str]]:
        return self._r.tail(run_id, n)  # in one Query

    def note_fresh(self, run_id: str, gen: str) -> None:
        """The run's incarnation ``gen`` was just created here, with its empty log (the run record's
        creation writes both in one transaction): the next :meth:`open` starts from there."""
        self._fresh.put(run_id, gen)
        self._r.learn(run_id, gen)

    def next_commit(self, run_id: str) -> float | None:
        """When the run's next append is due (epoch seconds), from the appends this object read.

        A writer streaming a model flushes at a steady pace, and each item carries when it was
        sent: a follower that reads right after the next one is due waits far less than one
        that polls blindly. ``None`` until two appends were seen; the time may be past (the
        writer paused: the model thinks, a tool runs), which the caller treats as unknown.
        """
        return self._r.next_commit(run_id)

    def retried(self, run_id: str) -> bool:
        """Whether the run's last append by this object had to be retried: DynamoDB throttled it
        (or failed and the client asked again). The chunk writer backs off its pace on it."""
        with self._lock:
            return run_id in self._retried

    def close(self) -> None:
        """Stop the reader's worker threads (a later read starts them again)."""
        self._r.close()

    # --- writing -----------------------------------------------------------------------------------

    def _put_chunks(self, run_id: str, writer: _Writer, chunks: tuple[str, ...]) -> int:
        start, epoch, gen = writer.end, writer.epoch, writer.gen
        write_id = secrets.token_hex(8)
        encoded = encode_chunks(chunks)
        attribute: dict[str, Any] = {Append.DATA: encoded.attribute}
        if encoded.size > self._spill:
            key = self._segments.spill_key(run_id, gen, start, epoch, write_id)
            self._segments.put(key, encoded.raw, run_id)
            attribute = {Append.SPILL_KEY: {"S": key}}
        old = self._put(run_id, gen, start, epoch, write_id, (len(chunks), attribute))
        if old is not None and old.write_id != write_id:
            # Not our own earlier attempt (a lost reply botocore retried): someone else's item.
            self._writer_at(run_id, epoch)  # raises FencedError when a newer epoch wrote it
            raise LogConflictError(f"run {run_id!r}: append at {start}, but the log already holds chunks there")
        end = start + len(chunks)
        self._r.note_written(run_id, gen, start, chunks, len(encoded.raw))
        writer = replace(writer, end=end, unsealed=writer.unsealed + len(encoded.raw))
        self._remember(run_id, writer)
        if chunks[-1].startswith(_FINISH) or (
            end >= writer.retry_at and (end - writer.sealed >= self._seal_chunks or writer.unsealed >= self._seal_bytes)
        ):
            self._seal_quietly(run_id, writer)
        return end

    def _put(
        self, run_id: str, gen: str, start: int, epoch: int, write_id: str, data: tuple[int, dict[str, Any]] | None
    ) -> LogItem | None:
        """Put a marker (``data`` None) or ``(n, attributes)`` at ``start``; the item in the way, if any."""
        n, attributes = data or (0, None)
        sent_ms, expires_at = int(self._clock() * 1000), self._expiry()
        item = append_item(run_id, gen, start, epoch, write_id, n=n, data=attributes, sent_ms=sent_ms,
                           expires_at=expires_at)  # fmt: skip
        try:
            response = self._ddb.put_item(
                TableName=self._table,
                Item=item,
                ConditionExpression=_CONDITION,
                ExpressionAttributeNames=_NAMES,
                ExpressionAttributeValues={":zero": {"N": "0"}, ":e": {"N": str(epoch)}},
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
            self._note_retries(run_id, response)
        except ClientError as exc:
            self._note_retries(run_id, exc.response)
            if error_code(exc) != "ConditionalCheckFailedException":
                raise translate(exc, f"appending to the chunk log of run {run_id!r}") from exc
            old = error_item(exc)
            found = decode_item(old, run_id) if old else None
            if not isinstance(found, LogItem):
                raise StorageError(f"run {run_id!r}: a chunk log write failed its condition, no item") from None
            return found
        except BotoCoreError as exc:
            raise translate(exc, f"appending to the chunk log of run {run_id!r}") from exc
        return None

    def _note_retries(self, run_id: str, response: Any) -> None:
        retries = (response.get("ResponseMetadata") or {}).get("RetryAttempts") if isinstance(response, dict) else None
        with self._lock:
            if isinstance(retries, int) and retries > 0:
                if len(self._retried) >= _FRESH_RUNS * 16:  # runs that ended strained: forget them
                    self._retried.clear()
                self._retried.add(run_id)
            else:
                self._retried.discard(run_id)

    def _seal_quietly(self, run_id: str, writer: _Writer) -> None:
        """Seal the writer's unsealed tail; a failure is logged (the items still hold it)."""
        try:
            sealed = self._seal(run_id, writer.gen, writer.sealed, writer.end)
        except (HarnessError, NewGeneration) as exc:
            logger.warning("run %s: could not seal chunks %d-%d: %s", run_id, writer.sealed, writer.end, exc)
            sealed, retry_at = writer.sealed, writer.end + max(1, self._seal_chunks // 8)
        else:
            retry_at = 0
        with self._lock:
            if self._writers.get(run_id) == writer:  # not replaced meanwhile
                self._writers[run_id] = replace(
                    writer, sealed=max(sealed, writer.sealed), unsealed=0, retry_at=retry_at
                )

    def _seal(self, run_id: str, gen: str, start: int, end: int) -> int:
        """Copy chunks ``[start, end)`` into a segment and record it; returns the sealed count."""
        raw = "".join(chunk + "\n" for chunk in self._r.chunks(run_id, gen, start, end)).encode("utf-8")
        self._segments.put(self._segments.segment_key(run_id, gen, start, end), raw, run_id)
        return record_segment(self._ddb, self._table, run_id, gen, start, end, self._expiry())

    def _writer_at(self, run_id: str, epoch: int) -> _Writer:
        """The log as its top says, for ``epoch`` to write at its end (else ``FencedError``)."""
        top = self._r.top(run_id, 0) or Top(generation(None, None), None, [])
        last = top.items[0] if top.items else None
        self._check_fence(run_id, epoch, last.epoch if last is not None else 0)
        return _Writer(top.gen, epoch, top.end, top.index.sealed if top.index else 0)

    def _remember(self, run_id: str, writer: _Writer) -> None:
        with self._lock:
            self._writers[run_id] = writer
        self._r.note_end(run_id, writer.gen, writer.end)

    def _forget(self, run_id: str) -> None:
        with self._lock:
            self._writers.pop(run_id, None)

    def _expiry(self) -> int | None:
        return None if self._ttl is None else int(self._clock()) + self._ttl


def record_segment(ddb: Any, table: str, run_id: str, gen: str, start: int, end: int, expires_at: int | None) -> int:
    """Record the sealed segment ``[start, end)`` after the index's last; returns what is sealed now.

    Conditional on the index ending at ``start``: when another sealer got there first (or this one
    did, and the reply was lost) nothing changes and the index's end comes back.
    """
    update = "SET #s = :end, #ends = list_append(if_not_exists(#ends, :nil), :new), #f = if_not_exists(#f, :f)"
    values: dict[str, Any] = {
        ":start": {"N": str(start)}, ":end": {"N": str(end)}, ":nil": {"L": []}, ":new": {"L": [{"N": str(end)}]},
        ":f": {"N": str(LOG_FORMAT)},
    }  # fmt: skip
    if expires_at is not None:
        update += ", #x = :x"
        values[":x"] = {"N": str(expires_at)}
    # Created with the run record at 0; a log of no record gets its index (and format) with its first seal.
    condition = "#s = :start" if start else "attribute_not_exists(#s) OR #s = :start"
    names = {k: v for k, v in _SEAL_NAMES.items() if k in update + condition}
    try:
        ddb.update_item(
            TableName=table, Key=item_key(run_id, index_key(gen)), UpdateExpression=update,
            ConditionExpression=condition, ExpressionAttributeNames=names, ExpressionAttributeValues=values,
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )  # fmt: skip
    except ClientError as exc:
        if error_code(exc) != "ConditionalCheckFailedException":
            raise translate(exc, f"recording a segment of run {run_id!r}") from exc
        return int((error_item(exc) or {}).get(Index.SEALED, {}).get("N", "0"))
    except BotoCoreError as exc:
        raise translate(exc, f"recording a segment of run {run_id!r}") from exc
    return end
