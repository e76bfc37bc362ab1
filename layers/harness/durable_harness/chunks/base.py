"""The chunk log's contract, held once: :class:`BaseChunkLog` validates every call, makes the
fencing decisions and words their errors; the memory, file and DynamoDB/S3 logs implement only
their I/O, so code that works against the in-memory fake cannot do what the others would refuse.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

from ..errors import FencedError, LogConflictError

__all__ = ["BaseChunkLog", "check_chunks"]

# A run id becomes a folder name (files) and part of an S3 key: nothing that could escape its place.
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$")


def check_chunks(chunks: Sequence[str]) -> None:
    """Reject chunks that a line-per-chunk log could not store faithfully."""
    for chunk in chunks:
        if not isinstance(chunk, str):
            raise TypeError(f"a chunk must be str, not {type(chunk).__name__}")
        if "\n" in chunk:
            raise ValueError("a chunk must be compact JSON without a newline")


class BaseChunkLog(ABC):
    """A :class:`~durable_harness.ports.ChunkLog` and ``TailReader`` whose subclass implements only
    the I/O: the hooks get arguments already checked."""

    max_epoch: ClassVar[int] = 2**63
    """Epochs must stay below this (the DynamoDB log writes them into sort keys)."""

    def open(self, run_id: str, epoch: int) -> int:
        """Take the write fence for ``epoch``; return the chunk count. Raises ``FencedError``."""
        self._check(run_id, epoch)
        return self._open(run_id, epoch)

    def append(self, run_id: str, start: int, chunks: Sequence[str], epoch: int) -> int:
        """Append ``chunks`` at ``start``, all or nothing; returns the new count."""
        check_chunks(chunks)
        self._check(run_id, epoch)
        return self._append(run_id, start, chunks, epoch)

    def read(self, run_id: str, start: int, limit: int | None = None) -> list[str]:
        """Chunks from absolute index ``start`` (at most ``limit``); empty past the end."""
        self._check(run_id, 0, start=start, limit=limit)
        return [] if limit == 0 else self._read(run_id, start, limit)

    def count(self, run_id: str) -> int:
        """The number of chunks in the run's log (0 for a log never written)."""
        self._check(run_id, 0)
        return self._count(run_id)

    def tail(self, run_id: str, n: int) -> tuple[int, list[str]]:
        """The log's count and its last ``n`` chunks (all of them when it holds fewer)."""
        self._check(run_id, 0, n=n)
        return self._tail(run_id, n)

    @staticmethod
    def _check_fence(run_id: str, epoch: int, fence: int) -> None:
        """An epoch older than the fence (the newest that opened or appended) is fenced off."""
        if epoch < fence:
            raise FencedError(f"run {run_id!r}: epoch {epoch} is older than the log's fence {fence}")

    @staticmethod
    def _check_start(run_id: str, start: int, count: int) -> None:
        """An append lands at the log's end, nowhere else."""
        if start != count:
            raise LogConflictError(f"run {run_id!r}: append at {start}, but the log holds {count} chunks")

    def _check(self, run_id: str, epoch: int, **counts: int | None) -> None:
        if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
            raise ValueError(f"invalid run id for the chunk log: {run_id!r}")
        if not 0 <= epoch < self.max_epoch:
            raise ValueError(f"epoch must be in [0, {self.max_epoch}), got {epoch}")
        for name, value in counts.items():
            if value is not None and value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")

    # --- the I/O -----------------------------------------------------------------------------------

    @abstractmethod
    def _open(self, run_id: str, epoch: int) -> int:
        """Take the fence for ``epoch`` (after ``_check_fence``); the count."""

    @abstractmethod
    def _append(self, run_id: str, start: int, chunks: Sequence[str], epoch: int) -> int:
        """Write ``chunks`` at ``start`` atomically, after ``_check_fence`` and ``_check_start``."""

    @abstractmethod
    def _read(self, run_id: str, start: int, limit: int | None) -> list[str]:
        """At most ``limit`` (> 0, or None: all) chunks from ``start``."""

    @abstractmethod
    def _count(self, run_id: str) -> int:
        """The number of chunks."""

    def _tail(self, run_id: str, n: int) -> tuple[int, list[str]]:
        """A count, then a read bounded by it (chunks appended since are not part of this tail); a
        log that reads its end in one request overrides it."""
        count = self.count(run_id)
        start = max(0, count - n)
        return count, self.read(run_id, start, count - start)
