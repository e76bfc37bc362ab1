"""The deployed chunk log: one DynamoDB item per append, large appends in S3 (D4).

Layout. An append (one group-commit flush) is one item in the runs table, next to the run record:
``pk=<run_id>, sk="c#<start>"`` with ``n`` (chunks), ``e`` (the writer's epoch), ``w`` (a random
id of the write), ``t`` (when it was sent, epoch ms), ``d`` (the chunks, one per line;
zlib-compressed as binary when that is smaller) and ``expires_at`` (TTL). An append larger than
``spill_bytes`` goes to an S3 object first and its item holds the object's key ``k`` instead of
``d``: the item stays the commit point, so an object whose item was never written is never read
(the bucket's lifecycle rule removes it). The log's count is the end of its last item. Items are
contiguous: every append starts where the previous one ended.

Writing. An append is one ``PutItem`` at its start, conditional on
``attribute_not_exists(pk) OR (n = 0 AND e <= :epoch)``: nothing can overwrite committed chunks,
so two writers can never both commit at one index. A lost reply is recognized on botocore's retry
by the write id. An item with ``n = 0`` is a *marker*: ``open`` writes one at the log's end.

Fencing, without a head item: the last item's epoch is the fence. ``open(e)`` reads the last item
(fenced if its epoch is newer) and puts its marker at the end; only an epoch at least as new may
replace a marker. A writer of an older epoch appends only at the end as it knows it, which is
either taken by the marker or by chunks written after it, so it fails; and an older ``open``
that comes later sees the newer epoch in the last item. So the last item's epoch only ever rises,
and after ``open(e)`` returns no older epoch can append.

Requests: an append is 1 PutItem (plus 1 PutObject when it spills); ``open`` 1 Query + 1 PutItem;
``count`` 1 Query; a follower's ``read`` at the end of what it read 1 Query, whether or not
anything is new; ``tail`` (a resume at the end) 1 Query. A cold ``read`` at an index it does not
know to be an append boundary adds one Query, sent in parallel. Committed appends are cached, and
the send times of the appends read tell a follower when the next one is due (``next_commit``).
"""

from __future__ import annotations

import re
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ..errors import FencedError, LogConflictError, StorageError
from ..storage.memory import check_chunks, check_read_args
from ._errors import aws_errors, error_code, error_item, translate
from ._logcache import Cadence, SegmentCache
from ._logitems import FIRST_KEY, LAST_KEY, MAX_INDEX, LogItem, decode_chunks, encode_chunks, sort_key

__all__ = ["DynamoChunkLog"]

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$")
_OPEN_ATTEMPTS = 20
_CONDITION = "attribute_not_exists(pk) OR (#n = :zero AND #e <= :e)"
_NAMES = {"#n": "n", "#e": "e"}


