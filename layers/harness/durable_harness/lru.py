"""A bounded map that forgets its least recently used entry first: the one cache every store and
log of the package keeps per run (known heads, creation times, fresh logs, generations, indexes).

It sits at the bottom of the import graph so that every layer may use it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

__all__ = ["LRU"]

K = TypeVar("K")
V = TypeVar("V")


class LRU(Generic[K, V]):
    """At most ``limit`` entries; a :meth:`put` (and a :meth:`get` with ``touch``) makes its key the
    most recently used, and a put past the limit drops the least recently used.

    Each call is atomic (an internal lock); a caller that reads and then writes as one step holds
    its own lock around both.
    """

    def __init__(self, limit: int) -> None:
        """Hold at most ``limit`` entries (0: none, every put is forgotten at once)."""
        if limit < 0:
            raise ValueError(f"an LRU's limit is a count of entries, not {limit}")
        self._limit = limit
        self._lock = threading.Lock()
        self._entries: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K, *, touch: bool = False) -> V | None:
        """The value of ``key`` (``None`` when absent); with ``touch``, it becomes the most recently used."""
        with self._lock:
            value = self._entries.get(key)
            if touch and value is not None:
                self._entries.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> V:
        """Set ``key`` to ``value`` as the most recently used entry, dropping the least recently used
        past the limit; returns ``value``."""
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self._limit:
                self._entries.popitem(last=False)
        return value

    def pop(self, key: K) -> V | None:
        """Remove ``key``; its value, or ``None`` when it was absent."""
        with self._lock:
            return self._entries.pop(key, None)

    def __len__(self) -> int:
        """How many entries are held."""
        return len(self._entries)
