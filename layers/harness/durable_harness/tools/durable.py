"""A tool call's durable primitives (decision D16): recorded steps, event waits, sleeps, event URLs.

A tool reaches them through its :class:`~durable_harness.tools.ToolContext`::

    @tool
    async def run_build(input: BuildInput, ctx: ToolContext) -> dict:
        hook = ctx.event_url("build-done")
        build = await ctx.step("start", lambda: start_build(input.repo, notify=hook))
        event = await ctx.wait_for_event("build-done", timeout_seconds=3600)
        await ctx.sleep(5)
        return {"build": build["id"], "status": event["status"]}

**The replay rule.** When a waiting run resumes (and after a slice end or a crash), the tool's
function runs again *from its start*. What it did before the wait happens again unless it went
through ``ctx.step``: a recorded step returns its recorded result instead of running. Without it,
``start_build(...)`` above would start a second build every time the run resumes (once for the
wait, once for the sleep: three builds for one call). So everything with a side effect, and
everything whose answer must not change (a generated id, the time), goes in a step; code between
steps must be deterministic.

Each call keeps a journal in the turn's checkpoint (``LoopTurnState.journals``, by tool call id)
with one entry per step name: ``step:<name>`` (its result, or its error once the tool's
``retries`` are spent), ``event:<name>`` (the deadline of the wait, then its payload or its
timeout), ``sleep:<n>`` (the n-th sleep's end). A step's result is durable (a checkpoint is
written) before the tool sees it, so a crash right after it never runs it again.

**Sync tools** get the same calls without ``await``: a sync tool runs on the tool pool
(:mod:`.pool`), off the run's event loop, so there ``ctx.step``, ``ctx.wait_for_event`` and
``ctx.sleep`` block their thread and return the value itself (a step's ``fn`` runs in the tool's
own thread; what needs the loop, the journal and its checkpoint, is done on the loop, the
``*_sync`` methods below). ``ParkTool`` travels from the thread like any exception.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..errors import ToolError
from ..waits import DEFAULT_URL_SECONDS, Delivery, ParkTool, RunEvents, WaitSpec, WaitTimeout, check_event_name
from .pool import run_in_tool_thread
from .schema import to_json_value

T = TypeVar("T")


class StepError(ToolError):
    """A recorded step failed (its final error, recorded: a replay raises it again without running)."""


@dataclass
class DurableCall:
    """The journal of one tool call and what its primitives need from the turn."""

    tool_call_id: str
    journal: dict[str, Any]
    """The call's entries (a dict inside the turn state: what is written here is checkpointed)."""
    persist: Callable[[], Awaitable[None]]
    """Makes the journal durable (a checkpoint) before returning."""
    events: RunEvents | None = None
    """The run's events (None outside a durable run: in ``generate()``, waits cannot park)."""
    retries: int = 0
    """How often a failing step is tried again before its error is final (the tool's ``retries``)."""
    clock: Callable[[], float] = time.time
    loop: asyncio.AbstractEventLoop | None = None
    """The run's event loop (by default the one running where the call is made): the journal is
    written there, also by a sync tool's thread."""
    _names: set[str] = field(default_factory=set)
    _sleeps: int = 0

    def __post_init__(self) -> None:
        if self.loop is None:
            with contextlib.suppress(RuntimeError):  # made outside a loop: only the async primitives work
                self.loop = asyncio.get_running_loop()

    def in_thread(self) -> bool:
        """True when called off the run's event loop (a sync tool's thread): the ``*_sync``
        primitives apply, which block and return the value itself."""
        if self.loop is None:
            return False
        try:
            return asyncio.get_running_loop() is not self.loop
        except RuntimeError:
            return True

    def _on_loop(self, work: Awaitable[T]) -> T:
        """Run ``work`` on the run's loop from a tool thread and wait for its result."""
        assert self.loop is not None

        async def awaited() -> T:
            return await work

        return asyncio.run_coroutine_threadsafe(awaited(), self.loop).result()

    def _claim(self, key: str) -> None:
        """Names are unique within one call: a second use of one would replay the wrong record."""
        if key in self._names:
            raise ToolError(f"{key!r} is used twice in tool call {self.tool_call_id}; give each step its own name.")
        self._names.add(key)

    async def _record(self, key: str, entry: dict[str, Any], *, durable: bool = True) -> None:
        """Write the journal entry (on the loop: a checkpoint may be serialising the journal) and,
        when ``durable``, checkpoint it before returning."""
        self.journal[key] = entry
        if durable:
            await self.persist()

    def _write(self, key: str, entry: dict[str, Any]) -> None:
        """Write a journal entry that needs no checkpoint of its own, from the loop or a tool thread."""
        if self.in_thread():
            self._on_loop(self._record(key, entry, durable=False))
        else:
            self.journal[key] = entry

    # --- ctx.step ------------------------------------------------------------------------------

    def _step_entry(self, name: str) -> tuple[str, dict[str, Any] | None]:
        """The journal key of step ``name`` (claimed) and its record, if it ran before."""
        if not isinstance(name, str) or not name or len(name) > 200:
            raise ToolError(f"ctx.step: the name must be a non-empty string of at most 200 characters, not {name!r}")
        key = f"step:{name}"
        self._claim(key)
        return key, self.journal.get(key)

    @staticmethod
    def _replay(recorded: dict[str, Any]) -> Any:
        if "error" in recorded:
            raise StepError(recorded["error"])
        return recorded.get("result")

    def _failed(self, name: str, attempt: int, exc: Exception) -> str | None:
        """None while the tool's retries allow another try, else the step's final error message."""
        if attempt <= self.retries:
            return None
        return f"Step {name!r} failed: {exc}" if str(exc) else f"Step {name!r} failed: {type(exc).__name__}"

    async def step(self, name: str, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` (sync, on the tool pool, or async) once; later runs get its recorded result."""
        key, recorded = self._step_entry(name)
        if recorded is not None:
            return self._replay(recorded)
        attempt = 0
        while True:
            try:
                value = fn() if inspect.iscoroutinefunction(fn) else await run_in_tool_thread(fn)
                if inspect.isawaitable(value):
                    value = await value
                result = to_json_value(value)
                break
            except Exception as exc:  # retried, then recorded: a replay must not run it again
                attempt += 1
                if (message := self._failed(name, attempt, exc)) is not None:
                    await self._record(key, {"error": message})
                    raise StepError(message) from exc
        await self._record(key, {"result": result})
        return result

    def step_sync(self, name: str, fn: Callable[[], Any]) -> Any:
        """:meth:`step` from a sync tool's thread: ``fn`` runs in this thread (an async ``fn`` on
        the loop), its record is checkpointed on the loop before this returns."""
        key, recorded = self._step_entry(name)
        if recorded is not None:
            return self._replay(recorded)
        attempt = 0
        while True:
            try:
                value = fn()
                if inspect.isawaitable(value):
                    value = self._on_loop(value)
                result = to_json_value(value)
                break
            except Exception as exc:  # retried, then recorded, as in step()
                attempt += 1
                if (message := self._failed(name, attempt, exc)) is not None:
                    self._on_loop(self._record(key, {"error": message}))
                    raise StepError(message) from exc
        self._on_loop(self._record(key, {"result": result}))
        return result

    # --- ctx.wait_for_event --------------------------------------------------------------------

    def _wait_entry(self, name: str, timeout_seconds: float | None) -> tuple[str, dict[str, Any]]:
        """The journal key of the wait for ``name`` (claimed) and its record (new: its deadline)."""
        key = f"event:{check_event_name(name)}"
        self._claim(key)
        if timeout_seconds is not None and timeout_seconds < 0:
            raise ToolError(f"wait_for_event({name!r}): timeout_seconds must be >= 0")
        recorded = self.journal.get(key)
        if recorded is not None and recorded.get("timeout"):
            raise WaitTimeout(name, recorded.get("seconds"))
        if recorded is not None and "payload" in recorded:
            return key, recorded
        if self.events is None:
            raise ToolError(f"wait_for_event({name!r}) needs a durable run (the HTTP API, not generate()).")
        if recorded is None:
            deadline = None if timeout_seconds is None else self.clock() + timeout_seconds
            recorded = {"deadline": deadline, "seconds": timeout_seconds}
            self._write(key, recorded)
        return key, recorded

    def _settled(self, name: str, recorded: dict[str, Any], delivery: Delivery | None) -> dict[str, Any]:
        """The entry that ends the wait (its payload, or its timeout); ParkTool when it goes on."""
        if delivery is not None:
            return {"payload": delivery.payload}
        deadline = recorded.get("deadline")
        if deadline is not None and self.clock() >= deadline:
            return {"timeout": True, "seconds": recorded.get("seconds")}
        raise ParkTool(WaitSpec(self.tool_call_id, name, "event", deadline))

    @staticmethod
    def _answer(name: str, entry: dict[str, Any]) -> Any:
        if entry.get("timeout"):
            raise WaitTimeout(name, entry.get("seconds"))
        return entry["payload"]

    async def wait_for_event(self, name: str, timeout_seconds: float | None = None) -> Any:
        """The payload of the run's event ``name``; parks the run until it arrives or the timeout."""
        key, recorded = self._wait_entry(name, timeout_seconds)
        if "payload" in recorded:
            return recorded["payload"]
        assert self.events is not None
        entry = self._settled(name, recorded, await asyncio.to_thread(self.events.event, name))
        await self._record(key, entry)
        return self._answer(name, entry)

    def wait_for_event_sync(self, name: str, timeout_seconds: float | None = None) -> Any:
        """:meth:`wait_for_event` from a sync tool's thread."""
        key, recorded = self._wait_entry(name, timeout_seconds)
        if "payload" in recorded:
            return recorded["payload"]
        assert self.events is not None
        entry = self._settled(name, recorded, self.events.event(name))
        self._on_loop(self._record(key, entry))
        return self._answer(name, entry)

    # --- ctx.sleep -----------------------------------------------------------------------------

    def _slept(self, seconds: float) -> tuple[float, float]:
        """This sleep's end (fixed the first time it is reached) and the time until it (<= 0: over).
        Raises ParkTool in a durable run when it is not over."""
        if seconds < 0:
            raise ToolError("sleep: seconds must be >= 0")
        self._sleeps += 1
        key = f"sleep:{self._sleeps}"
        recorded = self.journal.get(key)
        until = recorded["until"] if recorded is not None else self.clock() + seconds
        if recorded is None:
            self._write(key, {"until": until})
        left = until - self.clock()
        if left > 0 and self.events is not None:
            raise ParkTool(WaitSpec(self.tool_call_id, key, "sleep", until))
        return until, left

    async def sleep(self, seconds: float) -> None:
        """Sleep durably: the run parks until ``seconds`` from the first time this sleep was reached."""
        _, left = self._slept(seconds)
        if left > 0:  # in memory (generate()): an ordinary sleep
            await asyncio.sleep(left)

    def sleep_sync(self, seconds: float) -> None:
        """:meth:`sleep` from a sync tool's thread."""
        _, left = self._slept(seconds)
        if left > 0:  # in memory (generate()): an ordinary sleep of the tool's thread
            time.sleep(left)

    def event_url(self, name: str, timeout_seconds: float | None = None) -> str:
        """A URL that accepts the event ``name`` as a POST of JSON (signed for this run and call).

        It expires with the wait: ``timeout_seconds`` from the first call (give the same timeout
        as the wait's), else after :data:`~durable_harness.waits.DEFAULT_URL_SECONDS`.
        """
        check_event_name(name)
        if self.events is None:
            raise ToolError(f"event_url({name!r}) needs a durable run (the HTTP API, not generate()).")
        key = f"url:{name}"
        recorded = self.journal.get(key)
        if recorded is None:  # recorded so that a replay hands out the same URL
            seconds = DEFAULT_URL_SECONDS if timeout_seconds is None else timeout_seconds
            recorded = {"expires": self.clock() + seconds}
            self._write(key, recorded)
        return self.events.url(self.tool_call_id, name, float(recorded["expires"]))
