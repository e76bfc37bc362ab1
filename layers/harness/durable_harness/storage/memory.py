"""In-memory fakes of the checkpoint store and the chunk log, for unit tests: the contract of
:mod:`..checkpoints.base` and :mod:`..chunks.base` over dicts and lists (the suite in ``tests/storage``
runs every adapter through the same cases). Thread-safe: the runner calls ports from worker threads.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace

from ..checkpoints.base import BaseCheckpointStore, Current, VersionConflict, handed_out
from ..checkpoints.records import Kind, Plan, fold
from ..chunks.base import BaseChunkLog
from ..errors import RunExistsError, RunNotFoundError
from ..ports import RunSummary, StoredRun

__all__ = ["MemoryCheckpointStore", "MemoryChunkLog"]


@dataclass
class _Run:
    """One run as the store holds it: the head, its inline base, its records (checkpoints/records.py)."""

    head: Current
    """The head at its version; ``head.folded`` is the state last written (the base of the next delta)."""
    base: str | None
    records: list[tuple[Kind, str]]


class MemoryCheckpointStore(BaseCheckpointStore):
    """A :class:`~durable_harness.ports.CheckpointStore` held in a dict, in the stores' common format:
    a head plus append-only records (:mod:`durable_harness.checkpoints.records`)."""

    def __init__(self) -> None:
        """Create an empty store."""
        super().__init__()
        self._lock = threading.Lock()
        self._runs: dict[str, _Run] = {}

    def load(self, run_id: str) -> StoredRun:
        """The newest record of a run. Raises ``RunNotFoundError``."""
        with self._lock:
            run = self._get(run_id)
            return handed_out(run.head.record, state=fold(run.base, run.records).text)

    def summary(self, run_id: str) -> RunSummary:
        """The record's summary, without its state. Raises ``RunNotFoundError``."""
        with self._lock:
            head = self._get(run_id).head.record
            return RunSummary(head.run_id, head.status, head.principal, head.chat_id)

    def version(self, run_id: str) -> int:
        """The run's current version. Raises ``RunNotFoundError``."""
        with self._lock:
            return self._get(run_id).head.record.version

    def latest_run(self, chat_id: str, principal: str | None) -> str | None:
        """The run created last for ``principal``'s chat (runs are kept in creation order)."""
        with self._lock:
            heads = [run.head.record for run in self._runs.values()]
        return next((h.run_id for h in reversed(heads) if h.chat_id == chat_id and h.principal == principal), None)

    def _create(self, first: Current, plan: Plan) -> Current:
        with self._lock:
            if first.record.run_id in self._runs:
                raise RunExistsError(first.record.run_id)
            self._runs[first.record.run_id] = _Run(first, plan.inline, [plan.record] if plan.record else [])
            return first

    def _claim(self, run_id: str, expected_version: int) -> StoredRun:
        with self._current(run_id, expected_version) as current:
            claimed = replace(current.record, version=expected_version + 1, epoch=current.record.epoch + 1)
            self._runs[run_id].head = replace(current, record=claimed)
            return claimed

    @contextmanager
    def _current(self, run_id: str, expected_version: int) -> Iterator[Current]:
        with self._lock:
            head = self._get(run_id).head
            VersionConflict.check(head.record.version, expected_version)
            yield head

    def _write(self, current: Current, after: Current, plan: Plan) -> None:
        run = self._runs[after.record.run_id]  # under the lock _current holds
        run.base = plan.inline if plan.inline is not None else None if plan.drop_base else run.base
        run.records += [plan.record] if plan.record else []
        run.head = after

    def _get(self, run_id: str) -> _Run:
        try:
            return self._runs[run_id]
        except KeyError:
            raise RunNotFoundError(run_id) from None


class MemoryChunkLog(BaseChunkLog):
    """A :class:`~durable_harness.ports.ChunkLog` held in lists, with the same fencing rules."""

    def __init__(self) -> None:
        """Create an empty log."""
        self._lock = threading.Lock()
        self._chunks: dict[str, list[str]] = {}
        # Highest epoch seen per run; a run never opened is fenced at 0, so any epoch may write.
        self._fences: dict[str, int] = {}

    def _open(self, run_id: str, epoch: int) -> int:
        with self._lock:
            self._check_fence(run_id, epoch, self._fences.get(run_id, 0))
            self._fences[run_id] = epoch
            return len(self._chunks.get(run_id, ()))

    def _append(self, run_id: str, start: int, chunks: Sequence[str], epoch: int) -> int:
        with self._lock:
            self._check_fence(run_id, epoch, self._fences.get(run_id, 0))
            log = self._chunks.setdefault(run_id, [])
            self._check_start(run_id, start, len(log))
            # A newer epoch appending without open() still takes the fence, as the file log does.
            self._fences[run_id] = epoch
            log.extend(chunks)
            return len(log)

    def _read(self, run_id: str, start: int, limit: int | None) -> list[str]:
        with self._lock:
            return self._chunks.get(run_id, [])[start : None if limit is None else start + limit]

    def _count(self, run_id: str) -> int:
        with self._lock:
            return len(self._chunks.get(run_id, ()))
