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
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import ToolError
from ..waits import DEFAULT_URL_SECONDS, ParkTool, RunEvents, WaitSpec, WaitTimeout, check_event_name
from .pool import run_in_tool_thread
from .schema import to_json_value


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
    _names: set[str] = field(default_factory=set)
    _sleeps: int = 0

    def _claim(self, key: str) -> None:
        """Names are unique within one call: a second use of one would replay the wrong record."""
        if key in self._names:
            raise ToolError(f"{key!r} is used twice in tool call {self.tool_call_id}; give each step its own name.")
        self._names.add(key)

    async def step(self, name: str, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` (sync, on the tool pool, or async) once; later runs get its recorded result."""
        if not isinstance(name, str) or not name or len(name) > 200:
            raise ToolError(f"ctx.step: the name must be a non-empty string of at most 200 characters, not {name!r}")
        key = f"step:{name}"
        self._claim(key)
        recorded = self.journal.get(key)
        if recorded is not None:
            if "error" in recorded:
                raise StepError(recorded["error"])
            return recorded.get("result")
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
                if attempt <= self.retries:
                    continue
                message = f"Step {name!r} failed: {exc}" if str(exc) else f"Step {name!r} failed: {type(exc).__name__}"
                self.journal[key] = {"error": message}
                await self.persist()
                raise StepError(message) from exc
        self.journal[key] = {"result": result}
        await self.persist()
        return result

    async def wait_for_event(self, name: str, timeout_seconds: float | None = None) -> Any:
        """The payload of the run's event ``name``; parks the run until it arrives or the timeout."""
        key = f"event:{check_event_name(name)}"
        self._claim(key)
        if timeout_seconds is not None and timeout_seconds < 0:
            raise ToolError(f"wait_for_event({name!r}): timeout_seconds must be >= 0")
        recorded = self.journal.get(key)
        if recorded is not None and "payload" in recorded:
            return recorded["payload"]
        if recorded is not None and recorded.get("timeout"):
            raise WaitTimeout(name, recorded.get("seconds"))
        if self.events is None:
            raise ToolError(f"wait_for_event({name!r}) needs a durable run (the HTTP API, not generate()).")
        if recorded is None:
            deadline = None if timeout_seconds is None else self.clock() + timeout_seconds
            recorded = self.journal[key] = {"deadline": deadline, "seconds": timeout_seconds}
        delivery = await asyncio.to_thread(self.events.event, name)
        if delivery is not None:
            self.journal[key] = {"payload": delivery.payload}
            await self.persist()
            return delivery.payload
        deadline = recorded.get("deadline")
        if deadline is not None and self.clock() >= deadline:
            self.journal[key] = {"timeout": True, "seconds": recorded.get("seconds")}
            await self.persist()
            raise WaitTimeout(name, recorded.get("seconds"))
        raise ParkTool(WaitSpec(self.tool_call_id, name, "event", deadline))

    async def sleep(self, seconds: float) -> None:
        """Sleep durably: the run parks until ``seconds`` from the first time this sleep was reached."""
        if seconds < 0:
            raise ToolError("sleep: seconds must be >= 0")
        self._sleeps += 1
        key = f"sleep:{self._sleeps}"
        recorded = self.journal.get(key)
        until = recorded["until"] if recorded is not None else self.clock() + seconds
        if recorded is None:
            self.journal[key] = {"until": until}
        now = self.clock()
        if now >= until:
            return
        if self.events is None:  # in memory (generate()): an ordinary sleep
            await asyncio.sleep(until - now)
            return
        raise ParkTool(WaitSpec(self.tool_call_id, key, "sleep", until))

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
            recorded = self.journal[key] = {"expires": self.clock() + seconds}
        return self.events.url(self.tool_call_id, name, float(recorded["expires"]))
