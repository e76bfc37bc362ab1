"""The first slice of a chat run, run by the chat process that streams it (decision D14).

Deployed, a chat POST that creates a run does not wait for the state machine to start a slice
function: it runs the run's first slice itself, as the local kit runs every slice, and streams it
to its client from the commit signal (the chunks it has just committed, from the log's cache) as
it writes the durable log all the same. Short turns stream at local speed, pay no second
function, and need no polling. The orchestrator is told through a
:class:`~durable_harness.ports.SliceHandover`:

* ``start`` is called once the slice has claimed the run and committed its first chunk: the
  model call has begun, and the process only waits for it, so the request costs the first chunk
  nothing (a slice that commits nothing within ``start_after`` seconds starts it then). The
  driver it starts waits for this slice first;
* while the slice runs, a heartbeat every third of ``heartbeat_seconds``;
* at the end of the slice (the turn ended or paused, or the budget is spent at a step boundary)
  ``hand_over`` with the run's status: a run that needs more slices goes on in the slice function,
  and this process's stream follows the log as any other does;
* a slice that failed calls ``fail`` (the driver takes over at once, from the checkpoint); a slice
  fenced off (the driver took over after a missed heartbeat, or a cancel ended the run) stops
  quietly: whoever fenced it off writes the rest of the log;
* a start that failed is tried again at the end of the slice. A run that ended needs no driver;
  one that needs more slices and still cannot be started is ended as failed (``error`` and
  ``finish``), so that no client waits for a run nothing drives.

A client that disconnects changes nothing: the slice goes on to its end (the POST's response,
and so the invocation, lasts until it is done, see :meth:`InlineSlices.settle`; behind the Lambda
Web Adapter the app is not even told of a disconnect), and the client resumes from the log. A
process that dies sends no heartbeat: the driver takes over, with ``reset-step`` if it died
mid-step.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from ..errors import FencedError
from ..ports import SliceHandover
from ..runner.runner import Runner
from ..runner.state import RunState
from .notifier import CommitSignal

__all__ = ["InlineSlices"]

logger = logging.getLogger(__name__)

NOT_SCHEDULED = "The run could not be continued: its next slice could not be scheduled."
"""The error a run ends with when it needs more slices and no driver could be started for it."""


class InlineSlices:
    """Runs the first slice of new chat runs in this process (see the module docstring).

    ``budget_seconds`` is the slice's time budget (it ends at the first step boundary after it).
    ``on_slice(before, state)`` is told of the slice's outcome (deployed: the lifecycle events a
    slice function would publish). ``start_attempts`` bounds the tries of a failed start.
    """

    def __init__(
        self,
        runner: Runner,
        handover: SliceHandover,
        signal: CommitSignal,
        *,
        budget_seconds: float,
        on_slice: Callable[[str, RunState], None] | None = None,
        start_attempts: int = 3,
        retry_delay: float = 0.5,
        start_after: float = 1.0,
    ) -> None:
        """Run first slices with ``runner``, hand them over through ``handover``."""
        self.runner = runner
        self.handover = handover
        self.signal = signal
        self.budget_seconds = budget_seconds
        self.on_slice = on_slice
        self.start_attempts = start_attempts
        self.retry_delay = retry_delay
        self.start_after = start_after
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def begin(self, state: RunState) -> None:
        """Start the run's driver and its first slice here (needs a running loop)."""
        run_id = state.run_id
        if run_id in self._tasks:
            return
        self.signal.hold(run_id)  # before the first commit: its readers wait for the signal
        loop = asyncio.get_running_loop()
        started = loop.create_task(self._start(run_id))
        task = loop.create_task(self._drive(state, started), name=f"inline-slice:{run_id}")
        self._tasks[run_id] = task
        task.add_done_callback(lambda done: self._tasks.pop(run_id) if self._tasks.get(run_id) is done else None)

    def running(self, run_id: str) -> bool:
        """True while this process runs a slice of the run (or hands it over)."""
        task = self._tasks.get(run_id)
        return task is not None and not task.done()

    async def settle(self, run_id: str) -> None:
        """Wait until the run's slice here is done and handed over (at once when there is none).

        Shielded: a request that waits and is cancelled does not cancel the slice.
        """
        task = self._tasks.get(run_id)
        if task is None:  # none ran, or it is done already
            self.signal.forget(run_id)
            return
        try:
            await asyncio.shield(task)
        finally:
            if task.done():
                self.signal.forget(run_id)  # its readers in this process are done with it too

    # --- internals ---------------------------------------------------------------------------------

    async def _drive(self, state: RunState, started: asyncio.Task[None]) -> None:
        run_id, before = state.run_id, state.status
        beats = asyncio.get_running_loop().create_task(self._beat(run_id))
        outcome: RunState | None = None
        failure: BaseException | None = None
        try:
            outcome = await self.runner.run_slice(run_id, budget_seconds=self.budget_seconds)
        except FencedError as exc:
            logger.info("run %s: the in-process slice was fenced off (taken over, or cancelled): %s", run_id, exc)
        except Exception as exc:  # the driver redoes the slice from the checkpoint
            logger.exception("run %s: the in-process slice failed; handing the run over", run_id)
            failure = exc
        finally:
            beats.cancel()
            self.signal.release(run_id)  # readers look at the log themselves from now on
        has_driver = await self._started(run_id, started)
        try:
            if outcome is not None and self.on_slice is not None:
                await asyncio.to_thread(self.on_slice, before, outcome)
            if outcome is None:
                if failure is not None and has_driver:
                    await asyncio.to_thread(self.handover.fail, run_id, type(failure).__name__)
                elif failure is not None:
                    await self._end_unscheduled(run_id)
            elif has_driver:
                await asyncio.to_thread(self.handover.hand_over, run_id, outcome.status, outcome.slices)
            elif not outcome.terminal:
                await self._end_unscheduled(run_id)
        except Exception:  # the driver (if any) takes over when its task times out
            logger.exception("run %s: could not hand the in-process slice over", run_id)

    async def _start(self, run_id: str) -> None:
        """Start the driver once the slice's first chunk is committed (or ``start_after`` passed)."""
        await self.signal.wait(run_id, 0, self.start_after)
        await asyncio.to_thread(self.handover.start, run_id)

    async def _started(self, run_id: str, started: asyncio.Task[None]) -> bool:
        """Whether the run's driver was started (trying again, up to ``start_attempts`` in all)."""
        delay = self.retry_delay
        for attempt in range(1, self.start_attempts + 1):
            try:
                if attempt == 1:
                    await started
                else:
                    await asyncio.to_thread(self.handover.start, run_id)
                return True
            except Exception as exc:
                logger.warning("run %s: could not start its driver (attempt %d): %s", run_id, attempt, exc)
                if attempt < self.start_attempts:
                    await asyncio.sleep(delay)
                    delay *= 2
        return False

    async def _end_unscheduled(self, run_id: str) -> None:
        """End a run that needs more slices than this process ran and that nothing else can drive."""
        logger.error("run %s: no driver could be started; ending the run as failed", run_id)
        await self.runner.finalize(run_id, status="failed", error=NOT_SCHEDULED)

    async def _beat(self, run_id: str) -> None:
        interval = self.handover.heartbeat_seconds / 3
        while True:
            await asyncio.sleep(interval)
            try:
                alive = await asyncio.to_thread(self.handover.heartbeat, run_id)
            except Exception as exc:  # a lost heartbeat is sent again by the next one
                logger.warning("run %s: heartbeat failed: %s", run_id, exc)
                continue
            if not alive:
                # The driver no longer waits: it took over (the slice's next write is fenced off)
                # or the run was cancelled. Nothing more to keep alive.
                logger.info("run %s: the driver no longer waits for the in-process slice", run_id)
                return
