"""An in-process orchestrator that drives slices the way the state machine does, durably (D13).

Loop: run a slice; go on while the run is ``ready_for_next_step``; stop when it pauses or ends.

* **Storage errors are transient for the run.** A slice that fails with ``StorageError`` (a full
  disk, a read-only folder, a locked database) is run again from its checkpoint with capped
  exponential backoff for as long as it takes: when storage is back, the run goes on from its last
  checkpoint, redoing at most the step that was in flight.
* **Other retryable errors** are retried ``max_attempts`` times, then the run is closed as failed.
  Anything else closes it at once. A slice fenced off by a newer one stops quietly.
* **A run always ends.** Closing (``error`` + ``finish``) is retried with backoff until it lands.
* **Leases** (with ``leases``, see :mod:`.lease`): a run is driven only under this process's
  lease, and only a run of this process's agent (``Runner.agent_id``; another agent's is left to
  a server of that agent), and :meth:`open` (at server start-up) drives every run that needs a
  driver and starts a watchdog that renews the leases of the runs driven here and picks up any run whose lease lapsed
  or whose driver's process died. So every unfinished run has a driver, and a client that follows
  one never waits forever.

* **Parked runs** (status ``awaiting_event``, decision D16) are not driven until due. The earliest
  deadline of a parked run's waits goes in the timer table (``timers``, in the SQLite file
  locally) and an asyncio timer starts the run then; :meth:`open` arms every timer of the table,
  so a sleep that ended while the server was down fires at start-up. An event delivery starts the
  run itself. A run that parks with an awaited event already there goes on at once.

``health`` (a :class:`~durable_harness.storage.health.StorageHealth`) hears of every storage
error and every slice that went through, for the chat service's ``503`` answers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from contextlib import suppress
from dataclasses import KW_ONLY, InitVar, dataclass, field
from typing import Any, Literal, TypeVar

from ..errors import FencedError, OtherAgentError, RetryableError, RunNotFoundError, StorageError
from ..ports import RunLeases, RunTimers
from ..storage.health import StorageHealth
from .lease import LeaseKeeper
from .runner import Runner
from .state import RunState
from .waiting import next_deadline

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(eq=False)
class LocalOrchestrator:
    """Drives runs as asyncio tasks in this process (local mode and tests)."""

    runner: Runner
    _: KW_ONLY
    slice_seconds: float | None = 600.0
    max_attempts: int = 3
    retry_delay: float = 0.2
    backoff_rate: float = 2.0
    max_retry_delay: float = 5.0
    leases: InitVar[RunLeases | None] = None
    lease_seconds: InitVar[float] = 15.0
    health: StorageHealth | None = None
    timers: RunTimers | None = None
    keeper: LeaseKeeper | None = field(init=False)
    _tasks: dict[str, asyncio.Task[RunState | None]] = field(default_factory=dict, init=False)
    _watchdog: asyncio.Task[None] | None = field(default=None, init=False)
    _background: set[asyncio.Task[Any]] = field(default_factory=set, init=False)
    _alarms: dict[str, asyncio.Task[None]] = field(default_factory=dict, init=False)
    _timed: set[str] = field(default_factory=set, init=False)  # runs with a row in the timer table

    def __post_init__(self, leases: RunLeases | None, lease_seconds: float) -> None:
        agent_id = self.runner.agent_id
        self.keeper = LeaseKeeper(leases, seconds=lease_seconds, agent_id=agent_id) if leases is not None else None

    # --- the Orchestrator port --------------------------------------------------------------------

    def start(self, run_id: str) -> None:
        """Start driving the run (no-op while it is already being driven). Needs a running loop."""
        self._start(run_id, leased=False)

    # --- LeasedStart: the chat service creates a run and takes its lease in one worker trip ---------

    def take_lease(self, run_id: str) -> bool:
        """Take the run's lease now, blocking (in the worker thread that created the run); True
        when taken, or when there are no leases. A storage error is False: ``start`` retries."""
        if self.keeper is None:
            return True
        try:
            return self.keeper.take(run_id)
        except StorageError as exc:
            logger.warning("run %s: taking its lease failed (%s); the driver tries again", run_id, exc)
            return False

    def start_leased(self, run_id: str) -> None:
        """:meth:`start` for a run whose lease :meth:`take_lease` took: no trip for it first."""
        self._start(run_id, leased=True)

    def _start(self, run_id: str, *, leased: bool) -> None:
        if self.driving(run_id):
            return
        task = asyncio.get_running_loop().create_task(self._supervise(run_id, leased), name=f"run:{run_id}")
        self._tasks[run_id] = task
        task.add_done_callback(self._retrieve)

    def cancel(self, run_id: str) -> None:
        """Stop driving the run (the caller then finalizes it ``cancelled``, fencing off any slice).

        The run's lease is kept without renewals: should the caller's finalize not get ``finish``
        into the log, the watchdog drives the run again once the lease lapses, and completes it.
        """
        task = self._tasks.get(run_id)
        if task is not None and not task.done():
            task.cancel()
        elif self.keeper is not None:
            # Nobody here drove it: take the lease all the same, so that the run is looked at again.
            self._spawn(self._try_acquire(run_id), f"lease:{run_id}")

    # --- local mode -------------------------------------------------------------------------------

    def driving(self, run_id: str) -> bool:
        """True while a task of this orchestrator drives the run."""
        task = self._tasks.get(run_id)
        return task is not None and not task.done()

    async def wait(self, run_id: str) -> RunState | None:
        """Wait until the run's current driving task ends; its last state (None if it stopped
        without one: fenced off, or another process drives the run)."""
        return await self._tasks[run_id]

    async def open(self) -> None:
        """Server start-up: arm the timers of parked runs, drive every run that needs a driver,
        then keep watching (with leases)."""
        if self.timers is not None and not self._alarms:
            try:
                for run_id, due_at in await asyncio.to_thread(self.timers.list_timers):
                    self._timed.add(run_id)
                    self._alarm(run_id, due_at)
            except StorageError as exc:
                logger.warning("reading the timers of parked runs failed: %s", exc)
        if self.keeper is None or self._watchdog is not None:
            return
        try:
            await self.recover()
        except StorageError as exc:  # the watchdog tries again
            logger.warning("looking for runs to resume failed: %s", exc)
        except Exception:  # never keep the server from starting; the watchdog tries again
            logger.exception("looking for runs to resume failed")
        self._watchdog = self._spawn(self._watch(), "lease-watchdog")

    async def recover(self) -> list[str]:
        """Start driving every run that is neither terminal nor paused and has no live driver, and
        every run whose lease lapsed or whose driver died; returns their ids."""
        if self.keeper is None:
            return []
        orphans = await self.keeper.orphans(self.driving)
        for run_id in orphans:
            logger.info("run %s has no live driver; driving it", run_id)
            self.start(run_id)
        return orphans

    async def drive(self, run_id: str) -> RunState | None:
        """Run slices until the run pauses or ends; returns the last state (None if fenced off)."""
        attempt, storage_failures = 0, 0
        while True:
            try:
                state = await self.runner.run_slice(run_id, budget_seconds=self.slice_seconds)
            except (FencedError, RunNotFoundError) as exc:
                logger.info("run %s: stopping (%s)", run_id, exc)
                return None
            except OtherAgentError as exc:  # a server of the run's own agent drives it, never this one
                logger.warning("run %s: not driven here: %s", run_id, exc)
                await self._release(run_id)
                return None
            except StorageError as exc:
                storage_failures += 1
                self._storage_failed(exc)
                delay = self._delay(storage_failures)
                logger.warning("run %s: storage failed (%s); trying again in %.1f s", run_id, exc, delay)
                await asyncio.sleep(delay)
                continue
            except RetryableError as exc:
                attempt += 1
                if attempt >= self.max_attempts:
                    logger.error("run %s: slice failed %d times: %s", run_id, attempt, exc)
                    reason = f" The last one: {exc}" if exc.shown else ""
                    return await self.close(run_id, error=f"The run failed after repeated errors.{reason}")
                logger.warning("run %s: slice attempt %d failed (%s); retrying", run_id, attempt, exc)
                await asyncio.sleep(self._delay(attempt))
                continue
            except Exception:
                logger.exception("run %s: slice failed", run_id)
                return await self.close(run_id, error="The run failed because of an internal error.")
            self._storage_ok()
            attempt = storage_failures = 0
            if state.status == "awaiting_event" and await asyncio.to_thread(self.runner.due, state):
                continue  # an awaited event came while the run parked, or a deadline passed
            if state.status != "ready_for_next_step":
                await self._set_alarm(run_id, next_deadline(state))
                return state

    async def close(
        self, run_id: str, *, status: Literal["failed", "cancelled"] = "failed", error: str | None = None
    ) -> RunState:
        """End the run with ``error`` (for a failure) and ``finish``, retrying until that lands.

        Storage errors, and a run that keeps changing under the finalizer, are retried with capped
        backoff for as long as it takes; anything else propagates (the lease then lapses and the
        watchdog tries again).
        """
        failures = 0
        while True:
            try:
                state = await self.runner.finalize(run_id, status=status, error=error)
            except (RetryableError, FencedError) as exc:
                failures += 1
                if isinstance(exc, StorageError):
                    self._storage_failed(exc)
                delay = self._delay(failures)
                logger.warning("run %s: closing failed (%s); trying again in %.1f s", run_id, exc, delay)
                await asyncio.sleep(delay)
                continue
            self._storage_ok()
            return state

    async def aclose(self) -> None:
        """Cancel every task still running (server shutdown). Leases are kept: they lapse, or the
        next process on this data folder sees that this one is gone and takes them over at once."""
        tasks = [t for t in [*self._tasks.values(), *self._background] if not t.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._watchdog = None

    # --- internals --------------------------------------------------------------------------------

    async def _set_alarm(self, run_id: str, due_at: float | None) -> None:
        """Record (or drop) the parked run's timer and arm it; best effort on storage errors (a
        timer not recorded still fires in this process, it would only be lost by a restart)."""
        if self.timers is not None and (due_at is not None or run_id in self._timed):
            try:
                if due_at is None:
                    await asyncio.to_thread(self.timers.clear_timer, run_id)
                    self._timed.discard(run_id)
                else:
                    await asyncio.to_thread(self.timers.set_timer, run_id, due_at)
                    self._timed.add(run_id)
            except StorageError as exc:
                logger.warning("run %s: could not record its timer: %s", run_id, exc)
        if due_at is None:
            alarm = self._alarms.pop(run_id, None)
            if alarm is not None:
                alarm.cancel()
        else:
            self._alarm(run_id, due_at)

    def _alarm(self, run_id: str, due_at: float) -> None:
        """Start the run at ``due_at`` (at once if that passed), replacing its earlier alarm."""
        previous = self._alarms.pop(run_id, None)
        if previous is not None:
            previous.cancel()

        async def ring() -> None:
            await asyncio.sleep(max(0.0, due_at - time.time()))
            self._alarms.pop(run_id, None)
            self.start(run_id)

        self._alarms[run_id] = self._spawn(ring(), f"timer:{run_id}")

    async def _supervise(self, run_id: str, leased: bool = False) -> RunState | None:
        """Drive the run under this process's lease (``leased``: taken already); drop the lease
        once the run needs no driver."""
        keeper = self.keeper
        if keeper is not None and not leased and not await self._try_acquire(run_id):
            return None
        try:
            state = await self.drive(run_id)
        except Exception:
            # Not a lost run: its lease lapses without renewals and the watchdog drives it again.
            logger.exception("run %s: its driver stopped; the run is picked up again when its lease lapses", run_id)
            return None
        if state is not None:
            await self._release(run_id)
        return state

    async def _release(self, run_id: str) -> None:
        """Drop this process's lease of the run, if it has leases."""
        if self.keeper is not None:
            with suppress(StorageError):  # a lease left behind lapses, and costs one look later
                await self.keeper.release(run_id)

    async def _try_acquire(self, run_id: str) -> bool:
        """Take the run's lease, retrying storage errors; False while another live driver has it."""
        assert self.keeper is not None
        failures = 0
        while True:
            try:
                acquired = await self.keeper.acquire(run_id)
            except StorageError as exc:
                failures += 1
                self._storage_failed(exc)
                await asyncio.sleep(self._delay(failures))
                continue
            if not acquired:
                logger.info("run %s is driven by another process", run_id)
            return acquired

    async def _watch(self) -> None:
        """Renew this process's leases and drive runs without a live driver, every third of a lease."""
        assert self.keeper is not None
        while True:
            await asyncio.sleep(self.keeper.renew_every)
            try:
                await self.keeper.renew([run_id for run_id in self._tasks if self.driving(run_id)])
                await self.recover()
            except StorageError as exc:
                logger.warning("lease watchdog: %s", exc)
            except Exception:
                logger.exception("lease watchdog failed; trying again")

    def _delay(self, failures: int) -> float:
        return min(self.max_retry_delay, self.retry_delay * self.backoff_rate ** max(failures - 1, 0))

    def _storage_failed(self, exc: BaseException) -> None:
        if self.health is not None:
            self.health.failed(exc)

    def _storage_ok(self) -> None:
        if self.health is not None:
            self.health.succeeded()

    def _spawn(self, work: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
        """A background task, referenced until it ends (the loop keeps only weak references)."""
        task = asyncio.get_running_loop().create_task(work, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    @staticmethod
    def _retrieve(task: asyncio.Task[RunState | None]) -> None:
        # A driving task's outcome is looked at here, so that asyncio never reports "Task
        # exception was never retrieved" for one (drive() handles errors; only a BaseException
        # such as a test's simulated crash gets this far).
        if not task.cancelled() and task.exception() is not None:
            logger.error("run task %s ended with %r", task.get_name(), task.exception())
