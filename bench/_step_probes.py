"""Probes of the step boundary for ``step_cost.py`` (not a benchmark itself): where a step's time goes.

Nothing in the library changes: the probes replace attributes of its classes and modules for the
time of a measurement (:meth:`Patches.restore` puts them back) and cost a microsecond or two per
call.

* :class:`StorageTimer`: the wall time in every public method of storage objects, per method,
  counting the outermost call only; the label of the call in progress in a thread
  (:meth:`StorageTimer.current`) names what each AWS request was sent for. A chunk-log append is
  labelled by why it was made: ``log.append (at a boundary)`` when a step boundary's store call
  rides on it (``ChunkWriter.flush_then``), ``log.append (paced or final)`` for the group commit's
  own flushes and the run's last.
* :class:`HopMeter`: the trips to a worker thread (``asyncio.to_thread``) and the time each costs
  beyond the call it makes (handing it over, and the event loop waking up on its result), those
  made while a step boundary is awaited apart.
* :class:`Boundaries`: the wall time a turn waits at its step boundaries (``SliceProgress``'s
  ``defer``, ``save`` and ``commit``: the checkpoint's encoding, the flush, the store call and the
  hop of each).
* :class:`StageClock`: the CPU time of named stages (functions of the agent, the runner, the
  stores, the model client), each call's own time (a stage called inside another counts for
  itself only), per step; garbage collection is a stage of its own.
* :func:`floor_ms`: the floor of a durable step, one SQLite commit and one file append, raw.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import inspect
import os
import sqlite3
import statistics
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from durable_harness.chunks.writer import ChunkWriter
from durable_harness.runner.encoding import StateEncoder
from durable_harness.runner.progress import SliceProgress

_local = threading.local()  # per thread: the storage call in progress, the stage stack, the append's tag


class Patches:
    """Attributes replaced for a measurement, and put back by :meth:`restore`."""

    def __init__(self) -> None:
        self._undo: list[tuple[Any, str, Any, bool]] = []

    def replace(self, owner: Any, attr: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        """Set ``owner.attr`` to ``make(original)`` (a static method stays one)."""
        raw = inspect.getattr_static(owner, attr)
        own = attr in vars(owner)
        if isinstance(raw, staticmethod):
            new: Any = staticmethod(make(raw.__func__))
        else:
            new = make(raw)
        setattr(owner, attr, new)
        self._undo.append((owner, attr, raw, own))

    def restore(self) -> None:
        """Put every replaced attribute back, the last replaced first."""
        for owner, attr, raw, own in reversed(self._undo):
            if own:
                setattr(owner, attr, raw)
            else:
                delattr(owner, attr)
        self._undo.clear()


class StorageTimer:
    """Wraps every public method of storage objects (on the instances) to time them, per method."""

    def __init__(self) -> None:
        self.seconds: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()

    @property
    def total(self) -> float:
        """Seconds in storage calls, all methods."""
        return sum(self.seconds.values())

    def reset(self) -> None:
        """Forget what was timed so far."""
        self.seconds, self.calls = Counter(), Counter()

    @staticmethod
    def current() -> str:
        """The storage call in progress in this thread (the outermost), or ``""``."""
        return getattr(_local, "storage", "")

    def attach(self, obj: Any, name: str) -> Any:
        """Time ``obj``'s public methods; returns ``obj``."""
        for attr in dir(type(obj)):
            fn = getattr(obj, attr, None)
            if attr.startswith("_") or not callable(fn) or isinstance(getattr(type(obj), attr, None), property):
                continue
            setattr(obj, attr, self._wrap(fn, f"{name}.{attr}"))
        return obj

    def _wrap(self, fn: Callable[..., Any], label: str) -> Callable[..., Any]:
        # The storage methods are synchronous (the runner calls them in worker threads).
        def timed(*args: Any, **kwargs: Any) -> Any:
            if getattr(_local, "storage", ""):  # inside another storage call: counted there
                return fn(*args, **kwargs)
            name = label
            if label == "log.append":
                name += " (at a boundary)" if getattr(_local, "boundary", False) else " (paced or final)"
            _local.storage, began = name, time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                _local.storage = ""
                self.seconds[name] += time.perf_counter() - began
                self.calls[name] += 1

        return timed


