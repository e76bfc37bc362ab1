"""One slice of a :class:`~durable_harness.harness.process.ProcessHarness`: one program process.

The runner's side of the JSON-lines protocol (version 1, ``docs/harness.md``): the first line,
the program's parts and checkpoints, host tools, waits (:mod:`.process_waits`), ``stop``, the end
after ``finish``, the idle timeout, and the process group that is killed whatever way the slice ends.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator, Awaitable
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import AgentConfigError, ProtocolError, RetryableError
from ..protocol import harness_parts as hp
from ..waits import WaitSpec
from .hosttools import HostCall, HostTools
from .interface import Checkpoint, ContinueTurn, HarnessEvent, StartTurn, TurnRequest, Wait
from .process_waits import WAIT_LINES, ProgramWaits
from .programs import end_group, log_stderr, spawn

if TYPE_CHECKING:
    from .process import ProcessHarness

logger = logging.getLogger("durable_harness.harness.process")  # one logger for the harness's lines

T = TypeVar("T")
PROTOCOL_VERSION = 1
MAX_LINE_BYTES = 16 * 1024 * 1024


class HarnessExitedError(RetryableError):
    """The harness program exited (or was killed) before ``finish``: the slice is retried."""

    shown = True


class HarnessIdleError(RetryableError):
    """The harness program wrote nothing for ``idle_timeout_seconds``: killed, the slice is retried."""

    shown = True


class ProcessTurn:
    """One slice of a :class:`ProcessHarness`: one process."""

    def __init__(self, harness: ProcessHarness, request: TurnRequest) -> None:
        self.harness = harness
        self.request = request
        self.proc: asyncio.subprocess.Process | None = None
        self.stderr_task: asyncio.Task[None] | None = None
        self.program: Any = None
        self.host_results: list[dict[str, Any]] = []
        self.awaiting: list[dict[str, Any]] = []
        self.finished = False
        self.awaiting_resolved = False
        self.lines = 0
        self.stop_deadline: float | None = None
        """Set by ``stop``: the loop time by which the program must reach a slice point or exit."""
        self.host_calls: set[str] = set()
        """Host calls of this turn: the program's echo of their result is not shown twice."""
        self._events: AsyncGenerator[HarnessEvent, None] | None = None
        self.at_checkpoint = True
        """No part since the program's last checkpoint (or the first line): a wait may park here."""
        wrapper = request.state if isinstance(request, ContinueTurn) and isinstance(request.state, dict) else {}
        self.waits = ProgramWaits(wrapper.get("waits"), request.events)
        if isinstance(request, ContinueTurn):
            self.program = wrapper.get("program")
            self.host_results = list(wrapper.get("hostResults") or [])
            self.awaiting = list(wrapper.get("awaitingHost") or [])
            self.host_calls = {r["toolCallId"] for r in [*self.host_results, *self.awaiting]}

    # --- the HarnessTurn interface ----------------------------------------------------------------

    def events(self) -> AsyncGenerator[HarnessEvent, None]:
        """Start the program and read its lines."""
        if self._events is None:
            self._events = self._run()
        return self._events

    drains_after_stop = True
    """After :meth:`stop` the runner reads on to the program's next slice point (or its exit)."""

    async def stop(self) -> Checkpoint | None:
        """Write ``stop``. The runner goes on recording what the program writes until its next
        slice point (``finish-step`` + checkpoint) or its exit, within the stop grace; a program
        still going after the grace is killed (its unfinished step is redone with ``reset-step``)."""
        if self.proc is None or self.proc.stdout is None:
            return None
        await self._send({"type": "stop"})
        self.stop_deadline = asyncio.get_running_loop().time() + self.harness.stop_grace_seconds
        return None

    async def close(self) -> None:
        """Kill the program's process group (what it forked too); stop reading its stderr."""
        if self._events is not None:
            await self._events.aclose()
        await self._kill()
        if self.stderr_task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self.stderr_task), 1.0)
            except (TimeoutError, asyncio.CancelledError):
                self.stderr_task.cancel()

    # --- the turn -----------------------------------------------------------------------------------

    async def _run(self) -> AsyncGenerator[HarnessEvent, None]:
        proc = await self._spawn()
        async for event in self._open_turn():
            yield event
        step_closed = False
        while True:
            obj = await self._read_line(proc)
            for event in self._take_pending():
                yield event
            if obj is None:
                break
            if obj["type"] in WAIT_LINES:
                wait = await self._wait_line(obj)
                if wait is not None:  # the run parks at the program's last checkpoint
                    yield Checkpoint(self._state())
                    yield wait
                    return
                continue
            if obj["type"] == "checkpoint":
                if "state" not in obj:
                    raise self._invalid('a "checkpoint" line needs a "state" (any JSON value)')
                self._note_checkpoint(obj)
                self.at_checkpoint = True
                if self.awaiting:  # the program waits for host calls that need approval: pause
                    for event in self._pause(step_closed):
                        yield event
                    await self._end_paused()
                    return
                yield Checkpoint(self._state())
                continue
            part = self._part(obj)
            if isinstance(part, hp.ToolResultPart) and part.tool_call_id in self.host_calls:
                continue  # the program echoing a host result: the client was shown it already
            step_closed, self.at_checkpoint = isinstance(part, hp.FinishStepPart), False
            self._shown(part)
            yield part
            if isinstance(part, hp.FinishPart):
                self.finished = True
                async for event in self._after_finish(proc):
                    yield event
                return
            if isinstance(part, hp.ToolCallPart) and part.provider_executed is not True:
                self.host_calls.add(part.tool_call_id)
                async for event in self._host_call(part):
                    yield event
        async for event in self._lines_ended(proc):
            yield event

    # --- hooks a persistent session replaces (:mod:`.session_turn`) ---------------------------------

    def _note_checkpoint(self, obj: dict[str, Any]) -> None:
        """Take in the program's checkpoint line (its state; the host results it now covers)."""
        if "output" in obj:
            raise self._invalid('"output" belongs on the checkpoint after "finish"')
        self.program, self.host_results = obj["state"], []

    def _shown(self, part: hp.HarnessStreamPart) -> None:
        """A part goes to the client (nothing to note in slice mode)."""

    async def _wait_line(self, obj: dict[str, Any]) -> Wait | None:
        """Answer the program's ``wait`` or ``sleep`` line with an ``event`` line, or return the
        :class:`Wait` the run parks on (the program resumes from its last checkpoint then)."""
        if not self.at_checkpoint:
            raise self._invalid(f'a "{obj["type"]}" line must come right after a checkpoint (the state the '
                                "program resumes from when the run parks), not after a part")  # fmt: skip
        try:
            answer = await self.waits.answer(obj)
        except ValueError as exc:
            raise self._invalid(str(exc)) from None
        if isinstance(answer, WaitSpec):
            return Wait((answer,))
        await self._send(answer)
        return None

    def _take_pending(self) -> list[HarnessEvent]:
        """Events to yield before the next line (none in slice mode)."""
        return []

    async def _end_paused(self) -> None:
        """The turn paused for host approvals: the program is stopped (its state is checkpointed)."""
        await self._kill()

    async def _open_turn(self) -> AsyncGenerator[HarnessEvent, None]:
        """Write the turn's first line (``start`` or ``continue``) and what follows it."""
        request = self.request
        if isinstance(request, StartTurn):
            await self._send(_start_line(request))
        else:
            for event in await self._resolve_awaiting(request):
                yield event
            async for event in self._continue(request, request.replay_step, PROTOCOL_VERSION):
                yield event
            if self.awaiting_resolved:
                yield Checkpoint(self._state())

    async def _continue(
        self, request: TurnRequest, replay: bool, protocol: int, *, answers: bool = True
    ) -> AsyncGenerator[HarnessEvent, None]:
        """``continue`` from the program's last checkpoint, then the host results since it (the
        ones shown again when the step is replayed). ``answers``: with the verified approvals."""
        approvals = [
            a.to_json() for a in getattr(request, "approvals", ()) if not self._is_host_approval(a.approval_id)
        ] if answers else []  # fmt: skip
        await self._send(
            {
                "type": "continue", "protocol": protocol, "runId": request.run_id,
                "sessionId": request.session_id, "state": self.program, "replayStep": replay,
                "approvals": approvals, "callOptions": request.call_options,
            }
        )  # fmt: skip
        for result in self.host_results:
            await self._send(_result_line(result))
            if replay and result.get("shown"):
                yield HostTools.event_of(result)

    async def _lines_ended(self, proc: Any) -> AsyncGenerator[HarnessEvent, None]:
        """The program's stdout ended before ``finish``."""
        if self.stop_deadline is not None:  # it exited after stop (or was killed at the grace's end)
            await self._kill()
            return
        # stdout is closed: the program has exited, or is about to (or closed it and goes on: it
        # gets the grace, then its group is killed, like one that left a child holding stderr).
        try:
            code: int | None = await _within(proc.wait(), self.harness.stop_grace_seconds)
        except TimeoutError:
            code = proc.returncode
            await self._kill()
        raise HarnessExitedError(f"The harness program ended (exit code {code}) before 'finish'.")
        yield  # an async generator (never reached)

    async def _after_finish(self, proc: asyncio.subprocess.Process) -> AsyncGenerator[HarnessEvent, None]:
        """The turn is over: read its last checkpoint (with its output) and let the program exit
        within the stop grace. One that does not (it hangs, keeps stdout open, or left a child
        holding it) is killed with its process group: the run ends at ``finish`` whatever it does."""
        loop = asyncio.get_running_loop()
        grace = self.harness.stop_grace_seconds
        deadline = loop.time() + grace

        def left() -> float:
            return max(0.0, deadline - loop.time())

        try:
            while (obj := await _within(self._read_line(proc, idle=False), left())) is not None:
                if obj["type"] != "checkpoint":
                    yield self._part(obj)  # the runner fails the run: nothing but a checkpoint follows finish
                    continue
                if "state" not in obj:
                    raise self._invalid('a "checkpoint" line needs a "state" (any JSON value)')
                self.program, self.host_results = obj["state"], []
                yield Checkpoint(self._state(), output=self.harness.check_output(obj.get("output")))
            code = await _within(proc.wait(), left())
        except TimeoutError:
            what = "did not exit" if proc.returncode is None else "exited, but what it started holds its output,"
            logger.warning("harness program %s within %g s of 'finish'; killing its process group", what, grace)
            await self._kill()
            return
        if code != 0:
            logger.warning("harness program exited with code %s after 'finish'", code)

    def _part(self, obj: dict[str, Any]) -> hp.HarnessStreamPart:
        try:
            return hp.decode_part(obj)
        except ProtocolError as exc:
            raise self._invalid(str(exc)) from None

    async def _host_call(self, part: hp.ToolCallPart) -> AsyncGenerator[HarnessEvent, None]:
        """Run a host tool for the program (or pause the turn for its approval)."""
        recorded = next((r for r in self.host_results if r["toolCallId"] == part.tool_call_id), None)
        if recorded is None:
            call = await self.harness.host.prepare(part)
            if call.needs_approval:  # the turn pauses at the program's next checkpoint
                approval_id = f"approval-{call.tool_call_id}"
                self.awaiting.append({**call.to_json(), "approvalId": approval_id})
                yield hp.ToolApprovalRequestPart(approval_id=approval_id, tool_call_id=call.tool_call_id)
                return
            recorded = await self.harness.host.run(call)
            self.host_results.append(recorded)
            yield HostTools.event_of(recorded)
            await self._send(_result_line(recorded))
            yield Checkpoint(self._state())  # a finished host tool never runs again
            return
        yield HostTools.event_of(recorded)
        await self._send(_result_line(recorded))

    def _pause(self, step_closed: bool) -> list[HarnessEvent]:
        """End the turn for the host calls awaiting approval (the program is then stopped)."""
        self.finished = True
        usage = hp.Usage(input_tokens=hp.InputTokens(), output_tokens=hp.OutputTokens())
        reason = hp.FinishReason(unified="tool-calls")
        events: list[HarnessEvent] = [] if step_closed else [hp.FinishStepPart(finish_reason=reason, usage=usage)]
        return [*events, Checkpoint(self._state()), hp.FinishPart(finish_reason=reason, total_usage=usage)]

    async def _resolve_awaiting(self, request: ContinueTurn) -> list[HarnessEvent]:
        """Host calls paused for approval: run the approved ones, answer the others as not run."""
        if not self.awaiting or request.continuation is None:
            return []
        decisions = {a.approval_id: a for a in request.approvals}
        events: list[HarnessEvent] = []
        for waiting in self.awaiting:
            decision = decisions.get(waiting["approvalId"])
            call = HostCall.from_json(waiting)
            if decision is not None and decision.approved:
                result = await self.harness.host.run(call)
                events.append(HostTools.event_of(result))
            elif decision is not None:  # denied: the runner shows the denial; the program is told
                denied = {"type": "execution-denied", "reason": decision.reason}
                result = {**call.to_json(), "result": denied, "isError": True, "shown": False}
            else:  # no verified answer (tampered or missing): never run
                message = f"The approval of tool call {call.tool_call_id} is missing or invalid; it was not run."
                result = {**call.to_json(), "result": message, "isError": True, "shown": False}
            self.host_results.append(result)
        self.awaiting = []
        self.awaiting_resolved = True
        return events

    def _is_host_approval(self, approval_id: str) -> bool:
        return any(w["approvalId"] == approval_id for w in self.awaiting) or approval_id in {
            f"approval-{r['toolCallId']}" for r in self.host_results
        }

    def _state(self) -> dict[str, Any]:
        waits = {"waits": self.waits.records} if self.waits.records else {}
        return {"program": self.program, "hostResults": self.host_results, "awaitingHost": self.awaiting, **waits}

    # --- process I/O ------------------------------------------------------------------------------

    async def _spawn(self) -> asyncio.subprocess.Process:
        harness = self.harness
        # A server killed while this run's program ran left it running: end it before another
        # program starts the same step.
        await harness.registry.end_orphan(self.request.run_id)
        try:
            self.proc = await spawn(harness.command, harness.cwd, harness.child_env(), limit=MAX_LINE_BYTES)
        except OSError as exc:
            raise AgentConfigError(f"cannot start the harness program {harness.command[0]!r}: {exc}") from exc
        harness.registry.record(self.request.run_id, self.proc.pid)
        self.stderr_task = asyncio.get_running_loop().create_task(log_stderr(self.proc, logger, "harness program"))
        return self.proc

    async def _send(self, obj: dict[str, Any]) -> None:
        proc = self.proc
        if proc is None or proc.stdin is None or proc.stdin.is_closing():
            return
        try:
            proc.stdin.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n")
            await proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the program is gone; reading its stdout tells how it ended

    async def _read_line(self, proc: asyncio.subprocess.Process, *, idle: bool = True) -> dict[str, Any] | None:
        """The next JSON object of stdout (``heartbeat`` lines skipped), or None at its end.

        ``idle``: a program that writes nothing for ``idle_timeout_seconds`` is killed (the slice
        is retried); without it the caller bounds the wait.
        """
        while True:
            obj = await self._next_line(proc, idle)
            if obj is None or obj["type"] != "heartbeat":
                return obj

    async def _next_line(self, proc: asyncio.subprocess.Process, idle: bool) -> dict[str, Any] | None:
        assert proc.stdout is not None
        timeout = self.harness.idle_timeout_seconds if idle else None
        if self.stop_deadline is not None and idle:
            timeout = max(0.0, min(timeout or 0.0, self.stop_deadline - asyncio.get_running_loop().time()))
        try:
            raw = await _within(proc.stdout.readline(), timeout)
        except (ValueError, asyncio.LimitOverrunError):
            raise self._invalid(f"a line is longer than {MAX_LINE_BYTES} bytes") from None
        except TimeoutError:
            if self.stop_deadline is not None and idle:
                logger.warning("harness program did not reach a slice point within %g s of stop; killing its "
                               "process group (its step is redone)", self.harness.stop_grace_seconds)  # fmt: skip
                await self._kill()
                return None
            await self._kill()
            raise HarnessIdleError(
                f"The harness program wrote nothing for {timeout:g} s (idle_timeout_seconds); it was stopped."
            ) from None
        if not raw:
            return None
        self.lines += 1
        try:
            obj = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise self._invalid("it is not UTF-8") from None
        except json.JSONDecodeError as exc:
            raise self._invalid(f"it is not JSON ({exc.msg})") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
            raise self._invalid('it must be a JSON object with a string "type"')
        return obj

    def _invalid(self, reason: str) -> ProtocolError:
        return ProtocolError(f"The harness program's output line {self.lines} is invalid: {reason}.")

    async def _kill(self) -> None:
        """End the program's process group, also when the program itself has exited (what it
        forked may not have); forget its record once it is gone."""
        proc = self.proc
        if proc is None:
            return
        await end_group(proc)
        if proc.returncode is not None:
            self.harness.registry.forget(self.request.run_id, proc.pid)


