"""What the chunk log's reader keeps: committed appends and their boundaries, and writers' pace.

An append's chunks never change once committed, so a process that has read (or written) them
keeps them, per incarnation of the run (``(run_id, gen)``: incarnations never share entries): a
follower, or a second client resuming the same run, reads only what is new. And the send times of
the appends it read tell a follower when the next one is due.
"""

from __future__ import annotations

import threading
from bisect import bisect_right, insort
from collections import OrderedDict, deque
from collections.abc import Sequence

from ...lru import LRU

_BOUND_RUNS = 1024
_BOUNDS_PER_RUN = 4096
_CADENCE_ITEMS = 6  # appends whose send times estimate a writer's pace (the median gap)
_CADENCE_RUNS = 256
_MIN_PERIOD, _MAX_PERIOD = 0.01, 1.0
_COMMIT_MARGIN = 0.01
"""Seconds from a writer sending an append to DynamoDB having committed it (a few ms at p50)."""


_Log = tuple[str, str]  # (run id, generation)


class SegmentCache:
    """An LRU of committed segments (the chunks of one append) plus known segment boundaries.

    Contents are bounded by ``max_bytes`` of segment data. Boundaries (indexes where a committed
    segment starts) outlive their segments' eviction: a follower that read up to ``n`` knows that
    the next segment starts at ``n``, which lets it read from there in one request.
    """

    def __init__(self, max_bytes: int) -> None:
        """Create an empty cache holding at most ``max_bytes`` of segment data."""
        self._max = max_bytes
        self._lock = threading.Lock()
        self._lru: OrderedDict[tuple[_Log, int], tuple[tuple[str, ...], int]] = OrderedDict()
        self._starts: dict[_Log, list[int]] = {}
        self._bounds: LRU[_Log, set[int]] = LRU(_BOUND_RUNS)
        self._bytes = 0

    def put(self, run_id: str, gen: str, start: int, chunks: tuple[str, ...], size: int) -> None:
        """Remember a committed segment (and both of its boundaries)."""
        self.note_boundaries(run_id, gen, start, start + len(chunks))
        if size > self._max:
            return
        log = (run_id, gen)
        with self._lock:
            key = (log, start)
            if key in self._lru:
                self._lru.move_to_end(key)
                return
            self._lru[key] = (chunks, size)
            self._bytes += size
            insort(self._starts.setdefault(log, []), start)
            while self._bytes > self._max:
                (old_log, old_start), (_, old_size) = self._lru.popitem(last=False)
                self._bytes -= old_size
                starts = self._starts[old_log]
                starts.remove(old_start)
                if not starts:
                    del self._starts[old_log]

    def take(self, run_id: str, gen: str, pos: int, stop: int | None, out: list[str]) -> int:
        """Append the cached chunks from ``pos`` (up to ``stop``) to ``out``; returns where the cache
        ran out."""
        while stop is None or pos < stop:
            found = self._containing((run_id, gen), pos)
            if found is None:
                break
            seg_start, chunks = found
            end = seg_start + len(chunks) if stop is None else min(stop, seg_start + len(chunks))
            out.extend(chunks[pos - seg_start : end - seg_start])
            pos = end
        return pos

    def _containing(self, log: _Log, index: int) -> tuple[int, tuple[str, ...]] | None:
        """The cached segment holding chunk ``index`` as ``(start, chunks)``, if any."""
        with self._lock:
            starts = self._starts.get(log)
            if not starts:
                return None
            pos = bisect_right(starts, index) - 1
            if pos < 0:
                return None
            start = starts[pos]
            chunks, _ = self._lru[(log, start)]
            if index >= start + len(chunks):
                return None
            self._lru.move_to_end((log, start))
            return start, chunks

    def note_boundaries(self, run_id: str, gen: str, *indexes: int) -> None:
        """Record indexes where committed segments start."""
        log = (run_id, gen)
        with self._lock:
            bounds = self._bounds.get(log, touch=True)
            if bounds is None:
                bounds = self._bounds.put(log, set())
            elif len(bounds) > _BOUNDS_PER_RUN:
                bounds.clear()  # crude but bounded; followers only need the recent ones
            bounds.update(indexes)

    def is_boundary(self, run_id: str, gen: str, index: int) -> bool:
        """True when a committed segment is known to start at ``index`` (0 always qualifies)."""
        if index == 0:
            return True
        with self._lock:
            return index in (self._bounds.get((run_id, gen)) or ())


class Cadence:
    """The send times of the last appends read, per run (bounded), and what they predict."""

    def __init__(self) -> None:
        """Know nothing yet."""
        self._lock = threading.Lock()
        self._sent: LRU[str, deque[float]] = LRU(_CADENCE_RUNS)

    def note(self, run_id: str, times: Sequence[float]) -> None:
        """Record the send times (epoch seconds, ascending) of appends just read."""
        if not times:
            return
        with self._lock:
            sent = self._sent.get(run_id, touch=True)
            if sent is None:
                sent = self._sent.put(run_id, deque(maxlen=_CADENCE_ITEMS))
            sent.extend(t for t in times if not sent or t > sent[-1])

    def next_commit(self, run_id: str) -> float | None:
        """The last send time plus the median gap and a commit margin; None before two appends."""
        with self._lock:
            sent = self._sent.get(run_id)
            if sent is None or len(sent) < 2:
                return None
            gaps = sorted(b - a for a, b in zip(sent, list(sent)[1:], strict=False))
            last = sent[-1]
        period = min(max(gaps[len(gaps) // 2], _MIN_PERIOD), _MAX_PERIOD)
        return last + period + _COMMIT_MARGIN