class DynamoChunkLog:
    """A :class:`~durable_harness.ports.ChunkLog` in the runs table (and S3 for large appends).

    ``table_name`` is the runs table; ``bucket`` and ``s3_client`` hold appends over
    ``spill_bytes`` (after compression). ``ttl_seconds`` (``None``: never) sets the items'
    ``expires_at``. ``cache_bytes`` bounds the cache of committed appends; ``max_workers`` the
    parallel requests of one read.
    """

    def __init__(
        self,
        table_name: str,
        *,
        dynamodb_client: Any,
        s3_client: Any,
        bucket: str,
        prefix: str = "runs/",
        spill_bytes: int = 16 * 1024,
        ttl_seconds: int | None = 30 * 86400,
        cache_bytes: int = 8 * 1024 * 1024,
        max_workers: int = 8,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Use ``table_name`` and ``bucket`` through the given clients; see the class docstring."""
        if not 0 < spill_bytes <= 350_000:
            raise ValueError("spill_bytes must be in (0, 350000]: a DynamoDB item holds at most 400 KB")
        self._table = table_name
        self._ddb = dynamodb_client
        self._s3 = s3_client
        self._bucket = bucket
        self._prefix = prefix
        self._spill = spill_bytes
        self._ttl = ttl_seconds
        self._clock = clock
        self._cache = SegmentCache(cache_bytes)
        self._max_workers = max_workers
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        # Per run, (epoch, end) as this object last wrote the log: an append there needs no read.
        # Dropped on any error, so a lost reply can never leave it wrong.
        self._writers: dict[str, tuple[int, int]] = {}
        self._cadence = Cadence()

    # --- the port ----------------------------------------------------------------------------------

    def open(self, run_id: str, epoch: int) -> int:
        """Take the write fence for ``epoch``; return the chunk count. Raises ``FencedError``."""
        self._check(run_id, epoch)
        self._forget(run_id)
        for _ in range(_OPEN_ATTEMPTS):
            last = self._last(run_id)
            end = self._fence_check(run_id, last, epoch)
            old = self._put(run_id, end, epoch, secrets.token_hex(8), None)
            if old is None:
                self._remember(run_id, epoch, end)
                return end
            if old.epoch > epoch:
                raise self._fenced(run_id, epoch, old.epoch)
            # An older writer appended at the end meanwhile: look again.
        raise StorageError(f"run {run_id!r}: the chunk log kept growing under an older writer; could not open it")

    def append(self, run_id: str, start: int, chunks: Sequence[str], epoch: int) -> int:
        """Append ``chunks`` at ``start`` as one item, all or nothing; returns the new count."""
        check_chunks(chunks)
        self._check(run_id, epoch)
        known = self._writers.get(run_id)
        if known is not None and epoch < known[0]:
            # Fences only rise, so what this object wrote with is a lower bound: no request needed.
            raise self._fenced(run_id, epoch, known[0])
        try:
            if known != (epoch, start):
                end = self._fence_check(run_id, self._last(run_id), epoch)
                if end != start:
                    raise LogConflictError(f"run {run_id!r}: append at {start}, but the log holds {end} chunks")
            if not chunks:
                return start  # an empty item would take the key of the next real one
            return self._append(run_id, start, tuple(chunks), epoch)
        except BaseException:
            self._forget(run_id)
            raise

    def read(self, run_id: str, start: int, limit: int | None = None) -> list[str]:
        """Chunks from absolute index ``start`` (at most ``limit``); empty past the end."""
        check_read_args(start, limit)
        self._check(run_id, 0)
        if limit == 0:
            return []
        stop = None if limit is None else start + limit
        out: list[str] = []
        pos = self._take_cached(run_id, start, stop, out)
        if stop is not None and pos >= stop:
            return out
        if pos != start or self._cache.is_boundary(run_id, pos):
            items = self._forward(run_id, pos, stop)
        else:
            # Somewhere inside an append this process has not seen: find the item holding it
            # while the items after it are read.
            holder = self._executor().submit(self._query, run_id, FIRST_KEY, sort_key(pos), False, 1)
            after = self._forward(run_id, pos + 1, stop) if pos + 1 < MAX_INDEX else []
            before = holder.result()
            if not before or before[0].end <= pos:
                if any(item.n for item in after):
                    raise StorageError(f"run {run_id!r}: chunk log has no item holding chunk {pos}")
                return out  # past the end
            items = [before[0], *after]
        self._stitch(run_id, items, pos, stop, out)
        return out

    def count(self, run_id: str) -> int:
        """The number of chunks in the run's log (0 for a log never written)."""
        self._check(run_id, 0)
        last = self._last(run_id)
        if last is None:
            return 0
        self._cache.note_boundaries(run_id, last.end)
        return last.end

    def tail(self, run_id: str, n: int) -> tuple[int, list[str]]:
        """The log's count and its last ``n`` chunks (all of them if fewer), in one read."""
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        self._check(run_id, 0)
        items: list[LogItem] = []
        got, key, page = 0, LAST_KEY, min(n + 1, 16)
        while True:
            found = self._query(run_id, FIRST_KEY, key, False, page)
            items += found
            got += sum(i.n for i in found)
            if got >= n or len(found) < page or found[-1].start == 0:
                break
            key, page = sort_key(found[-1].start - 1), min(n + 1, page * 4)
        if not items:
            return 0, []
        count = items[0].end
        self._cache.note_boundaries(run_id, count)  # a follower goes on from here
        items.reverse()
        first = max(0, count - n)
        out: list[str] = []
        self._stitch(run_id, [i for i in items if i.end > first], first, None, out)
        return count, out

    def next_commit(self, run_id: str) -> float | None:
        """When the run's next append is due (epoch seconds), from the appends this object read.

        A writer streaming a model flushes at a steady pace, and each item carries when it was
        sent: a follower that reads right after the next one is due waits far less than one
        that polls blindly. ``None`` until two appends were seen; the time may be past (the
        writer paused: the model thinks, a tool runs), which the caller treats as unknown.
        """
        return self._cadence.next_commit(run_id)

    def close(self) -> None:
        """Stop the reader's worker threads (a later read starts them again)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    # --- writing -----------------------------------------------------------------------------------

    def _append(self, run_id: str, start: int, chunks: tuple[str, ...], epoch: int) -> int:
        write_id = secrets.token_hex(8)
        encoded = encode_chunks(chunks)
        attribute: dict[str, Any] = {"d": encoded.attribute}
        if encoded.size > self._spill:
            key = f"{self._prefix}{run_id}/seg/{start:013d}-{epoch}-{write_id}.ndjson"
            with aws_errors(f"writing chunks {start}.. of run {run_id!r} to S3"):
                self._s3.put_object(Bucket=self._bucket, Key=key, Body=encoded.raw, ContentType="application/x-ndjson")
            attribute = {"k": {"S": key}}
        end = start + len(chunks)
        old = self._put(run_id, start, epoch, write_id, (len(chunks), attribute))
        if old is not None and old.write_id != write_id:
            # Not our own earlier attempt (a lost reply botocore retried): someone else's item.
            last = self._last(run_id)
            if last is not None and last.epoch > epoch:
                raise self._fenced(run_id, epoch, last.epoch)
            raise LogConflictError(f"run {run_id!r}: append at {start}, but the log already holds chunks there")
        self._remember(run_id, epoch, end)
        self._cache.put(run_id, start, chunks, len(encoded.raw))
        return end

    def _put(
        self, run_id: str, start: int, epoch: int, write_id: str, data: tuple[int, dict[str, Any]] | None
    ) -> LogItem | None:
        """Put a marker (``data`` None) or ``(n, attributes)`` at ``start``; the item in the way, if any."""
        item: dict[str, Any] = {
            "pk": {"S": run_id},
            "sk": {"S": sort_key(start)},
            "n": {"N": str(data[0] if data else 0)},
            "e": {"N": str(epoch)},
            "w": {"S": write_id},
        }
        if data is not None:
            item.update(data[1])
        item["t"] = {"N": str(int(self._clock() * 1000))}  # lets followers learn the flush cadence
        if self._ttl is not None:
            item["expires_at"] = {"N": str(int(self._clock()) + self._ttl)}
        try:
            self._ddb.put_item(
                TableName=self._table,
                Item=item,
                ConditionExpression=_CONDITION,
                ExpressionAttributeNames=_NAMES,
                ExpressionAttributeValues={":zero": {"N": "0"}, ":e": {"N": str(epoch)}},
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise translate(exc, f"appending to the chunk log of run {run_id!r}") from exc
            old = error_item(exc)
            if old is None:
                raise StorageError(f"run {run_id!r}: a chunk log write failed its condition, no item") from None
            return LogItem.of(old, run_id)
        except BotoCoreError as exc:
            raise translate(exc, f"appending to the chunk log of run {run_id!r}") from exc
        return None

    def _fence_check(self, run_id: str, last: LogItem | None, epoch: int) -> int:
        """The log's end, if ``epoch`` may write there (else ``FencedError``)."""
        if last is None:
            return 0
        if last.epoch > epoch:
            raise self._fenced(run_id, epoch, last.epoch)
        return last.end

    @staticmethod
    def _fenced(run_id: str, epoch: int, fence: int) -> FencedError:
        return FencedError(f"run {run_id!r}: epoch {epoch} is older than the log's fence {fence}")

    def _remember(self, run_id: str, epoch: int, end: int) -> None:
        with self._lock:
            self._writers[run_id] = (epoch, end)
        self._cache.note_boundaries(run_id, end)

    def _forget(self, run_id: str) -> None:
        with self._lock:
            self._writers.pop(run_id, None)

    # --- reading -----------------------------------------------------------------------------------

    def _last(self, run_id: str) -> LogItem | None:
        found = self._query(run_id, FIRST_KEY, LAST_KEY, False, 1)
        return found[0] if found else None

    def _query(self, run_id: str, low: str, high: str, forward: bool, limit: int | None) -> list[LogItem]:
        """Items with keys in ``[low, high]``, in order (at most ``limit``), strongly consistent."""
        request: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "pk = :pk AND sk BETWEEN :low AND :high",
            "ExpressionAttributeValues": {":pk": {"S": run_id}, ":low": {"S": low}, ":high": {"S": high}},
            "ScanIndexForward": forward,
            "ConsistentRead": True,
        }
        if limit is not None:
            request["Limit"] = limit
        items: list[LogItem] = []
        while True:
            with aws_errors(f"reading the chunk log of run {run_id!r}"):
                page = self._ddb.query(**request)
            items += [LogItem.of(item, run_id) for item in page.get("Items", ())]
            last_key = page.get("LastEvaluatedKey")
            if not last_key or (limit is not None and len(items) >= limit):
                return items
            request["ExclusiveStartKey"] = last_key
            if limit is not None:
                request["Limit"] = limit - len(items)

    def _forward(self, run_id: str, pos: int, stop: int | None) -> list[LogItem]:
        """The items from the one starting at ``pos`` on, enough to reach ``stop`` (all: None)."""
        if stop is None:
            return self._query(run_id, sort_key(pos), LAST_KEY, True, None)
        items: list[LogItem] = []
        key, got = sort_key(pos), 0
        while got < stop - pos:
            # Each item holds at least one chunk (only the last may be a marker), so this many
            # items always suffice; the cache keeps whatever is read beyond ``stop``.
            want = min(stop - pos - got + 1, 1000)
            page = self._query(run_id, key, LAST_KEY, True, want)
            items += page
            got += sum(i.n for i in page)
            if len(page) < want or page[-1].n == 0:
                break
            key = sort_key(page[-1].end)
        return items

    def _take_cached(self, run_id: str, pos: int, stop: int | None, out: list[str]) -> int:
        while stop is None or pos < stop:
            found = self._cache.containing(run_id, pos)
            if found is None:
                break
            seg_start, chunks = found
            end = seg_start + len(chunks) if stop is None else min(stop, seg_start + len(chunks))
            out.extend(chunks[pos - seg_start : end - seg_start])
            pos = end
        return pos

    def _stitch(self, run_id: str, items: list[LogItem], pos: int, stop: int | None, out: list[str]) -> None:
        """Append the chunks ``[pos, stop)`` of consecutive ``items`` to ``out``, fetching spills."""
        items = [i for i in items if i.n]
        if not items:
            return
        spilled = [i for i in items if i.chunks is None]
        if len(spilled) > 1:
            fetched = dict(zip(spilled, self._executor().map(lambda i: self._fetch(run_id, i), spilled), strict=True))
        else:
            fetched = {i: self._fetch(run_id, i) for i in spilled}
        self._cadence.note(run_id, [i.at for i in items if i.at is not None])
        expected = items[0].start
        if expected > pos:
            raise StorageError(f"run {run_id!r}: chunk log has no item holding chunk {pos}")
        for item in items:
            if item.start != expected:
                raise StorageError(f"run {run_id!r}: chunk log has a gap or overlap at index {expected}")
            chunks = item.chunks if item.chunks is not None else fetched[item]
            self._cache.put(run_id, item.start, chunks, item.size or sum(map(len, chunks)))
            low = max(pos, item.start) - item.start
            high = item.n if stop is None else min(stop, item.end) - item.start
            if high > low:
                out.extend(chunks[low:high])
            expected = item.end

    def _fetch(self, run_id: str, item: LogItem) -> tuple[str, ...]:
        """A spilled append's chunks, from its S3 object (cached: committed appends never change)."""
        cached = self._cache.containing(run_id, item.start)
        if cached is not None and cached[0] == item.start:
            return cached[1]
        assert item.s3_key is not None
        try:
            data = self._s3.get_object(Bucket=self._bucket, Key=item.s3_key)["Body"].read()
        except ClientError as exc:
            if error_code(exc) in ("NoSuchKey", "404"):
                raise StorageError(f"run {run_id!r}: committed chunks {item.s3_key!r} are missing") from None
            raise translate(exc, f"reading chunks {item.s3_key!r}") from exc
        except BotoCoreError as exc:
            raise translate(exc, f"reading chunks {item.s3_key!r}") from exc
        return decode_chunks(data, item.n, repr(item.s3_key))

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._max_workers, thread_name_prefix="chunk-log")
            return self._pool

    # --- names -------------------------------------------------------------------------------------

    def _check(self, run_id: str, epoch: int) -> None:
        # The id becomes part of an S3 key: refuse anything that could escape the run's prefix.
        if not _RUN_ID.fullmatch(run_id):
            raise ValueError(f"invalid run id for the chunk log: {run_id!r}")
        if not 0 <= epoch < MAX_INDEX:
            raise ValueError(f"epoch must be in [0, {MAX_INDEX}), got {epoch}")
