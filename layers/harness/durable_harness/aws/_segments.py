"""Segment keys of the S3 chunk log and the reader's cache of committed segments.

A segment key is ``<inverted start>-<inverted epoch>``, both zero-padded to 13 digits, where
``inverted x = 10**12 - x``. S3 lists keys in ascending order, so listing from the inverted start
of chunk ``i`` returns the segment with the largest start ``<= i`` first, and among segments with
the same start (one committed, the others orphans of fenced-off writers) the highest epoch first,
which is the committed one (see :mod:`.s3log` for why).
"""

from __future__ import annotations

import threading
from bisect import bisect_right, insort
from collections import OrderedDict

__all__ = ["MAX_INDEX", "SegmentCache", "list_start_after", "parse_segment_name", "segment_name"]

MAX_INDEX = 10**12
"""Chunk indexes and epochs must stay below this (13 digits once inverted)."""
_WIDTH = 13
_BOUND_RUNS = 1024
_BOUNDS_PER_RUN = 4096


def segment_name(start: int, epoch: int) -> str:
    """The object name (below the run's ``seg/`` prefix) of the segment at ``start`` by ``epoch``."""
    if not 0 <= start < MAX_INDEX or not 0 <= epoch < MAX_INDEX:
        raise ValueError(f"segment start {start} and epoch {epoch} must be in [0, {MAX_INDEX})")
    return f"{MAX_INDEX - start:0{_WIDTH}d}-{MAX_INDEX - epoch:0{_WIDTH}d}"


def list_start_after(index: int) -> str:
    """A ``StartAfter`` value that lists segments with start ``<= index`` first, largest start first."""
    return f"{MAX_INDEX - index:0{_WIDTH}d}"


def parse_segment_name(name: str) -> tuple[int, int] | None:
    """``(start, epoch)`` of a segment name; ``None`` for anything else under the prefix."""
    head, sep, tail = name.partition("-")
    if not sep or len(head) != _WIDTH or len(tail) != _WIDTH or not (head.isdigit() and tail.isdigit()):
        return None
    return MAX_INDEX - int(head), MAX_INDEX - int(tail)


class SegmentCache:
    """An LRU of committed segments (immutable once committed) plus known segment boundaries.

    Contents are bounded by ``max_bytes`` of segment data. Boundaries (indexes where a committed
    segment starts) outlive their segments' eviction: a follower that read up to ``n`` knows that
    the next segment starts at ``n``, which lets it fetch that segment without listing.
    """

    def __init__(self, max_bytes: int) -> None:
        """Create an empty cache holding at most ``max_bytes`` of segment data."""
        self._max = max_bytes
        self._lock = threading.Lock()
        self._lru: OrderedDict[tuple[str, int], tuple[tuple[str, ...], int]] = OrderedDict()
        self._starts: dict[str, list[int]] = {}
        self._bounds: OrderedDict[str, set[int]] = OrderedDict()
        self._bytes = 0

    def put(self, run_id: str, start: int, chunks: tuple[str, ...], size: int) -> None:
        """Remember a committed segment (and both of its boundaries)."""
        self.note_boundaries(run_id, start, start + len(chunks))
        if size > self._max:
            return
        with self._lock:
            key = (run_id, start)
            if key in self._lru:
                self._lru.move_to_end(key)
                return
            self._lru[key] = (chunks, size)
            self._bytes += size
            insort(self._starts.setdefault(run_id, []), start)
            while self._bytes > self._max:
                (old_run, old_start), (_, old_size) = self._lru.popitem(last=False)
                self._bytes -= old_size
                starts = self._starts[old_run]
                starts.remove(old_start)
                if not starts:
                    del self._starts[old_run]

    def containing(self, run_id: str, index: int) -> tuple[int, tuple[str, ...]] | None:
        """The cached segment holding chunk ``index`` as ``(start, chunks)``, if any."""
        with self._lock:
            starts = self._starts.get(run_id)
            if not starts:
                return None
            pos = bisect_right(starts, index) - 1
            if pos < 0:
                return None
            start = starts[pos]
            chunks, _ = self._lru[(run_id, start)]
            if index >= start + len(chunks):
                return None
            self._lru.move_to_end((run_id, start))
            return start, chunks

    def note_boundaries(self, run_id: str, *indexes: int) -> None:
        """Record indexes where committed segments start."""
        with self._lock:
            bounds = self._bounds.get(run_id)
            if bounds is None:
                bounds = self._bounds[run_id] = set()
                if len(self._bounds) > _BOUND_RUNS:
                    self._bounds.popitem(last=False)
            elif len(bounds) > _BOUNDS_PER_RUN:
                bounds.clear()  # crude but bounded; followers only need the recent ones
            self._bounds.move_to_end(run_id)
            bounds.update(indexes)

    def is_boundary(self, run_id: str, index: int) -> bool:
        """True when a committed segment is known to start at ``index`` (0 always qualifies)."""
        if index == 0:
            return True
        with self._lock:
            return index in self._bounds.get(run_id, ())
