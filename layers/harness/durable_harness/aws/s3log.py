"""The deployed chunk log: immutable segments in S3, a fenced head item in DynamoDB (D1, D4).

Layout. Each append is one S3 object (a *segment*: the appended chunks, one per line) at
``<prefix><run_id>/<inc>/seg/<inverted start>-<inverted epoch>`` (see :mod:`._segments`). The
*head* is the item ``pk=<run_id>, sk="log"`` in the runs table: ``count`` (committed chunks),
``epoch`` (the fence), ``writer`` (the epoch of the last commit) and ``writer_from`` (where that
epoch's commits begin), ``inc``, plus ``expires_at`` for TTL. The head stays this small however
long the run gets.

Incarnations. A run id can be used again after its record expired; the old run's segments are
still in the bucket then (they outlive the record, see :mod:`.dynamodb`). Creating the record
writes a fresh head whose ``inc`` names the new incarnation, and segments live under it, so the
new run's log starts empty and never meets the old one's segments. A head without ``inc`` (one
that ``open`` created, or one from before incarnations existed) keeps its segments directly
under ``<prefix><run_id>/seg/``.

Writing. ``open`` raises the fence with one conditional UpdateItem. An append is one PutObject
with ``If-None-Match: *`` and then one UpdateItem ``SET count = :end`` conditional on
``epoch = :epoch AND count = :start``: the conditional update is the commit point, so a writer
fenced off between the two leaves an orphan object that is never visible. (An append by an epoch
that never opened first takes the fence, one more conditional write, *before* its PutObject.)

Why readers can tell orphans from committed segments without any list of them: a writer puts a
segment at ``start`` only while holding the fence and only at a ``start`` the count has actually
had since then. So every key's start is a real segment boundary (or the uncommitted end), and if
two keys share a start, the committed one was written under a fence at least as new as the
orphan's: it has the higher epoch. Listing from the inverted index of chunk ``i`` therefore
returns the segment holding ``i`` first. One retry of the same epoch at the same start finds its
own earlier orphan (412): same bytes are committed as they are, different bytes replace it in
place with ``If-Match`` (only that epoch ever writes that key, and it was never committed).

Request costs (measured in tests/aws/test_s3log.py):

* append after ``open``: 1 PutObject + 1 UpdateItem; ``open``: 1 UpdateItem; ``count``: 1 GetItem.
* ``read`` at any start: 1 consistent GetItem of the head + 1 ListObjectsV2 (small ``MaxKeys``) +
  1 GetObject per segment in the range, fetched in parallel; never a function of the log's length.
* a follower's poll at its last index: 1 GetItem when nothing is new; otherwise GetObject of the
  next segment directly (its key follows from the head's ``writer``), no listing. Committed
  segments are immutable, so they are cached (LRU) and never fetched twice by this process.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ..errors import FencedError, LogConflictError, StorageError
from ..storage.memory import check_chunks, check_read_args
from ._errors import aws_errors, error_code, http_status, translate
from ._loghead import ConditionFailed, Head, LogHead, n
from ._segments import MAX_INDEX, SegmentCache, list_start_after, parse_segment_name, segment_name

__all__ = ["S3ChunkLog"]

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$")
_PUT_ATTEMPTS = 4
_DIRECT_GETS = 4  # a follower fetches up to this many segments by key before listing instead


class S3ChunkLog:
    """A :class:`~durable_harness.ports.ChunkLog` on S3 (segments) and DynamoDB (fenced head).

    ``table_name`` is the runs table (the head shares it under ``sk="log"``). ``ttl_seconds``
    (``None``: never) sets the head's ``expires_at``; segments expire by the bucket's lifecycle
    rule. ``cache_bytes`` bounds the cache of committed segments; ``max_workers`` the parallel
    GetObject calls of one read.
    """

    def __init__(
        self,
        bucket: str,
        *,
        s3_client: Any,
        dynamodb_client: Any,
        table_name: str,
        prefix: str = "runs/",
        ttl_seconds: int | None = 30 * 86400,
        cache_bytes: int = 8 * 1024 * 1024,
        max_workers: int = 8,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Use ``bucket`` and ``table_name`` through the given clients; see the class docstring."""
        self._bucket = bucket
        self._s3 = s3_client
        self._table = LogHead(dynamodb_client, table_name, ttl_seconds=ttl_seconds, clock=clock)
        self._prefix = prefix
        self._cache = SegmentCache(cache_bytes)
        self._max_workers = max_workers
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        # The head as this object last wrote it, per run: lets an append skip reading the head.
        # Dropped on any error, so a reply that was lost can never leave it wrong.
        self._heads: dict[str, Head] = {}

    def open(self, run_id: str, epoch: int) -> int:
        """Take the write fence for ``epoch``; return the chunk count. Raises ``FencedError``."""
        self._check(run_id, epoch)
        head = self._take_fence(run_id, epoch, None)
        self._set_head(run_id, head)
        return head.count

    def append(self, run_id: str, start: int, chunks: Sequence[str], epoch: int) -> int:
        """Append ``chunks`` at ``start`` as one segment, all or nothing; returns the new count."""
        check_chunks(chunks)
        self._check(run_id, epoch)
        data = "".join(chunk + "\n" for chunk in chunks).encode("utf-8")
        try:
            return self._append(run_id, start, tuple(chunks), data, epoch)
        except BaseException:
            with self._lock:
                self._heads.pop(run_id, None)
            raise

    def read(self, run_id: str, start: int, limit: int | None = None) -> list[str]:
        """Chunks from absolute index ``start`` (at most ``limit``); empty past the end."""
        check_read_args(start, limit)
        self._check(run_id, 0)
        if limit == 0:
            return []
        head = self._table.get(run_id, "#c, #w, #wf, #i")
        end = head.count if limit is None else min(head.count, start + limit)
        if start >= end:
            return []
        log = _Log(run_id, head.inc)
        out: list[str] = []
        pos = self._take_cached(log, start, end, out)
        if pos < end and head.writer is not None and pos >= head.writer_from and self._cache.is_boundary(log.key, pos):
            pos = self._read_direct(log, pos, end, head.writer, out)
        if pos < end:
            self._read_listed(log, pos, end, out)
        return out

    def count(self, run_id: str) -> int:
        """The number of chunks in the run's log (0 for a log never written)."""
        self._check(run_id, 0)
        return self._table.get(run_id, "#c").count

    def close(self) -> None:
        """Stop the reader's worker threads (a later read starts them again)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    # --- writing -----------------------------------------------------------------------------------

    def _append(self, run_id: str, start: int, chunks: tuple[str, ...], data: bytes, epoch: int) -> int:
        with self._lock:
            head = self._heads.get(run_id)
        if head is not None and epoch < head.fence:
            # Fences only rise, so what this object saw is a lower bound: no request needed.
            raise FencedError(f"run {run_id!r}: epoch {epoch} is older than the log's fence {head.fence}")
        if head is None or head.fence != epoch or head.count != start:
            head = self._take_fence(run_id, epoch, start)  # also checks start, atomically
        if not chunks:
            return start  # an empty segment would take the key of the next real one
        log = _Log(run_id, head.inc)
        key = self._segment_key(log, start, epoch)
        self._put_segment(run_id, key, data, start, epoch)
        end = start + len(chunks)
        first = head.writer != epoch
        for _ in range(2):
            values = {":e": n(epoch), ":start": n(start), ":end": n(end)}
            if first:
                update = "SET #c = :end, #w = :e, #wf = :start"
                condition = "#e = :e AND #c = :start AND (attribute_not_exists(#w) OR #w <> :e)"
            else:
                update, condition = "SET #c = :end", "#e = :e AND #c = :start AND #w = :e"
            try:
                self._table.update(run_id, update, condition, values, "NONE")
                break
            except ConditionFailed as failed:
                old = failed.head
                if old.fence == epoch and old.writer == epoch and old.count == end:
                    break  # our commit landed and botocore retried it after a lost reply
                self._raise_if_lost(run_id, old, start, epoch)
                if old.fence != epoch:
                    raise StorageError(f"run {run_id!r}: the log's head changed under its fence holder") from None
                first = old.writer != epoch  # only our idea of the last writer was off: redo once
        else:
            raise StorageError(f"run {run_id!r}: could not commit the append at {start}")
        writer_from = start if first else head.writer_from
        self._set_head(run_id, Head(end, epoch, epoch, writer_from, head.inc))
        self._cache.put(log.key, start, chunks, len(data))
        return end

    def _take_fence(self, run_id: str, epoch: int, start: int | None) -> Head:
        """Raise the fence to ``epoch`` (if ``start`` is given, only while the count is ``start``)."""
        values = {":e": n(epoch), ":zero": n(0)}
        condition = "(attribute_not_exists(#e) OR #e <= :e)"
        if start is not None:
            values[":start"] = n(start)
            condition += " AND (#c = :start OR attribute_not_exists(#c))" if start == 0 else " AND #c = :start"
        update = "SET #e = :e, #c = if_not_exists(#c, :zero)"
        try:
            return Head.of(self._table.update(run_id, update, condition, values, "ALL_NEW"))
        except ConditionFailed as failed:
            self._raise_if_lost(run_id, failed.head, start, epoch)
            raise StorageError(f"run {run_id!r}: fence condition failed for no visible reason") from None

    @staticmethod
    def _raise_if_lost(run_id: str, old: Head, start: int | None, epoch: int) -> None:
        # The fence is checked first: a stale writer gets FencedError even at the right start.
        if old.fence > epoch:
            raise FencedError(f"run {run_id!r}: epoch {epoch} is older than the log's fence {old.fence}")
        if start is not None and old.count != start:
            raise LogConflictError(f"run {run_id!r}: append at {start}, but the log holds {old.count} chunks")

    def _put_segment(self, run_id: str, key: str, data: bytes, start: int, epoch: int) -> None:
        for attempt in range(_PUT_ATTEMPTS):
            try:
                self._s3.put_object(
                    Bucket=self._bucket, Key=key, Body=data, ContentType="application/x-ndjson", IfNoneMatch="*"
                )
                return
            except ClientError as exc:
                if http_status(exc) == 409 or error_code(exc) == "ConditionalRequestConflict":
                    time.sleep(0.02 * 2**attempt)  # two conditional writes raced; S3 says retry
                    continue
                if http_status(exc) == 412 or error_code(exc) == "PreconditionFailed":
                    self._reuse_own_orphan(run_id, key, data, start, epoch)
                    return
                raise translate(exc, f"writing segment {key!r}") from exc
            except BotoCoreError as exc:
                raise translate(exc, f"writing segment {key!r}") from exc
        raise StorageError(f"writing segment {key!r}: conditional writes kept conflicting")

    def _reuse_own_orphan(self, run_id: str, key: str, data: bytes, start: int, epoch: int) -> None:
        """The key exists: commit it if it is this epoch's uncommitted earlier attempt."""
        self._raise_if_lost(run_id, self._table.get(run_id, "#c, #e"), start, epoch)
        # count == start: the object is not committed, and only this epoch writes this key.
        with aws_errors(f"replacing orphan segment {key!r}"):
            existing = self._s3.get_object(Bucket=self._bucket, Key=key)
            if existing["Body"].read() != data:
                self._s3.put_object(Bucket=self._bucket, Key=key, Body=data, IfMatch=existing["ETag"])

    # --- reading -----------------------------------------------------------------------------------

    def _take_cached(self, log: _Log, pos: int, end: int, out: list[str]) -> int:
        while pos < end:
            found = self._cache.containing(log.key, pos)
            if found is None:
                break
            seg_start, chunks = found
            out.extend(chunks[pos - seg_start : end - seg_start])
            pos = min(end, seg_start + len(chunks))
        return pos

    def _read_direct(self, log: _Log, pos: int, end: int, writer: int, out: list[str]) -> int:
        """Follow segments by key from a known boundary inside the last writer's range."""
        for _ in range(_DIRECT_GETS):
            chunks = self._get_segment(log, pos, self._segment_key(log, pos, writer))
            if chunks is None:
                return pos  # not where we expected (cannot happen with a sound log): list instead
            out.extend(chunks[: end - pos])
            pos = self._take_cached(log, min(end, pos + len(chunks)), end, out)
            if pos >= end:
                break
        return pos

    def _read_listed(self, log: _Log, pos: int, end: int, out: list[str]) -> None:
        """List the segments covering ``[pos, end)`` once, fetch them in parallel, stitch them."""
        run_id = log.run_id
        segments = self._list_range(log, pos, end)
        found: dict[int, tuple[str, ...]] = {}
        todo: list[tuple[int, str]] = []
        for seg_start, key in segments:
            cached = self._cache.containing(log.key, seg_start)
            if cached is not None and cached[0] == seg_start:
                found[seg_start] = cached[1]
            else:
                todo.append((seg_start, key))
        if len(todo) > 1:
            fetched = self._executor().map(lambda sk: self._fetch(log, *sk), todo)
            found.update(zip([s for s, _ in todo], fetched, strict=True))
        elif todo:
            found[todo[0][0]] = self._fetch(log, *todo[0])
        expected = segments[0][0]
        for seg_start, _ in segments:
            if seg_start != expected:
                raise StorageError(f"run {run_id!r}: chunk log has a gap or overlap at index {expected}")
            chunks = found[seg_start]
            out.extend(chunks[max(pos - seg_start, 0) : end - seg_start])
            expected = seg_start + len(chunks)
        if expected < end:
            raise StorageError(f"run {run_id!r}: chunk log is missing chunks before {end}")

    def _list_range(self, log: _Log, pos: int, end: int) -> list[tuple[int, str]]:
        """``(start, key)`` of the committed segments covering ``[pos, end)``, ascending."""
        run_id = log.run_id
        prefix = self._segment_prefix(log)
        request: dict[str, Any] = {
            "Bucket": self._bucket,
            "Prefix": prefix,
            "StartAfter": prefix + list_start_after(end - 1),
            "MaxKeys": min(1000, end - pos + 8),  # one key per segment, plus room for a few orphans
        }
        found: dict[int, str] = {}
        while True:
            with aws_errors(f"listing segments of run {run_id!r}"):
                page = self._s3.list_objects_v2(**request)
            for obj in page.get("Contents", ()):
                parsed = parse_segment_name(obj["Key"][len(prefix) :])
                if parsed is None or parsed[0] in found:
                    continue  # a foreign object, or an orphan under the committed segment's start
                found[parsed[0]] = obj["Key"]
                if parsed[0] <= pos:
                    return sorted(found.items())
            if not page.get("IsTruncated"):
                raise StorageError(f"run {run_id!r}: no segment holds chunk {pos}")
            request["ContinuationToken"] = page["NextContinuationToken"]

    def _fetch(self, log: _Log, start: int, key: str) -> tuple[str, ...]:
        """A committed segment's chunks; its absence means the log is damaged."""
        chunks = self._get_segment(log, start, key)
        if chunks is None:
            raise StorageError(f"run {log.run_id!r}: committed segment {key!r} is missing")
        return chunks

    def _get_segment(self, log: _Log, start: int, key: str) -> tuple[str, ...] | None:
        """A segment's chunks (cached once read: committed segments never change); None if absent."""
        try:
            data = self._s3.get_object(Bucket=self._bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if error_code(exc) in ("NoSuchKey", "404"):
                return None
            raise translate(exc, f"reading segment {key!r}") from exc
        except BotoCoreError as exc:
            raise translate(exc, f"reading segment {key!r}") from exc
        if not data.endswith(b"\n"):
            raise StorageError(f"corrupt segment {key!r}")
        # Split on "\n" only: str.splitlines would also split on U+2028 inside a JSON string.
        chunks = tuple(data[:-1].decode("utf-8").split("\n"))
        self._cache.put(log.key, start, chunks, len(data))
        return chunks

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._max_workers, thread_name_prefix="s3-chunk-log")
            return self._pool

    def _set_head(self, run_id: str, head: Head) -> None:
        with self._lock:
            self._heads[run_id] = head

    # --- names -------------------------------------------------------------------------------------

    def _check(self, run_id: str, epoch: int) -> None:
        # The id becomes part of an S3 key: refuse anything that could escape the run's prefix.
        if not _RUN_ID.fullmatch(run_id):
            raise ValueError(f"invalid run id for the S3 chunk log: {run_id!r}")
        if not 0 <= epoch < MAX_INDEX:
            raise ValueError(f"epoch must be in [0, {MAX_INDEX}), got {epoch}")

    def _segment_prefix(self, log: _Log) -> str:
        if log.inc is None:
            return f"{self._prefix}{log.run_id}/seg/"
        return f"{self._prefix}{log.run_id}/{log.inc}/seg/"

    def _segment_key(self, log: _Log, start: int, epoch: int) -> str:
        return self._segment_prefix(log) + segment_name(start, epoch)


@dataclass(frozen=True)
class _Log:
    """One incarnation's log of a run: where its segments live and how the cache knows them."""

    run_id: str
    inc: str | None

    @property
    def key(self) -> str:
        """The segment cache's name for this log (incarnations of one run id never share entries)."""
        return self.run_id if self.inc is None else f"{self.run_id}#{self.inc}"