def tag_boundary_appends(patches: Patches) -> None:
    """Tell a chunk-log append that a step boundary's store call rides on it (``flush_then``)."""

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def append_then(writer: Any, start: int, batch: Any, then: Any) -> Any:
            _local.boundary = then is not None
            try:
                return original(writer, start, batch, then)
            finally:
                _local.boundary = False

        return append_then

    patches.replace(ChunkWriter, "_append_then", make)


class HopMeter:
    """Counts the trips to a worker thread (``asyncio.to_thread``) and their cost beyond the call;
    apart, those that start while ``during()`` holds (a step boundary is awaited)."""

    def __init__(self, patches: Patches, during: Callable[[], bool]) -> None:
        self.during = during
        self.hops, self.seconds = 0, 0.0
        self.hops_at, self.seconds_at = 0, 0.0
        patches.replace(asyncio, "to_thread", self._make)

    def reset(self) -> None:
        """Forget what was counted so far."""
        self.hops, self.seconds, self.hops_at, self.seconds_at = 0, 0.0, 0, 0.0

    def _make(self, original: Callable[..., Any]) -> Callable[..., Any]:
        async def to_thread(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
            inside = [0.0]

            def call() -> Any:
                began = time.perf_counter()
                try:
                    return func(*args, **kwargs)
                finally:
                    inside[0] = time.perf_counter() - began

            began, at = time.perf_counter(), self.during()
            try:
                return await original(call)
            finally:
                cost = time.perf_counter() - began - inside[0]
                self.hops += 1
                self.seconds += cost
                if at:
                    self.hops_at += 1
                    self.seconds_at += cost

        return to_thread


class Boundaries:
    """The wall time a turn waits in ``SliceProgress``'s writes (a step boundary each), by kind, and
    the time in them spent encoding the checkpoint (``StateEncoder.checkpoint``, only called there)."""

    def __init__(self, patches: Patches) -> None:
        self.seconds: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()
        self.encoding = 0.0
        self.active = 0  # boundaries being awaited now
        for name in ("defer", "save", "commit"):
            patches.replace(SliceProgress, name, functools.partial(self._make, name))
        patches.replace(StateEncoder, "checkpoint", self._make_encoding)

    def reset(self) -> None:
        """Forget what was timed so far."""
        self.seconds, self.calls, self.encoding = Counter(), Counter(), 0.0

    def _make_encoding(self, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def timed(encoder: Any, *args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return original(encoder, *args, **kwargs)
            finally:
                self.encoding += time.perf_counter() - began

        return timed

    def _make(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        async def timed(progress: Any, *args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            self.active += 1
            try:
                return await original(progress, *args, **kwargs)
            finally:
                self.active -= 1
                self.seconds[name] += time.perf_counter() - began
                self.calls[name] += 1

        return timed


class StageClock:
    """The thread CPU time of named stages, per step (``step()``: the step in progress).

    A stage's time is its own: what a stage called inside it (or a garbage collection) spends is
    counted there instead. Synchronous stages wrap a function; :meth:`awaiting` times each step of
    an awaitable (each ``send`` into it runs synchronously until it waits), so that an async
    stage's CPU is its own and not the event loop's other tasks'.
    """

    GC = "garbage collection"

    def __init__(self, patches: Patches, step: Callable[[], int]) -> None:
        self.patches = patches
        self.step = step
        self.cpu: defaultdict[str, defaultdict[int, float]] = defaultdict(lambda: defaultdict(float))
        self.calls: defaultdict[str, Counter[int]] = defaultdict(Counter)
        gc.callbacks.append(self._gc)
        self._gc_began: dict[int, tuple[float, int]] = {}

    def close(self) -> None:
        """Stop timing garbage collections (the patches are the caller's to restore)."""
        gc.callbacks.remove(self._gc)

    def wrap(self, owner: Any, attr: str, label: str) -> None:
        """Time ``owner.attr`` (a function or method) as stage ``label``."""
        self.patches.replace(owner, attr, lambda fn: self._timed(fn, label))

    @contextmanager
    def stage(self, label: str) -> Iterator[None]:
        """Time the block as stage ``label``."""
        stack: list[float] = _local.__dict__.setdefault("stages", [])
        step, began = self.step(), time.thread_time()
        stack.append(0.0)
        try:
            yield
        finally:
            spent = time.thread_time() - began
            inner = stack.pop()
            if stack:
                stack[-1] += spent
            self.cpu[label][step] += spent - inner
            self.calls[label][step] += 1

    def awaiting(self, awaitable: Any, label: str) -> Generator[Any, Any, Any]:
        """Await ``awaitable`` (use as ``await clock.awaiting(...)`` through :class:`_Awaited`)."""
        it = awaitable.__await__()
        value, error = None, None
        while True:
            with self.stage(label):
                try:
                    yielded = it.throw(error) if error is not None else it.send(value)
                except StopIteration as stop:
                    return stop.value
            try:
                value, error = (yield yielded), None
            except GeneratorExit:
                it.close()
                raise
            except BaseException as exc:  # the task's cancellation, say: passed to the awaitable
                value, error = None, exc

    def timed_await(self, awaitable: Any, label: str) -> Any:
        """An awaitable that awaits ``awaitable``, timing its steps as stage ``label``."""
        return _Awaited(self, awaitable, label)

    def per_step(self, label: str, steps: int) -> list[float]:
        """Stage ``label``'s seconds at steps 1..``steps``."""
        by_step = self.cpu.get(label, {})
        return [by_step.get(k, 0.0) for k in range(1, steps + 1)]

    def _timed(self, fn: Callable[..., Any], label: str) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.stage(label):
                return fn(*args, **kwargs)

        return timed

    def _gc(self, phase: str, info: dict[str, Any]) -> None:
        me = threading.get_ident()
        if phase == "start":
            self._gc_began[me] = (time.thread_time(), self.step())
            return
        began, step = self._gc_began.pop(me, (None, 0))
        if began is None:
            return
        spent = time.thread_time() - began
        stack = getattr(_local, "stages", None)
        if stack:
            stack[-1] += spent  # not the stage it interrupted
        self.cpu[self.GC][step] += spent
        self.calls[self.GC][step] += 1


class _Awaited:
    """``await``-able form of :meth:`StageClock.awaiting`."""

    def __init__(self, clock: StageClock, awaitable: Any, label: str) -> None:
        self._args = clock, awaitable, label

    def __await__(self) -> Generator[Any, Any, Any]:
        clock, awaitable, label = self._args
        return clock.awaiting(awaitable, label)


def floor_ms(root: Path, n: int = 200, size: int = 1000) -> float:
    """The floor of a durable step, raw: one SQLite commit of a ``size``-byte row (WAL,
    ``synchronous=NORMAL``, as the local store) and one append of ``size`` bytes to an open file;
    the median ms of ``n``."""
    conn = sqlite3.connect(root / "floor.sqlite3", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
    body, line = "x" * size, b"x" * (size - 1) + b"\n"
    fd = os.open(root / "floor.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    times = []
    try:
        for i in range(n):
            began = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t VALUES (?, ?)", (i, body))
            conn.execute("COMMIT")
            os.write(fd, line)
            times.append(time.perf_counter() - began)
    finally:
        os.close(fd)
        conn.close()
    return statistics.median(times) * 1000