async def _within(awaitable: Awaitable[T], seconds: float | None) -> T:
    """``awaitable`` within ``seconds`` (TimeoutError after). Not ``wait_for``: on Python 3.11 it
    can swallow a cancel that comes as the awaitable completes, and a shutdown would then hang."""
    async with asyncio.timeout(seconds):
        return await awaitable


def _result_line(result: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "tool-result",
        "toolCallId": result["toolCallId"],
        "toolName": result["toolName"],
        "result": result["result"],
        "isError": bool(result.get("isError")),
    }


def _start_line(request: StartTurn) -> dict[str, Any]:
    return {
        "type": "start",
        "protocol": PROTOCOL_VERSION,
        "runId": request.run_id,
        "sessionId": request.session_id,
        "messages": [m.to_dict() for m in request.messages],
        "callOptions": request.call_options,
        **({"sessionState": _program_state(request.session_state)} if request.session_state is not None else {}),
    }


def _program_state(state: Any) -> Any:
    """The program's own state inside a ProcessHarness checkpoint (another harness's as it is)."""
    return state.get("program") if isinstance(state, dict) and "program" in state else state


__all__ = ["MAX_LINE_BYTES", "PROTOCOL_VERSION", "HarnessExitedError", "HarnessIdleError", "ProcessTurn"]
