"""In-memory fakes of the checkpoint store and the chunk log, for unit tests.

They implement exactly the semantics of :mod:`durable_harness.ports` (fencing included, and the
checkpoint format of :mod:`durable_harness.storage.records`) so that a
test passing against them also passes against the SQLite, file and AWS adapters; the shared
contract suite in ``tests/storage`` runs every adapter through the same cases. Both are
thread-safe: the async runner calls ports from worker threads.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ..errors import FencedError, LogConflictError, RunExistsError, RunNotFoundError
from ..ports import Checkpoint, RunSummary
from .records import Folded, Kind, fold, parse, plan_create, plan_save

__all__ = ["MemoryCheckpointStore", "MemoryChunkLog", "check_chunks", "check_read_args"]


def check_chunks(chunks: Sequence[str]) -> None:
    """Reject chunks that a line-per-chunk log could not store faithfully.

    Every adapter applies the same rule, so code that works against a fake cannot write a chunk
    that the file log (one chunk per line) would have to refuse.
    """
    for chunk in chunks:
        if not isinstance(chunk, str):
            raise TypeError(f"a chunk must be str, not {type(chunk).__name__}")
        if "\n" in chunk:
            raise ValueError("a chunk must be compact JSON without a newline")


def check_read_args(start: int, limit: int | None) -> None:
    """Validate the arguments of ``ChunkLog.read``; tail (negative) indexes are the caller's job."""
    if start < 0:
        raise ValueError(f"start must be >= 0, got {start}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")


def _copy(checkpoint: Checkpoint, *, version: int | None = None, epoch: int | None = None) -> Checkpoint:
    # meta is a mutable dict inside a frozen dataclass; copying it keeps callers from editing the
    # stored record through a reference they were handed. The writer's value is not kept: a record
    # handed out and then saved with another ``state`` must not carry the old one's value.
    return replace(
        checkpoint,
        meta=dict(checkpoint.meta),
        value=None,
        version=checkpoint.version if version is None else version,
        epoch=checkpoint.epoch if epoch is None else epoch,
    )


@dataclass
class _Run:
    """One run as the store holds it: the head, its inline base, its records (storage/records.py)."""

    head: Checkpoint
    """The head's fields; ``state`` is the state last written (the base of the next delta)."""
    base: str | None
    records: list[tuple[Kind, str]] = field(default_factory=list)
    value: object = None
    """The parsed value of ``head.state``."""

    def loaded(self) -> Checkpoint:
        """The record as ``load`` returns it: the state folded from the base and the records."""
        return _copy(replace(self.head, state=fold(self.base, self.records).text))


