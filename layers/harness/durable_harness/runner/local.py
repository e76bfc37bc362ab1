"""An in-process orchestrator that drives slices the way the state machine does.

Loop: run a slice; go on while the run is ``ready_for_next_step``; stop when it pauses or ends.
Retryable errors (storage trouble, a crashed slice) are retried with backoff from the last
checkpoint; anything else, or too many attempts, goes to the failure finalizer, which ends the
run with ``error`` and ``finish`` so that no client waits forever. A slice fenced off by a newer
one stops quietly: the newer one owns the run.
"""

from __future__ import annotations

import asyncio
import logging

from ..errors import FencedError, RetryableError
from .runner import Runner
from .state import RunState

logger = logging.getLogger(__name__)


class LocalOrchestrator:
    """Drives runs as asyncio tasks in this process (local mode and tests)."""

    def __init__(
        self,
        runner: Runner,
        *,
        slice_seconds: float | None = 600.0,
        max_attempts: int = 3,
        retry_delay: float = 0.2,
        backoff_rate: float = 2.0,
    ) -> None:
        self.runner = runner
        self.slice_seconds = slice_seconds
        self.max_attempts = max_attempts
        self.retry_delay = retry_delay
        self.backoff_rate = backoff_rate
        self._tasks: dict[str, asyncio.Task[RunState | None]] = {}

    def start(self, run_id: str) -> None:
        """Start driving the run (no-op while it is already being driven). Needs a running loop."""
        task = self._tasks.get(run_id)
        if task is not None and not task.done():
            return
        self._tasks[run_id] = asyncio.get_running_loop().create_task(self.drive(run_id), name=f"run:{run_id}")

    def cancel(self, run_id: str) -> None:
        """Stop driving the run (the caller then finalizes it ``cancelled``, fencing off any slice)."""
        task = self._tasks.get(run_id)
        if task is not None and not task.done():
            task.cancel()

    async def wait(self, run_id: str) -> RunState | None:
        """Wait until the run's current driving task ends; its last state (None if fenced off)."""
        return await self._tasks[run_id]

    async def drive(self, run_id: str) -> RunState | None:
        """Run slices until the run pauses or ends; returns the last state."""
        attempt = 0
        while True:
            try:
                state = await self.runner.run_slice(run_id, budget_seconds=self.slice_seconds)
            except FencedError:
                logger.info("run %s: slice fenced off by a newer writer; stopping", run_id)
                return None
            except RetryableError as exc:
                attempt += 1
                if attempt >= self.max_attempts:
                    logger.error("run %s: slice failed %d times: %s", run_id, attempt, exc)
                    return await self.runner.finalize(run_id, error="The run failed after repeated errors.")
                logger.warning("run %s: slice attempt %d failed (%s); retrying", run_id, attempt, exc)
                await asyncio.sleep(self.retry_delay * self.backoff_rate ** (attempt - 1))
                continue
            except Exception:
                logger.exception("run %s: slice failed", run_id)
                return await self.runner.finalize(run_id, error="The run failed because of an internal error.")
            attempt = 0
            if state.status != "ready_for_next_step":
                return state

    async def aclose(self) -> None:
        """Cancel every task still running (server shutdown)."""
        tasks = [t for t in self._tasks.values() if not t.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
