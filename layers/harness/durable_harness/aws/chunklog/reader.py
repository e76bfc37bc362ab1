"""Reading the deployed chunk log: the top of a run's keys, forward reads, gaps from sealed segments.

See :mod:`.log` for the protocol. A reader learns a run's current generation
(incarnation) from the top of its keys and trusts it for a minute (``_GEN_TRUST``); a forward read
that runs into a newer generation's keys starts over. Committed chunks never change, so they are
cached per generation (with what this process wrote), and the send times of the appends read tell
a follower when the next one is due (:class:`.cache.Cadence`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ...errors import StorageError
from ...lru import LRU
from .._errors import aws_errors
from ..table import LOG_PREFIX, LOG_TOP, PK, SK, item_key
from .cache import Cadence, SegmentCache
from .items import MAX_INDEX, IndexItem, LogItem, chunk_key, decode_item, index_key
from .segments import Segments

_GEN_TRUST = 60.0
"""Seconds a reader trusts the generation it learned before it looks at the top again (a run id is
used again only after its record expired, days later; a follower sees a new one anyway)."""
_GEN_RUNS = 1024
_COLD_ITEMS = 16


@dataclass(frozen=True)
class Top:
    """What the top of a run's log keys says: the current generation, its index, its last items."""

    gen: str
    index: IndexItem | None
    items: list[LogItem]
    """The generation's items from the last one down (contiguous as written)."""

    @property
    def end(self) -> int:
        """The log's count: the end of its last item, or of its last sealed segment."""
        return max(self.items[0].end if self.items else 0, self.index.sealed if self.index else 0)


class NewGeneration(Exception):
    """A read met the keys of a newer incarnation than the one it knew: look at the top again."""


