"""Group commit in front of a chunk log (decision D4).

A model streams tokens far faster than a durable store takes writes, and one write per token is
both slow and expensive. :class:`ChunkWriter` buffers chunks and flushes them as one
``ChunkLog.append`` (one file locally, one DynamoDB item deployed): the first chunk of a burst
goes out at once, so the time to first token stays low, and while the model keeps streaming the
rest go out together at most every ``flush_interval``. One append is in flight at a time, so
appends land in order.

The pace is a token bucket: flushes earn credit at one per ``flush_interval``, up to
``flush_burst``, and each flush spends one. With the default burst of 1 a flush waits until
``flush_interval`` has passed since the one before. A burst of 2 lets the first chunk of the
model's output go out at once even when the slice's opening chunks (``start``, flushed at once
too) went out a moment before it; while the model streams the pace is the same (at most
``flush_burst - 1`` extra flushes after each quiet spell, never more than one per interval on
average).

Under pressure the pace backs off: a log that tells whether an append had to be retried
(:class:`~durable_harness.ports.RetriedAppends`: the store throttled it, or failed and was asked
again, as the DynamoDB log tells) doubles the interval after each such append, up to ``MAX_BACKOFF`` times
``flush_interval``, and halves it back after each append that went through at once. The chunks
are the same, in fewer and larger appends: a throttled table gets fewer writes (an on-demand
table's 4,000 write units per second serve about 300 streaming runs at the base pace), and
readers see the stream in coarser steps until it recovers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import suppress
from typing import Any, TypeVar

from ..errors import StorageError
from ..ports import ChunkLog, RetriedAppends
from .base import check_chunks

__all__ = ["MAX_BACKOFF", "SERVING_BURST", "ChunkWriter"]

T = TypeVar("T")

MAX_BACKOFF = 16
"""The most the pace slows down under pressure: ``flush_interval`` times this (1.6 s at 0.1 s)."""

SERVING_BURST = 2
"""The burst the kit serves with, locally and deployed: after a quiet spell the model's first chunk
is not held an interval behind the slice's opening ``start`` flush (see the module)."""


