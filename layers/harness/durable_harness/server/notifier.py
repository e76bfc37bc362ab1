"""Wakes stream readers when a run's log grows (in-process; other processes fall back to polling).

A run may also be *held*: its writer is in this process (the deployed chat function running a
run's first slice itself, decision D14), so its readers need not poll the log while it lasts, and
read only what the signal says was committed (which the log's cache holds). Releasing the run
wakes them all: from then on they look at the log themselves.
"""

from __future__ import annotations

import asyncio


class CommitSignal:
    """Per-run "the log now has N chunks" notifications for readers in the same event loop."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._waiters: dict[str, list[tuple[int, asyncio.Future[None]]]] = {}
        self._held: set[str] = set()

    def notify(self, run_id: str, count: int) -> None:
        """Record that the run's log has ``count`` chunks and wake readers waiting for them."""
        if count <= self._counts.get(run_id, -1):
            return
        self._counts[run_id] = count
        waiters = self._waiters.get(run_id)
        if not waiters:
            return
        keep = []
        for index, future in waiters:
            if count > index:
                if not future.done():
                    future.set_result(None)
            else:
                keep.append((index, future))
        if keep:
            self._waiters[run_id] = keep
        else:
            del self._waiters[run_id]

    async def wait(self, run_id: str, index: int, timeout: float) -> bool:
        """Wait until the log has a chunk at ``index``; False on timeout."""
        if self._counts.get(run_id, -1) > index:
            return True
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (index, future)
        self._waiters.setdefault(run_id, []).append(entry)
        try:
            await asyncio.wait_for(future, timeout)
            return True
        except TimeoutError:
            return False
        finally:
            waiters = self._waiters.get(run_id)
            if waiters and entry in waiters:
                waiters.remove(entry)
                if not waiters:
                    del self._waiters[run_id]

    def forget(self, run_id: str) -> None:
        """Drop what is known about a run (after it ended and readers are gone)."""
        self._counts.pop(run_id, None)
        self._held.discard(run_id)

    def count(self, run_id: str) -> int | None:
        """The chunk count last notified for the run (``None``: nothing notified)."""
        return self._counts.get(run_id)

    def hold(self, run_id: str) -> None:
        """Note that the run's writer is in this process: every commit of it will be notified."""
        self._held.add(run_id)

    def held(self, run_id: str) -> bool:
        """True while the run's writer is in this process (between :meth:`hold` and :meth:`release`)."""
        return run_id in self._held

    def release(self, run_id: str) -> None:
        """The run's writer in this process is done: wake every reader, to look at the log itself."""
        self._held.discard(run_id)
        for _, future in self._waiters.pop(run_id, []):
            if not future.done():
                future.set_result(None)