class LogReader:
    """The reading half of :class:`~.log.DynamoChunkLog`: its reads, its caches, what it knows of
    each run's current generation; the writer tells it what it wrote (:meth:`note_written`)."""

    def __init__(
        self, *, dynamodb_client: Any, table_name: str, segments: Segments, cache_bytes: int, max_workers: int,
        clock: Callable[[], float] = time.time,
    ) -> None:  # fmt: skip
        """Read the runs table through ``dynamodb_client``, objects through ``segments``."""
        self._ddb = dynamodb_client
        self._table = table_name
        self._segments = segments
        self._clock = clock
        self._cache = SegmentCache(cache_bytes)  # committed chunks per generation, append boundaries
        self._cadence = Cadence()  # the send times of the appends read, per run
        self._max_workers = max_workers
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._gens: LRU[str, tuple[str, float]] = LRU(_GEN_RUNS)  # run -> (generation, when learned)

    def close(self) -> None:
        """Stop the worker threads (a later read starts them again)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    # --- the port's reads --------------------------------------------------------------------------

    def read(self, run_id: str, start: int, stop: int | None) -> list[str]:
        """Chunks ``[start, stop)`` (to the end: ``stop`` None) of the run's current log."""
        for _ in range(3):
            try:
                return self._read_once(run_id, start, stop)
            except NewGeneration:
                self._unlearn(run_id)
        raise StorageError(f"run {run_id!r}: the run's log kept changing incarnations while being read")

    def _read_once(self, run_id: str, start: int, stop: int | None) -> list[str]:
        gen = self._known_gen(run_id)
        if gen is None:
            # One Query finds the current incarnation, and holds the chunks wanted if they are
            # among the last few appends (a follower starting near the end).
            top = self.top(run_id, _COLD_ITEMS - 2, one_page=True)
            if top is None:
                return []
            gen = top.gen
            if not top.items or top.items[-1].start <= start:  # the top holds it (or it is past the end)
                high = top.end if stop is None else min(stop, top.end)
                return self._assemble(run_id, gen, top.index, top.items[::-1], start, high) if start < high else []
        out: list[str] = []
        pos = self._cache.take(run_id, gen, start, stop, out)
        if stop is not None and pos >= stop:
            return out
        if self._cache.is_boundary(run_id, gen, pos):
            items, index, reached = self._forward(run_id, gen, pos, stop)
        else:
            # Somewhere inside an append this process has not seen: find the item holding it
            # while the items after it are read.
            holder = self._executor().submit(self._query, run_id, chunk_key(gen, 0), chunk_key(gen, pos), False, 1)
            items, index, reached = (
                self._forward(run_id, gen, pos + 1, stop) if pos + 1 < MAX_INDEX else ([], None, True)
            )
            before = [i for i in holder.result() if isinstance(i, LogItem) and i.end > pos]
            items = before + items
        # Past a read that stopped at ``stop``, the log may hold more; otherwise this is its end.
        end = max(items[-1].end if items else 0, index.sealed if index else 0) if reached else items[-1].end
        high = end if stop is None else min(stop, end)
        if pos < high:
            out += self._assemble(run_id, gen, index, items, pos, high)
        return out

    def tail(self, run_id: str, n: int) -> tuple[int, list[str]]:
        """The log's count and its last ``n`` chunks, from one look at the top (0: one Query)."""
        top = self.top(run_id, n)
        if top is None:
            return 0, []
        count = top.end
        self._cache.note_boundaries(run_id, top.gen, count)  # a follower goes on from here
        return count, self._assemble(run_id, top.gen, top.index, top.items[::-1], max(0, count - n), count)

    def chunks(self, run_id: str, gen: str, start: int, end: int) -> list[str]:
        """The committed chunks ``[start, end)`` of generation ``gen`` (cached, else read)."""
        out: list[str] = []
        pos = self._cache.take(run_id, gen, start, end, out)
        if pos < end:
            items, index, _ = self._forward(run_id, gen, pos, end)
            out += self._assemble(run_id, gen, index, items, pos, end)
        return out

    def next_commit(self, run_id: str) -> float | None:
        """When the run's next append is due, from the appends read (see ``DynamoChunkLog``)."""
        return self._cadence.next_commit(run_id)

    # --- what the writer tells -----------------------------------------------------------------------

    def note_written(self, run_id: str, gen: str, start: int, chunks: tuple[str, ...], size: int) -> None:
        """Keep chunks this process just committed (``size``: their stored bytes)."""
        self._cache.put(run_id, gen, start, chunks, size)

    def note_end(self, run_id: str, gen: str, end: int) -> None:
        """The run's current log is generation ``gen`` and ends at ``end`` (its writer knows)."""
        self.learn(run_id, gen)
        self._cache.note_boundaries(run_id, gen, end)

    # --- requests ----------------------------------------------------------------------------------

    def top(self, run_id: str, want: int, *, one_page: bool = False) -> Top | None:
        """The top of the run's log keys: its generation, index and the items holding its last
        ``want`` chunks, or only what one Query of up to ``want + 2`` items brings (``one_page``);
        ``None`` when the run has no log items."""
        gen: str | None = None
        index: IndexItem | None = None
        items: list[LogItem] = []
        got, high, page = 0, LOG_TOP, min(want + 2, 16)  # +2: the index and a marker
        while True:
            found = self._query(run_id, LOG_PREFIX, high, False, page)
            for item in found:
                gen = gen or item.gen
                if item.gen != gen:
                    found = []  # an older incarnation's: this one's log ends here
                    break
                if isinstance(item, IndexItem):
                    index = item
                else:
                    items.append(item)
                    got += item.n
            if one_page or got >= want or len(found) < page or not items or items[-1].start == 0:
                break
            assert gen is not None
            high, page = chunk_key(gen, items[-1].start - 1), min(want + 1, page * 4)
        if gen is None:
            return None
        self.learn(run_id, gen)
        return Top(gen, index, items)

    def _query(self, run_id: str, low: str, high: str, forward: bool, limit: int | None) -> list[LogItem | IndexItem]:
        """Items with keys in ``[low, high]``, in order (at most ``limit``), strongly consistent."""
        request: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": f"{PK} = :pk AND {SK} BETWEEN :low AND :high",
            "ExpressionAttributeValues": {":pk": {"S": run_id}, ":low": {"S": low}, ":high": {"S": high}},
            "ScanIndexForward": forward,
            "ConsistentRead": True,
        }
        if limit is not None:
            request["Limit"] = limit
        items: list[LogItem | IndexItem] = []
        while True:
            with aws_errors(f"reading the chunk log of run {run_id!r}"):
                page = self._ddb.query(**request)
            items += [decode_item(item, run_id) for item in page.get("Items", ())]
            last_key = page.get("LastEvaluatedKey")
            if not last_key or (limit is not None and len(items) >= limit):
                return items
            request["ExclusiveStartKey"] = last_key
            if limit is not None:
                request["Limit"] = limit - len(items)

    def _forward(
        self, run_id: str, gen: str, pos: int, stop: int | None
    ) -> tuple[list[LogItem], IndexItem | None, bool]:
        """The generation's items from the one starting at ``pos`` on, enough to reach ``stop``
        (all: None); its index and ``True`` when the read reached the top of the log."""
        items: list[LogItem] = []
        key, got = chunk_key(gen, pos), 0
        while True:
            # Each item holds at least one chunk (only the last may be a marker), so this many
            # items always suffice; the cache keeps whatever is read beyond ``stop``.
            want = None if stop is None else min(stop - pos - got + 2, 1000)
            page = self._query(run_id, key, LOG_TOP, True, want)
            if page and page[-1].gen > gen:  # keys sort by generation: a newer one comes last
                raise NewGeneration(run_id)
            for item in page:
                if isinstance(item, IndexItem):
                    self.learn(run_id, gen)
                    return items, item, True
                items.append(item)
                got += item.n
            if want is None or len(page) < want:
                self.learn(run_id, gen)
                return items, None, True
            if stop is not None and got >= stop - pos:
                return items, None, False
            key = chunk_key(gen, items[-1].end)

    def _index(self, run_id: str, gen: str) -> IndexItem:
        """A generation's segment index (one strongly consistent GetItem; empty if there is none)."""
        with aws_errors(f"reading the segment index of run {run_id!r}"):
            key = item_key(run_id, index_key(gen))
            item = self._ddb.get_item(TableName=self._table, Key=key, ConsistentRead=True).get("Item")
        found = decode_item(item, run_id) if item else None
        return found if isinstance(found, IndexItem) else IndexItem(gen)

    def _assemble(
        self, run_id: str, gen: str, index: IndexItem | None, items: list[LogItem], pos: int, stop: int
    ) -> list[str]:
        """Chunks ``[pos, stop)`` from ``items`` (ascending), and from the sealed segments for
        whatever they do not hold; spills are fetched in parallel."""
        for item in items:  # what was read beyond ``stop`` serves the next read from the cache
            if item.chunks is not None and (item.end <= pos or item.start >= stop):
                self._cache.put(run_id, gen, item.start, item.chunks, item.size)
        items = [i for i in items if i.n and i.end > pos and i.start < stop]
        spilled = [i for i in items if i.chunks is None]
        fetched = dict(zip(spilled, self._get_each([(i.s3_key or "", i.n) for i in spilled], run_id), strict=True))
        self._cadence.note(run_id, [i.at for i in items if i.at is not None])
        out: list[str] = []
        for number, item in enumerate(items):
            if item.start > pos:
                index = self._fill(run_id, gen, index, pos, item.start, out)
                pos = item.start
            elif item.start < pos and number:  # only the first item may begin before ``pos``
                raise StorageError(f"run {run_id!r}: chunk log has overlapping items at index {item.start}")
            chunks = item.chunks if item.chunks is not None else fetched[item]
            self._cache.put(run_id, gen, item.start, chunks, item.size or sum(map(len, chunks)))
            out.extend(chunks[pos - item.start : min(stop, item.end) - item.start])
            pos = min(stop, item.end)
        if pos < stop:
            self._fill(run_id, gen, index, pos, stop, out)
        return out

    def _fill(self, run_id: str, gen: str, index: IndexItem | None, pos: int, stop: int, out: list[str]) -> IndexItem:
        """Append chunks ``[pos, stop)`` from the sealed segments (they have no items)."""
        if index is None or index.sealed < stop:
            index = self._index(run_id, gen)
        if index.sealed < stop:
            raise StorageError(f"run {run_id!r}: the chunk log has no item or segment holding chunk {pos}")
        wanted = [(a, b) for a, b in index.segments() if b > pos and a < stop]
        keys = [(self._segments.segment_key(run_id, gen, a, b), b - a) for a, b in wanted]
        for (a, b), chunks in zip(wanted, self._get_each(keys, run_id), strict=True):
            self._cache.put(run_id, gen, a, chunks, sum(map(len, chunks)))
            out.extend(chunks[max(pos, a) - a : min(stop, b) - a])
        return index

    def _get_each(self, keys: list[tuple[str, int]], run_id: str) -> list[tuple[str, ...]]:
        """The chunks of each ``(key, n)`` S3 object, in parallel when there are several."""
        if len(keys) > 1:
            return list(self._executor().map(lambda kn: self._segments.get(kn[0], kn[1], run_id), keys))
        return [self._segments.get(key, n, run_id) for key, n in keys]

    def _executor(self) -> ThreadPoolExecutor:
        """The pool of the reads' parallel requests (started on first use)."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._max_workers, thread_name_prefix="chunk-log")
            return self._pool

    # --- generations and names ---------------------------------------------------------------------

    def _known_gen(self, run_id: str) -> str | None:
        """The run's current generation as learned lately (``None``: look at the top again)."""
        known = self._gens.get(run_id)
        if known is None or self._clock() - known[1] > _GEN_TRUST:
            return None
        return known[0]

    def learn(self, run_id: str, gen: str) -> None:
        """Note that ``gen`` is the run's current generation (seen at the top of its keys now)."""
        self._gens.put(run_id, (gen, self._clock()))

    def _unlearn(self, run_id: str) -> None:
        """Forget the run's generation (a read met a newer one)."""
        self._gens.pop(run_id)
