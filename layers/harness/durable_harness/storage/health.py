"""Whether storage takes writes, as the latest attempts saw it (local mode's ``503`` answers).

A full disk or a read-only chunk folder does not make reads fail, so a server cannot tell that
storage is down by looking at it: the drivers of runs can. The local orchestrator reports each
storage error of a slice or a closing write (``failed``), and every committed chunk batch or
finished slice (``succeeded``). While the last report is a failure the chat service answers new
requests for unfinished runs with ``503 storage_unavailable`` instead of a stream that could only
send keep-alives; the stalled runs are retried meanwhile, and the first write that lands again
clears the state.
"""

from __future__ import annotations

import threading
import time


class StorageHealth:
    """The latest verdict on storage writes; safe from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failed_since: float | None = None
        self._error = ""

    def failed(self, error: BaseException) -> None:
        """A write failed with a storage error (a run's driver will retry it)."""
        with self._lock:
            if self._failed_since is None:
                self._failed_since = time.monotonic()
            self._error = f"{type(error).__name__}: {error}"

    def succeeded(self) -> None:
        """A write landed: storage takes writes again."""
        with self._lock:
            self._failed_since = None
            self._error = ""

    @property
    def unavailable(self) -> bool:
        """True while the latest report is a failure."""
        with self._lock:
            return self._failed_since is not None

    @property
    def last_error(self) -> str:
        """The latest failure (for logs; never sent to clients, it may name local paths)."""
        with self._lock:
            return self._error
