"""The checkpoint store's contract, held once: what the memory, SQLite and DynamoDB/S3 stores
decide the same way, so that each implements only its I/O.

:class:`BaseCheckpointStore` gives a new record version 1 and epoch 0; makes the fencing decisions
of ``claim`` and ``save`` and words their errors (an adapter reports a head at another version, or
a conditional write that failed on one, as :class:`VersionConflict`: for DynamoDB the version
check is the write's condition); plans a save (:mod:`.records`) over the state known at the version
it replaces, kept per run as the base of the next delta; and copies what it hands out.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ..errors import FencedError, RunNotFoundError
from ..lru import LRU
from ..ports import StoredRun
from .records import Folded, Plan, parse, plan_create, plan_save, utf8_bytes

__all__ = ["BaseCheckpointStore", "Current", "VersionConflict", "handed_out"]


def handed_out(record: StoredRun, **changes: Any) -> StoredRun:
    """A copy of ``record`` (with ``changes``) sharing nothing mutable: ``meta`` is a dict inside a
    frozen dataclass, and the writer's ``value`` belongs to one state only."""
    return replace(record, meta=dict(record.meta), value=None, **changes)


@dataclass(frozen=True)
class Current:
    """A run's head at one version, as a store read or wrote it (a version never changes)."""

    record: StoredRun
    """The head's fields (its ``state`` may be the text as saved; ``folded.text`` is as loaded)."""
    folded: Folded
    """The state at this version: the base of the next save's delta."""
    seq: int = 0
    """How many records the run has."""
    base_bytes: int = 0
    """Size of the head's inline base (0: none)."""
    inc: str | None = None
    """The incarnation of the run id (DynamoDB; None elsewhere)."""


class VersionConflict(Exception):
    """An adapter's report: the head is at version ``found``, not the one expected (``None``: there
    is no live run). The store raises ``FencedError`` or ``RunNotFoundError`` for it."""

    def __init__(self, found: int | None) -> None:
        """Report a head found at ``found``."""
        super().__init__(found)
        self.found = found

    @classmethod
    def check(cls, found: int, expected: int) -> None:
        """Raise the report unless the head's version ``found`` is ``expected``."""
        if found != expected:
            raise cls(found)


class BaseCheckpointStore(ABC):
    """A :class:`~durable_harness.ports.CheckpointStore` whose subclass implements only the I/O."""

    cache_runs: ClassVar[int] = 0
    """How many runs' heads to keep known (0: the adapter holds every run anyway)."""

    def __init__(self) -> None:
        """Start with no head known."""
        self._known: LRU[str, Current] = LRU(self.cache_runs)

    def create(self, checkpoint: StoredRun) -> StoredRun:
        """Store a new run record at version 1, epoch 0. Raises ``RunExistsError``."""
        first, plan = self._first(checkpoint)
        self._remember(self._create(first, plan))
        return handed_out(first.record)

    def claim(self, run_id: str, expected_version: int) -> StoredRun:
        """Bump epoch and version if the version is still ``expected_version``."""
        try:
            return handed_out(self._claim(run_id, expected_version))
        except VersionConflict as conflict:
            raise self._lost(run_id, "claim", expected_version, conflict.found) from None

    def save(self, checkpoint: StoredRun, expected_version: int) -> StoredRun:
        """Write what changed since ``expected_version`` if the version is still that (version + 1)."""
        try:
            with self._current(checkpoint.run_id, expected_version) as current:
                plan, folded = plan_save(current.folded, checkpoint.state, seq=current.seq,
                                         base_bytes=current.base_bytes, value=checkpoint.value)  # fmt: skip
                # The epoch belongs to the store, not to the caller's copy: only claim() moves it.
                saved = handed_out(checkpoint, version=expected_version + 1, epoch=current.record.epoch)
                inline = 0 if plan.drop_base else current.base_bytes if plan.inline is None else utf8_bytes(plan.inline)
                after = Current(saved, folded, current.seq + (plan.record is not None), inline, current.inc)
                self._write(current, after, plan)
        except VersionConflict as conflict:
            raise self._lost(checkpoint.run_id, "save", expected_version, conflict.found) from None
        self._remember(after)
        return handed_out(after.record)

    @staticmethod
    def _first(checkpoint: StoredRun) -> tuple[Current, Plan]:
        """A new run's head, at version 1 and epoch 0, and how its state is stored (inline, or record 1)."""
        record = handed_out(checkpoint, version=1, epoch=0)
        plan = plan_create(record.state)
        inline = 0 if plan.inline is None else utf8_bytes(plan.inline)
        return Current(record, Folded(record.state, parse(record.state)), int(plan.record is not None), inline), plan

    @staticmethod
    def _lost(run_id: str, what: str, expected: int, found: int | None) -> Exception:
        if found is None:
            return RunNotFoundError(run_id)
        if found == expected:  # the version matched: another condition failed (DynamoDB's incarnation)
            return FencedError(f"run {run_id!r}: {what}: the run was created again meanwhile")
        return FencedError(f"run {run_id!r}: {what} expected version {expected}, found {found}")

    def _known_at(self, run_id: str, version: int) -> Current | None:
        """The run's head at ``version`` if this store last saw it there."""
        known = self._known.get(run_id)
        return known if known is not None and known.record.version == version else None

    def _remember(self, current: Current) -> None:
        self._known.put(current.record.run_id, current)

    # --- the I/O -----------------------------------------------------------------------------------

    @abstractmethod
    def _create(self, first: Current, plan: Plan) -> Current:
        """Write the new head ``first`` (and record 1, per ``plan``) or raise ``RunExistsError``."""

    @abstractmethod
    def _claim(self, run_id: str, expected_version: int) -> StoredRun:
        """Bump epoch and version, conditional on the version; the record as claimed."""

    @abstractmethod
    def _current(self, run_id: str, expected_version: int) -> AbstractContextManager[Current]:
        """The head at ``expected_version`` (else ``VersionConflict``), held so that the ``_write``
        inside is atomic with the check (unless the write is conditional itself)."""

    @abstractmethod
    def _write(self, current: Current, after: Current, plan: Plan) -> None:
        """Write ``plan``'s record (number ``after.seq``) and move the head to ``after``."""