class ChunkWriter:
    """Buffers the chunks of one run and appends them to ``log`` in batches, in order.

    Use it from a running asyncio event loop only, and only from that loop's thread: ``write``
    schedules a background task on the running loop, and the appends themselves run in a worker
    thread (``asyncio.to_thread``) so a slow store never stalls the loop.

    ``start`` is the log's count when the writer begins (what ``ChunkLog.open`` returned) and
    ``epoch`` the fencing token from the claim. ``on_commit(run_id, count)`` runs in the loop
    thread after each successful append, e.g. to wake readers that follow the run.

    A failed append breaks the writer for good: its exception is raised again by the next
    ``write``, ``flush`` or ``close``, and nothing buffered after it is ever written, so the log
    never gets a hole or a chunk out of order.
    """

    def __init__(
        self,
        log: ChunkLog,
        run_id: str,
        *,
        epoch: int,
        start: int,
        flush_interval: float = 0.1,
        flush_burst: int = 1,
        on_commit: Callable[[str, int], None] | None = None,
    ) -> None:
        """Create a writer that appends to ``log`` from index ``start`` with fencing ``epoch``."""
        if start < 0:
            raise ValueError(f"start must be >= 0, got {start}")
        if flush_interval < 0:
            raise ValueError(f"flush_interval must be >= 0, got {flush_interval}")
        if flush_burst < 1:
            raise ValueError(f"flush_burst must be >= 1, got {flush_burst}")
        self._log = log
        self._retries = log if isinstance(log, RetriedAppends) else None
        self._run_id = run_id
        self._epoch = epoch
        self._base_interval = flush_interval
        self._interval = flush_interval  # the current pace: the base one, or backed off (see module)
        self._burst = flush_burst
        self._credit = float(flush_burst)  # flushes that may start now without waiting
        self._credited: float | None = None  # loop time the credit was last brought up to date
        self._on_commit = on_commit
        self._committed = start
        self._buffer: list[str] = []
        self._inflight = 0
        self._error: BaseException | None = None
        self._closed = False
        # The flusher task lives only while there is something to send, so a writer that is
        # dropped without close() (e.g. on an exception path) leaves no pending task behind.
        self._task: asyncio.Task[None] | None = None
        self._urgent = asyncio.Event()  # a flush() caller is waiting: skip the interval
        self._waiters: list[tuple[int, asyncio.Future[int]]] = []
        # flush_then(): the storage call to run in the worker thread right after the append that
        # makes ``target`` durable (one thread hop and no pacing wait for a step boundary).
        self._then: tuple[int, Callable[[], Any], asyncio.Future[Any]] | None = None

    @property
    def run_id(self) -> str:
        """The run whose log this writer appends to."""
        return self._run_id

    @property
    def epoch(self) -> int:
        """The fencing token every append carries."""
        return self._epoch

    @property
    def committed(self) -> int:
        """The number of chunks durable in the log (the log's count as this writer knows it)."""
        return self._committed

    @property
    def end(self) -> int:
        """Committed plus in-flight plus buffered chunks: the index the next written chunk gets."""
        return self._committed + self._inflight + len(self._buffer)

    @property
    def flush_interval(self) -> float:
        """The current pace: ``flush_interval``, or more while the log reports retried appends."""
        return self._interval

    @property
    def error(self) -> BaseException | None:
        """The exception that broke the writer, or ``None`` while it is healthy."""
        return self._error

    def write(self, chunk: str) -> None:
        """Buffer ``chunk`` for the next flush; never blocks. Raises the writer's error if broken."""
        self._raise_if_broken()
        if self._closed:
            raise RuntimeError(f"chunk writer for run {self._run_id!r} is closed")
        # Reject a bad chunk here, where the caller can see it, instead of breaking the writer.
        check_chunks([chunk])
        self._ensure_task()  # first, so that a call outside a loop buffers nothing
        self._buffer.append(chunk)

    async def flush(self) -> int:
        """Wait until every chunk written so far is durable; returns the committed count.

        An explicit flush does not wait out ``flush_interval``: it starts its append as soon as
        the one in flight (if any) has finished. With nothing buffered it returns at once.
        """
        self._raise_if_broken()
        target = self.end
        if self._committed >= target:
            return self._committed
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiters.append((target, future))
        self._urgent.set()
        self._ensure_task()
        return await future

    async def flush_then(self, call: Callable[[], T]) -> T:
        """Flush at once, then run ``call`` (a blocking storage call) in the worker thread; its result.

        What a step boundary does: the chunks so far made durable, then the checkpoint written (or
        the run's version read), in that order. When chunks are buffered, ``call`` runs in the same
        worker-thread trip as their append, right after it, so the boundary costs one trip and no
        wait for ``flush_interval``. ``call`` runs only once the append succeeded; its own error is
        raised here and does not break the writer (the chunks are durable whatever it does).
        """
        self._raise_if_broken()
        if not self._buffer or self._then is not None:
            await self.flush()
            return await asyncio.to_thread(call)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._then = (self.end, call, future)
        self._urgent.set()
        self._ensure_task()
        result: T = await future
        return result

    async def close(self) -> int:
        """Flush, then stop the background task; returns the committed count. Idempotent."""
        try:
            return await self.flush()
        finally:
            self._closed = True
            task = self._task
            if task is not None and not task.done():
                # Only reached when flush() was cancelled with an append in flight: wait for it so
                # the append does not outlive close(). asyncio.wait never raises the task's outcome.
                await asyncio.wait([task])

    # --- internals ---------------------------------------------------------------------------------

    def _raise_if_broken(self) -> None:
        if self._error is not None:
            raise self._error

    def _ensure_task(self) -> None:
        # A finished task cannot have missed a chunk: it ends only after seeing an empty buffer,
        # with no await between that check and its completion.
        if self._task is None or self._task.done():
            loop = asyncio.get_running_loop()  # RuntimeError outside a loop, as documented
            self._task = loop.create_task(self._run(), name=f"chunk-writer:{self._run_id}")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._buffer:
                await self._pace(loop)
                await self._append_buffer(loop)
            # Every flush() request is satisfied; forget it so the next burst waits out the
            # interval again.
            self._urgent.clear()
        except asyncio.CancelledError:
            if self._error is None:
                self._fail(StorageError(f"chunk writer for run {self._run_id!r} was cancelled"))
            raise
        except BaseException as exc:
            # BaseException too: a crash that no code path handles (a test's simulated Lambda
            # death, say) must still reach whoever awaits flush(), or they would wait forever.
            self._fail(exc)
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise

    def _earn(self, now: float) -> None:
        """Bring the credit up to date: one flush per ``flush_interval`` since last time, up to the burst."""
        if self._credited is not None and self._interval > 0:
            self._credit = min(float(self._burst), self._credit + (now - self._credited) / self._interval)
        elif self._interval == 0:
            self._credit = float(self._burst)
        self._credited = now

    async def _pace(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wait until a flush has been earned (see the module), unless urged."""
        if self._urgent.is_set():
            return
        self._earn(loop.time())
        delay = (1 - self._credit) * self._interval
        if delay > 0:
            with suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._urgent.wait()

    async def _append_buffer(self, loop: asyncio.AbstractEventLoop) -> None:
        batch, self._buffer = self._buffer, []
        self._inflight = len(batch)
        self._earn(loop.time())
        self._credit = max(0.0, self._credit - 1)  # an urged flush spends what there is
        start = self._committed
        # The flush_then() call this append covers; it stays in _then until answered, so that a
        # failed append fails its caller too (_fail).
        then = self._then if self._then is not None and self._then[0] <= start + len(batch) else None
        if then is not None and then[2].done():  # its caller was cancelled: the call must not run
            self._then = then = None
        count, value, error = await asyncio.to_thread(self._append_then, start, batch, then)
        if count != start + len(batch):
            raise StorageError(f"run {self._run_id!r}: append of {len(batch)} chunks at {start} reported count {count}")
        self._inflight = 0
        self._committed = count
        self._adjust_pace()
        if self._on_commit is not None:
            try:
                self._on_commit(self._run_id, count)
            except Exception as exc:
                # The chunks are durable whatever a listener does; report it, keep writing.
                loop.call_exception_handler({"message": "ChunkWriter on_commit callback failed", "exception": exc})
        for target, future in self._waiters:
            if target <= count and not future.done():
                future.set_result(count)
        self._waiters = [(t, f) for t, f in self._waiters if not f.done()]
        if then is not None:
            self._then = None
        if then is not None and not then[2].done():
            if error is not None:
                then[2].set_exception(error)
            else:
                then[2].set_result(value)

    def _append_then(
        self, start: int, batch: list[str], then: tuple[int, Callable[[], Any], asyncio.Future[Any]] | None
    ) -> tuple[int, Any, BaseException | None]:
        """In the worker thread: the append, then (if it went through) a ``flush_then`` call."""
        count = self._log.append(self._run_id, start, batch, self._epoch)
        if then is None or count != start + len(batch):
            return count, None, None
        try:
            return count, then[1](), None
        except Exception as exc:  # the call's own failure, for its caller: the chunks are durable
            return count, None, exc

    def _adjust_pace(self) -> None:
        """Back off after an append the log had to retry; come back after one it did not."""
        if self._retries is None or self._base_interval == 0:
            return
        if self._retries.retried(self._run_id):
            self._interval = min(self._interval * 2, self._base_interval * MAX_BACKOFF)
        else:
            self._interval = max(self._base_interval, self._interval / 2)

    def _fail(self, exc: BaseException) -> None:
        """Break the writer: drop what is buffered and fail every waiting flush()."""
        self._error = exc
        self._buffer.clear()
        self._inflight = 0
        then, self._then = self._then, None
        if then is not None and not then[2].done():
            then[2].set_exception(exc)
        for _, future in self._waiters:
            if not future.done():
                future.set_exception(exc)
        self._waiters.clear()