class MemoryCheckpointStore:
    """A :class:`~durable_harness.ports.CheckpointStore` held in a dict, in the stores' common format:
    a head plus append-only records (:mod:`durable_harness.storage.records`)."""

    def __init__(self) -> None:
        """Create an empty store."""
        self._lock = threading.Lock()
        self._runs: dict[str, _Run] = {}

    def create(self, checkpoint: Checkpoint) -> Checkpoint:
        """Store a new run record at version 1, epoch 0. Raises ``RunExistsError``."""
        with self._lock:
            if checkpoint.run_id in self._runs:
                raise RunExistsError(checkpoint.run_id)
            plan = plan_create(checkpoint.state)
            run = _Run(_copy(checkpoint, version=1, epoch=0), plan.inline)
            if plan.record is not None:
                run.records.append(plan.record)
            run.value = parse(checkpoint.state)
            self._runs[checkpoint.run_id] = run
            return self._touch(run)

    def load(self, run_id: str) -> Checkpoint:
        """The newest record of a run. Raises ``RunNotFoundError``."""
        with self._lock:
            return self._get(run_id).loaded()

    def summary(self, run_id: str) -> RunSummary:
        """The record's summary, without its state. Raises ``RunNotFoundError``."""
        with self._lock:
            head = self._get(run_id).head
            return RunSummary(head.run_id, head.status, head.principal, head.chat_id)

    def claim(self, run_id: str, expected_version: int) -> Checkpoint:
        """Bump epoch and version if the version is still ``expected_version``."""
        with self._lock:
            run = self._get(run_id)
            current = run.head
            if current.version != expected_version:
                raise FencedError(f"run {run_id!r}: claim expected version {expected_version}, found {current.version}")
            run.head = _copy(current, version=current.version + 1, epoch=current.epoch + 1)
            return self._touch(run)

    def save(self, checkpoint: Checkpoint, expected_version: int) -> Checkpoint:
        """Append the state's record if the version is still ``expected_version`` (version + 1)."""
        with self._lock:
            run = self._get(checkpoint.run_id)
            current = run.head
            if current.version != expected_version:
                raise FencedError(
                    f"run {checkpoint.run_id!r}: save expected version {expected_version}, found {current.version}"
                )
            base_bytes = len(run.base.encode("utf-8", "surrogatepass")) if run.base is not None else 0
            plan, folded = plan_save(
                Folded(current.state, run.value),
                checkpoint.state,
                seq=len(run.records),
                base_bytes=base_bytes,
                value=checkpoint.value,
            )
            if plan.inline is not None:
                run.base = plan.inline
            if plan.record is not None:
                run.records.append(plan.record)
            if plan.drop_base:
                run.base = None
            # The epoch belongs to the store, not to the caller's copy: only claim() moves it.
            run.head = _copy(checkpoint, version=current.version + 1, epoch=current.epoch)
            run.value = folded.value
            return self._touch(run)

    def version(self, run_id: str) -> int:
        """The run's current version. Raises ``RunNotFoundError``."""
        with self._lock:
            return self._get(run_id).head.version

    def latest_run(self, chat_id: str, principal: str | None) -> str | None:
        """The run created last for ``principal``'s chat (runs are kept in creation order)."""
        with self._lock:
            heads = [run.head for run in self._runs.values()]
        return next((h.run_id for h in reversed(heads) if h.chat_id == chat_id and h.principal == principal), None)

    def _get(self, run_id: str) -> _Run:
        try:
            return self._runs[run_id]
        except KeyError:
            raise RunNotFoundError(run_id) from None

    def _touch(self, run: _Run) -> Checkpoint:
        return _copy(run.head)


class MemoryChunkLog:
    """A :class:`~durable_harness.ports.ChunkLog` held in lists, with the same fencing rules."""

    def __init__(self) -> None:
        """Create an empty log."""
        self._lock = threading.Lock()
        self._chunks: dict[str, list[str]] = {}
        # Highest epoch seen per run; a run never opened is fenced at 0, so any epoch may write.
        self._fences: dict[str, int] = {}

    def open(self, run_id: str, epoch: int) -> int:
        """Take the write fence for ``epoch``; return the chunk count. Raises ``FencedError``."""
        with self._lock:
            self._check_epoch(run_id, epoch)
            self._fences[run_id] = epoch
            return len(self._chunks.get(run_id, ()))

    def append(self, run_id: str, start: int, chunks: Sequence[str], epoch: int) -> int:
        """Append ``chunks`` at ``start``, all or nothing; returns the new count."""
        check_chunks(chunks)
        with self._lock:
            self._check_epoch(run_id, epoch)
            log = self._chunks.setdefault(run_id, [])
            if start != len(log):
                raise LogConflictError(f"run {run_id!r}: append at {start}, but the log holds {len(log)} chunks")
            # A newer epoch appending without open() still takes the fence, as the file log does.
            self._fences[run_id] = epoch
            log.extend(chunks)
            return len(log)

    def read(self, run_id: str, start: int, limit: int | None = None) -> list[str]:
        """Chunks from absolute index ``start`` (at most ``limit``); empty past the end."""
        check_read_args(start, limit)
        with self._lock:
            log = self._chunks.get(run_id, [])
            end = len(log) if limit is None else start + limit
            return log[start:end]

    def count(self, run_id: str) -> int:
        """The number of chunks in the run's log (0 for a log never written)."""
        with self._lock:
            return len(self._chunks.get(run_id, ()))

    def tail(self, run_id: str, n: int) -> tuple[int, list[str]]:
        """The log's count and its last ``n`` chunks (all of them when it holds fewer)."""
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        with self._lock:
            log = self._chunks.get(run_id, [])
            return len(log), log[max(0, len(log) - n) :] if n else []

    def _check_epoch(self, run_id: str, epoch: int) -> None:
        fence = self._fences.get(run_id, 0)
        if epoch < fence:
            raise FencedError(f"run {run_id!r}: epoch {epoch} is older than the log's fence {fence}")
