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
* while the slice runs, a heartbeat every ``heartbeat_interval()`` seconds;
* at the end of the slice (the turn ended or paused, or the budget is spent at a step boundary)
  ``hand_over`` with the run's status: a run that needs more slices goes on in the slice function,
  and this process's stream follows the log as any other does;
* a slice that failed calls ``fail`` (the driver takes over at once, from the checkpoint); a slice
  fenced off (the driver took over after a missed heartbeat, or a cancel ended the run) stops
  quietly: whoever fenced it off writes the rest of the log;
* a start that failed (Step Functions throttles ``StartExecution``, or answers 5xx) is tried
  again with capped exponential backoff and jitter while the slice runs, and after it, while the
  run needs more slices, until ``start_window`` seconds have passed since the first try. A run
  that ended needs no driver (the tries stop with the slice); one that needs more slices and
  still cannot be started is then ended as failed (``error`` and ``finish``, with
  :data:`NOT_SCHEDULED`), so that no client waits for a run nothing drives. A start refused for
  good (permissions, configuration: a :class:`~durable_harness.errors.FatalError`) is not tried
  again.

A client that disconnects changes nothing: the slice goes on to its end (the POST's response,
and so the invocation, lasts until it is done, see :meth:`InlineSlices.settle`; behind the Lambda
Web Adapter the app is not even told of a disconnect), and the client resumes from the log. A
process that dies sends no heartbeat: the driver takes over, with ``reset-step`` if it died
mid-step.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

from ..agent.control import retry_delay
from ..errors import FatalError, FencedError
from ..ports import SliceHandover
from ..runner.runner import Runner
from ..runner.state import RunState
from .notifier import CommitSignal

__all__ = ["NOT_SCHEDULED", "InlineSlices", "start_backoff"]

logger = logging.getLogger(__name__)

NOT_SCHEDULED = (
    "The run could not be continued: its next slice could not be scheduled (the orchestrator refused "
    "to start it; the chat function's log says why). Send the message again in a minute."
)
"""The error a run ends with when it needs more slices and no driver could be started for it."""


def start_backoff(attempt: int) -> float:
    """Seconds to wait after failed start number ``attempt`` (1-based): full jitter over a
    doubling base of 1 s, capped at 10 s (Step Functions' throttling buckets refill per second)."""
    return random.uniform(0.0, retry_delay(attempt - 1, None, initial=1.0, cap=10.0))


class _Start:
    """What the start of one run's driver needs to know of its slice."""

    def __init__(self) -> None:
        self.slice_over = asyncio.Event()
        self.needed = True
        """False once the slice is over and the run needs no driver (it ended, or was taken over)."""


@dataclass(eq=False)
class InlineSlices:
    """Runs the first slice of new chat runs with ``runner`` in this process, handing them over
    through ``handover`` (see the module docstring).

    ``budget_seconds`` is the slice's time budget (it ends at the first step boundary after it).
    ``on_slice(before, state)`` is told of the slice's outcome (deployed: the lifecycle events a
    slice function would publish). A failed start is tried again after ``backoff(attempt)``
    seconds, while the slice runs and then up to ``start_window`` seconds after the first try
    (see the module docstring); both may be changed on the instance (tests make them short).
    """

    runner: Runner
    handover: SliceHandover
    signal: CommitSignal
    _: KW_ONLY
    budget_seconds: float
    on_slice: Callable[[str, RunState], None] | None = None
    start_window: float = 60.0
    backoff: Callable[[int], float] = start_backoff
    start_after: float = 1.0
    _tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict, init=False)

    def begin(self, state: RunState, *, public_url: str | None = None) -> None:
        """Start the run's driver and its first slice here (needs a running loop); ``public_url``
        is the slice's base of event URLs (the chat request's origin: the function cannot name its
        own Function URL in its environment, a circular reference in the template)."""
        run_id = state.run_id
        if run_id in self._tasks:
            return
        self.signal.hold(run_id)  # before the first commit: its readers wait for the signal
        loop = asyncio.get_running_loop()
        start = _Start()
        started = loop.create_task(self._start(run_id, start))
        task = loop.create_task(self._drive(state, start, started, public_url), name=f"inline-slice:{run_id}")
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

    async def _drive(
        self, state: RunState, start: _Start, started: asyncio.Task[bool], public_url: str | None = None
    ) -> None:
        run_id, before = state.run_id, state.status
        beats = asyncio.get_running_loop().create_task(self._beat(run_id))
        outcome: RunState | None = None
        failure: BaseException | None = None
        try:
            outcome = await self.runner.run_slice(run_id, budget_seconds=self.budget_seconds, public_url=public_url)
        except FencedError as exc:
            logger.info("run %s: the in-process slice was fenced off (taken over, or cancelled): %s", run_id, exc)
        except Exception as exc:  # the driver redoes the slice from the checkpoint
            logger.exception("run %s: the in-process slice failed; handing the run over", run_id)
            failure = exc
        finally:
            beats.cancel()
            self.signal.release(run_id)  # readers look at the log themselves from now on
        # A run that ended, or that was fenced off (taken over, or cancelled), needs no driver.
        start.needed = failure is not None or (outcome is not None and not outcome.terminal)
        start.slice_over.set()
        has_driver = await started
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

    async def _start(self, run_id: str, start: _Start) -> bool:
        """Start the driver once the slice's first chunk is committed (or ``start_after`` passed),
        trying again with backoff (see the module docstring); whether it was started."""
        await self.signal.wait(run_id, 0, self.start_after)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.start_window
        attempt = 0
        while True:
            attempt += 1
            try:
                await asyncio.to_thread(self.handover.start, run_id)
                return True
            except FatalError as exc:  # refused for good: trying again gives the same answer
                logger.error("run %s: could not start its driver: %s", run_id, exc)
                return False
            except Exception as exc:
                logger.warning("run %s: could not start its driver (attempt %d): %s", run_id, attempt, exc)
            resume = loop.time() + self.backoff(attempt)
            if not start.slice_over.is_set():
                with contextlib.suppress(TimeoutError):  # the slice's end may make the start needless
                    await asyncio.wait_for(start.slice_over.wait(), resume - loop.time())
            if not start.needed:
                return False
            if start.slice_over.is_set():
                if resume > give_up:
                    return False
                await asyncio.sleep(max(0.0, resume - loop.time()))

    async def _end_unscheduled(self, run_id: str) -> None:
        """End a run that needs more slices than this process ran and that nothing else can drive."""
        logger.error("run %s: no driver could be started; ending the run as failed", run_id)
        await self.runner.finalize(run_id, status="failed", error=NOT_SCHEDULED)

    async def _beat(self, run_id: str) -> None:
        interval = self.handover.heartbeat_interval()
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
