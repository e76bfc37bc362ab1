"""The three service boundaries the runner knows: a checkpoint store, a chunk log, an orchestrator;
and, in local mode only, the run leases of the in-process orchestrator.

Adapters live in :mod:`durable_harness.storage` (memory, SQLite, files) and, for AWS, in the
DynamoDB / S3 / Step Functions modules. Methods are synchronous because the AWS SDK is; the
async runner calls them in a worker thread where latency matters.

Fencing. A run record carries ``version`` (bumped by every write) and ``epoch`` (bumped when a
slice claims the run). A checkpoint write is conditional on the version the writer read; a chunk
append is conditional on the writer's epoch being the newest the log has seen and on the append
starting at the log's current end. A slice that lost its claim to a newer slice can therefore
write nothing at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class StoredRun:
    """One stored run record: the serialized run state plus its fencing counters (what a
    :class:`CheckpointStore` keeps; a harness's slice point is :class:`durable_harness.harness.Checkpoint`).

    ``state`` is the JSON text of the run state; stores treat it as opaque. ``status``,
    ``principal`` and ``chat_id`` are copied out of it so that stores can index them. ``value``,
    when the writer has it, is the JSON value of ``state`` (which the writer never changes again):
    a store's save diffs it instead of parsing ``state`` (:mod:`durable_harness.checkpoints.records`).
    """

    run_id: str
    state: str
    status: str
    version: int = 0
    epoch: int = 0
    principal: str | None = None
    chat_id: str | None = None
    meta: dict[str, str] = field(default_factory=dict)
    value: Any = field(default=None, compare=False, repr=False)


@runtime_checkable
class CheckpointStore(Protocol):
    """Durable, fenced storage of run records."""

    def create(self, checkpoint: StoredRun) -> StoredRun:
        """Store a new run record at version 1, epoch 0. Raises ``RunExistsError``."""
        ...

    def load(self, run_id: str) -> StoredRun:
        """The newest record of a run (strongly consistent). Raises ``RunNotFoundError``."""
        ...

    def claim(self, run_id: str, expected_version: int) -> StoredRun:
        """Bump the epoch (and version) if the version is still ``expected_version``.

        Returns the claimed record; its ``epoch`` is the caller's fencing token for the chunk
        log. Raises ``FencedError`` when another writer got there first.
        """
        ...

    def save(self, checkpoint: StoredRun, expected_version: int) -> StoredRun:
        """Replace the record if its version is still ``expected_version``; returns the new record
        (version + 1, epoch unchanged). Raises ``FencedError`` otherwise; nothing is written.

        Stores keep a run as a small head plus append-only records (decision D14,
        :mod:`durable_harness.checkpoints.records`): a save writes what changed since the version it
        replaces, never the whole history. ``load`` returns a state equal in value to the one saved
        (the same text for compact JSON)."""
        ...

    def version(self, run_id: str) -> int:
        """The run's current version, read (strongly consistent) from its head alone: much cheaper
        than ``load``. A writer whose version is older has been fenced off. Raises
        ``RunNotFoundError``."""
        ...


@runtime_checkable
class ChunkLog(Protocol):
    """An append-only log of UI message chunks per run, addressed by absolute index.

    Chunks are compact JSON texts, stored and served as they are.
    """

    def open(self, run_id: str, epoch: int) -> int:
        """Take the write fence for ``epoch`` and return the current chunk count.

        Raises ``FencedError`` when a newer epoch already holds the fence. After this call no
        writer with an older epoch can append.
        """
        ...

    def append(self, run_id: str, start: int, chunks: Sequence[str], epoch: int) -> int:
        """Append ``chunks`` at index ``start``; returns the new count.

        Atomic: all chunks or none. Raises ``FencedError`` when ``epoch`` is older than the
        fence, ``LogConflictError`` when ``start`` is not the current count.
        """
        ...

    def read(self, run_id: str, start: int, limit: int | None = None) -> list[str]:
        """Chunks from absolute index ``start`` (at most ``limit``); empty past the end."""
        ...

    def count(self, run_id: str) -> int:
        """The number of chunks in the run's log (0 for a log never written)."""
        ...


@runtime_checkable
class TailReader(Protocol):
    """A chunk log that can read its end in one request (optional: every adapter here has it).

    Resuming at the tail (``startIndex=-5``) needs the count and the last chunks; a log without
    this capability answers with ``count`` and ``read``, two requests where each is remote.
    """

    def tail(self, run_id: str, n: int) -> tuple[int, list[str]]:
        """The log's count and its last ``n`` chunks (all of them when it holds fewer)."""
        ...


def read_tail(log: ChunkLog, run_id: str, n: int) -> tuple[int, list[str]]:
    """``log.tail(run_id, n)`` where the log has it, else the same from ``count`` and ``read``."""
    if isinstance(log, TailReader):
        return log.tail(run_id, n)
    count = log.count(run_id)
    start = max(0, count - n)
    return count, log.read(run_id, start, count - start) if n else []


@runtime_checkable
class CommitCadence(Protocol):
    """A chunk log that knows when a followed run's next append is due (optional).

    Across processes a follower can only poll; polling when the writer's next flush should have
    landed costs one read per flush and adds only the time the write takes.
    """

    def next_commit(self, run_id: str) -> float | None:
        """When the next append is due (epoch seconds), or ``None`` when unknown."""
        ...


@runtime_checkable
class RetriedAppends(Protocol):
    """A chunk log that tells whether a run's last append had to be retried (optional).

    DynamoDB throttles a partition under pressure; the chunk writer
    (:class:`~durable_harness.chunks.writer.ChunkWriter`) backs off its pace while appends are
    retried. A log without it keeps the writer's pace as it is.
    """

    def retried(self, run_id: str) -> bool:
        """Whether the run's last append by this object had to be retried."""
        ...


@dataclass(frozen=True)
class RunSummary:
    """What a run record says about a run without its state: who owns it and where it is."""

    run_id: str
    status: str
    principal: str | None = None
    chat_id: str | None = None


@runtime_checkable
class SummaryReader(Protocol):
    """A checkpoint store that can read a record's summary without its state (optional).

    A stream resume only needs the principal and the status; the state may be hundreds of KB
    (in S3, for a long run), so reading and parsing it would make a resume cost grow with the run.
    """

    def summary(self, run_id: str) -> RunSummary:
        """The record's summary (strongly consistent). Raises ``RunNotFoundError``."""
        ...


def read_summary(store: CheckpointStore, run_id: str) -> RunSummary:
    """``store.summary(run_id)`` where the store has it, else the summary of ``store.load``."""
    if isinstance(store, SummaryReader):
        return store.summary(run_id)
    record = store.load(run_id)
    return RunSummary(record.run_id, record.status, record.principal, record.chat_id)


@dataclass(frozen=True)
class RunListing:
    """One line of a principal's list of runs: what the run record says, without the state."""

    run_id: str
    status: str
    created_at: str
    """When the record was created (ISO 8601, UTC): the list's order."""
    chat_id: str | None = None
    agent: str | None = None


ListPosition = tuple[str, str]
"""Where a list of a principal's runs goes on: the ``(created_at, run_id)`` of the last run seen."""


@dataclass(frozen=True)
class ListQuery:
    """A page of a principal's runs to list (:meth:`PrincipalRuns.runs_of`): at most ``limit`` runs
    created before ``after``, only those whose status is in ``statuses`` and of chat ``chat_id`` when
    given."""

    limit: int
    after: ListPosition | None = None
    statuses: frozenset[str] | None = None
    chat_id: str | None = None


@runtime_checkable
class PrincipalRuns(Protocol):
    """A checkpoint store that lists one principal's runs, newest first (optional: SQLite and
    DynamoDB have it, through an index on (principal, creation time)).

    Only the principal's own partition is read: a position names a place inside it, never a run of
    anyone else, so a position a client made up can only skip some of its own runs.
    """

    def runs_of(self, principal: str, query: ListQuery) -> tuple[list[RunListing], ListPosition | None]:
        """The page of ``principal``'s runs ``query`` asks for (newest first; by creation time, then
        run id), with the position to go on from (None: there are no more). A page may hold fewer
        than ``query.limit`` runs and still have a position (a filter skipped many)."""
        ...


@runtime_checkable
class ChatRuns(Protocol):
    """A checkpoint store that finds a chat's latest run without a scan (optional: every store here
    has it). A resume by chat id (``useChat({resume: true})``) follows that run."""

    def latest_run(self, chat_id: str, principal: str | None) -> str | None:
        """The id of the run created last for ``principal``'s chat ``chat_id`` (strongly consistent),
        or ``None`` when that chat has none."""
        ...


@runtime_checkable
class Orchestrator(Protocol):
    """Drives a run's slices until the run pauses or ends (the state machine, or in-process)."""

    def start(self, run_id: str) -> None:
        """Start (or resume) driving the run. Idempotent for a run already being driven."""
        ...

    def cancel(self, run_id: str) -> None:
        """Stop driving the run. The caller then ends it with ``Runner.finalize(status="cancelled")``,
        whose claim fences off a slice that may still be running."""
        ...


@runtime_checkable
class LeasedStart(Protocol):
    """An orchestrator that takes a new run's lease in the worker-thread trip that creates the run
    (the local one): driving it then starts without a trip of its own before the first slice."""

    def take_lease(self, run_id: str) -> bool:
        """Take the run's lease now (blocking: call it off the event loop); True when it is this
        orchestrator's, False when it is not or storage failed (``start`` then takes it itself)."""
        ...

    def start_leased(self, run_id: str) -> None:
        """``start``, the lease taken already by :meth:`take_lease`."""
        ...


@runtime_checkable
class SliceHandover(Protocol):
    """The orchestrator's side of a first slice run by the chat process that streams it (D14).

    ``start`` starts driving the run so that the driver first waits for the in-process slice;
    while the slice runs the process calls ``heartbeat`` every ``heartbeat_interval()`` seconds
    (without one for three times that long the driver takes the run over, fencing the process's
    writer off);
    at its end, ``hand_over`` gives the driver the slice's outcome (it routes it as it routes a
    slice of its own), or ``fail`` makes it take over at once.
    """

    def heartbeat_interval(self) -> float:
        """Seconds between the process's heartbeats (read once per slice; it may be jittered): the
        driver waits at least three times this long for one before it takes the run over."""
        ...

    def start(self, run_id: str) -> None:
        """Start driving the run, waiting for the in-process slice first. Idempotent."""
        ...

    def heartbeat(self, run_id: str) -> bool:
        """The in-process slice is alive; False once the driver no longer waits for it."""
        ...

    def hand_over(self, run_id: str, status: str, slices: int) -> bool:
        """The in-process slice ended with the run at ``status``; False if the driver no longer
        waited for it (it took the run over, or the run was cancelled)."""
        ...

    def fail(self, run_id: str, reason: str) -> None:
        """The in-process slice failed: the driver takes the run over now."""
        ...


TERMINAL_STATUSES: frozenset[str] = frozenset({"awaiting_tool_approval", "finished", "failed", "cancelled"})
"""Statuses after which no slice runs again (an approval continues in a new run). A run
``awaiting_event`` is not terminal: it goes on (in the same run) once a wait of it is due."""

ACTIVE_STATUSES: tuple[str, ...] = ("not_started", "ready_for_next_step")
"""Checkpoint statuses of a run that still needs slices (neither terminal nor paused for approval)."""


AGENT_META = "agent"
"""The key of a run's agent in its record's ``meta`` (``checkpoint_of`` copies it out of the state),
so that the local orchestrator tells its own runs from the run leases alone (``Lease.agent``)."""


@dataclass(frozen=True)
class Lease:
    """Who drives a run until when (local mode, decision D13); ``owner`` None: nobody does."""

    run_id: str
    owner: str | None
    expires_at: float = 0.0
    """Wall-clock seconds (``time.time()``): processes sharing a data folder share no other clock."""
    agent: str | None = None
    """The run's agent (``RunState.agent``, kept in its record's ``meta``): an orchestrator drives
    only its own agent's runs."""


@runtime_checkable
class RunLeases(Protocol):
    """Which process drives which run, kept next to the run records (local mode only).

    A lease only saves work: two drivers of one run are still kept apart by fencing. Deployed, the
    state machine is the driver and nothing takes leases.
    """

    def acquire_lease(
        self, run_id: str, owner: str, until: float, *, now: float, steal_from: str | None = None
    ) -> Lease:
        """Make ``owner`` the run's driver until ``until`` if the lease is free, lapsed at ``now``,
        already ``owner``'s, or held by ``steal_from`` (an owner known to be dead). Returns the lease
        as it stands afterwards: acquired if and only if its owner is ``owner``."""
        ...

    def renew_leases(self, owner: str, run_ids: Sequence[str], until: float) -> None:
        """Extend ``owner``'s leases of ``run_ids`` to ``until`` (leases it lost stay lost)."""
        ...

    def release_lease(self, run_id: str, owner: str) -> None:
        """Drop the run's lease if ``owner`` holds it (the run needs no driver any more)."""
        ...

    def lease_candidates(self, limit: int = 1000) -> list[Lease]:
        """Runs that may need a driver: every run that is neither terminal nor paused, and every run
        with a lease, each with its lease (``owner`` None when it has none) and its agent."""
        ...


@runtime_checkable
class RunTimers(Protocol):
    """When parked runs are due (local mode only, decision D16): the local orchestrator's timer
    table, kept next to the run records so that a restart finds them. Deployed, the state
    machine's ``Wait`` states are the timers."""

    def set_timer(self, run_id: str, due_at: float) -> None:
        """Start the run at ``due_at`` (wall-clock seconds), replacing its earlier timer."""
        ...

    def clear_timer(self, run_id: str) -> None:
        """Drop the run's timer, if any."""
        ...

    def list_timers(self) -> list[tuple[str, float]]:
        """Every timer, ``(run_id, due_at)``, soonest first."""
        ...
