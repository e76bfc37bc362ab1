"""``ProcessHarness``: any program as a harness, over JSON lines on stdin and stdout (protocol version 1).

One process per slice. The runner writes the first line (``start`` or ``continue``), then reads
harness stream parts and ``checkpoint`` control lines from the program's stdout; stderr goes to
the log. Host tools (the agent file's tools, named in a ``tool-call`` that is not
``providerExecuted``) are run here and their results written back on stdin. At a slice point the
runner writes ``stop``; the program may write one last checkpoint and must exit within the grace
period (10 s by default), or it is killed. See ``docs/harness.md`` for the whole protocol.

The state the runner checkpoints wraps the program's own::

    {"program": <the program's last checkpoint state>,
     "hostResults": [<host tool results since that checkpoint>],
     "awaitingHost": [<host calls paused for approval>]}

Host results since the program's last checkpoint are sent again right after ``continue`` (so a
program that checkpoints after a host ``tool-call`` always resumes waiting for its result), and a
host call whose result is recorded is never run again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import AsyncGenerator, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..approvals import DEFAULT_SECRET_ARN_ENV, DEFAULT_SECRET_ENV, ApprovalSecret
from ..errors import AgentConfigError, ProtocolError, RetryableError
from ..ids import new_id
from ..messages import ModelMessage
from ..protocol import harness_parts as hp
from .hosttools import HostCall, HostTools
from .interface import (
    CancelNotice,
    Checkpoint,
    ContinueTurn,
    HarnessEvent,
    HarnessOptions,
    StartTurn,
    TurnRequest,
)

logger = logging.getLogger(__name__)

PROTOCOL_VERSION = 1
DEFAULT_STOP_GRACE_SECONDS = 10.0
"""How long a program may take to exit after ``stop`` before it is killed."""
MAX_LINE_BYTES = 16 * 1024 * 1024
HIDDEN_ENV = frozenset({DEFAULT_SECRET_ENV, DEFAULT_SECRET_ARN_ENV, "AUTH_TOKEN_HASHES", "AUTH_TOKENS_SECRET_ARN"})
"""The server's own secrets, never passed to a harness program."""


class HarnessExitedError(RetryableError):
    """The harness program exited (or was killed) before ``finish``: the slice is retried."""


class ProcessHarness:
    """Run a program as the harness (``AGENT=module:attr`` names it like any agent).

    * ``command``: the program and its arguments (no shell);
    * ``cwd``, ``env``: its working folder, and variables added to the inherited environment
      (from which the server's own secrets are removed);
    * ``tools``: host tools (``durable_harness.tool``) the program may call; the runner runs them
      with their timeouts and approvals, and checkpoints each result;
    * ``builtin_tools``: names of the program's own tools, for ``tool-call`` validation (None: any
      name is accepted);
    * ``stop_grace_seconds``: how long the program may take to exit after ``stop``.
    """

    def __init__(
        self,
        command: Sequence[str],
        cwd: str | Path | None = None,
        env: Mapping[str, str] | None = None,
        *,
        tools: Sequence[Any] = (),
        builtin_tools: Collection[str] | None = None,
        stop_grace_seconds: float = DEFAULT_STOP_GRACE_SECONDS,
        send_reasoning: bool = True,
        allow_system_in_messages: bool = False,
        approval_secret: ApprovalSecret | None = None,
    ) -> None:
        if not command or not all(isinstance(part, str) and part for part in command):
            raise AgentConfigError("ProcessHarness needs a command: a non-empty list of non-empty strings")
        if stop_grace_seconds <= 0:
            raise AgentConfigError("stop_grace_seconds must be positive")
        self.command = list(command)
        self.cwd = str(cwd) if cwd is not None else None
        self.env = dict(env or {})
        self.host = HostTools(tools)
        self.stop_grace_seconds = stop_grace_seconds
        names = None if builtin_tools is None else {*builtin_tools, *self.host.names}
        self._options = HarnessOptions(
            tool_names=names,
            send_reasoning=send_reasoning,
            allow_system_in_messages=allow_system_in_messages,
            approval_secret=approval_secret,
        )

    @property
    def options(self) -> HarnessOptions:
        """Tool names, reasoning, system messages and approval secret, as configured."""
        return self._options

    def create_session(self, session_id: str | None = None) -> str:
        """The session id (the program gets it in every first line)."""
        return session_id or new_id("sess")

    def open(self, request: TurnRequest) -> ProcessTurn:
        """Start the program for one slice."""
        return ProcessTurn(self, request)

    async def on_cancel(self, notice: CancelNotice) -> None:
        """Nothing to release: no process outlives its slice."""

    def parse_call_options(self, raw: Mapping[str, Any]) -> dict[str, Any] | None:
        """None: the wire protocol (version 1) carries no call options, so they are ignored."""
        return None

    def run_result(self, state: Any) -> dict[str, Any]:
        """Nothing beyond what the runner knows (finish reason, usage, approvals): the state is the program's."""
        return {}

    def child_env(self) -> dict[str, str]:
        """The program's environment: ours without the server's secrets, plus ``env``."""
        inherited = {k: v for k, v in os.environ.items() if k not in HIDDEN_ENV}
        return {**inherited, **self.env}


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
        self._events: AsyncGenerator[HarnessEvent, None] | None = None
        if isinstance(request, ContinueTurn):
            wrapper = request.state if isinstance(request.state, dict) else {}
            self.program = wrapper.get("program")
            self.host_results = list(wrapper.get("hostResults") or [])
            self.awaiting = list(wrapper.get("awaitingHost") or [])

    # --- the HarnessTurn interface ----------------------------------------------------------------

    def events(self) -> AsyncGenerator[HarnessEvent, None]:
        """Start the program and read its lines."""
        if self._events is None:
            self._events = self._run()
        return self._events

    async def stop(self) -> Checkpoint | None:
        """Write ``stop``; read until the program exits (keeping a last checkpoint), or kill it."""
        proc = self.proc
        if proc is None or proc.stdout is None:
            return None
        await self._send({"type": "stop"})
        last: Checkpoint | None = None

        async def drain() -> None:
            nonlocal last
            ignored = 0
            while True:
                obj = await self._read_line(proc)
                if obj is None:
                    break
                if obj["type"] == "checkpoint" and "state" in obj and not ignored:
                    self.program, self.host_results = obj["state"], []
                    last = Checkpoint(self._state())
                else:  # the program went on: those parts are not shown, no checkpoint after them holds
                    ignored += 1
            if ignored:
                logger.info("harness program: %d lines after stop were dropped (the step is redone)", ignored)
            await proc.wait()

        try:
            await asyncio.wait_for(drain(), self.harness.stop_grace_seconds)
        except TimeoutError:
            logger.warning(
                "harness program did not exit within %g s of stop; killing it", self.harness.stop_grace_seconds
            )
            await self._kill()
        except ProtocolError as exc:
            logger.warning("harness program: bad output after stop (%s); killing it", exc)
            await self._kill()
        return last

    async def close(self) -> None:
        """Kill the program if it still runs; stop reading its stderr."""
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
        request = self.request
        if isinstance(request, StartTurn):
            await self._send(_start_line(request.run_id, request.session_id, request.messages))
        else:
            for event in await self._resolve_awaiting(request):
                yield event
            approvals = [a.to_json() for a in request.approvals if not self._is_host_approval(a.approval_id)]
            await self._send(
                {
                    "type": "continue", "runId": request.run_id, "sessionId": request.session_id,
                    "state": self.program, "replayStep": request.replay_step, "approvals": approvals,
                }
            )  # fmt: skip
            for result in self.host_results:
                await self._send(_result_line(result))
                if request.replay_step and result.get("shown"):
                    yield HostTools.event_of(result)
            if self.awaiting_resolved:
                yield Checkpoint(self._state())
        step_closed = False
        while True:
            obj = await self._read_line(proc)
            if obj is None:
                break
            if obj["type"] == "checkpoint":
                if "state" not in obj:
                    raise self._invalid('a "checkpoint" line needs a "state" (any JSON value)')
                self.program, self.host_results = obj["state"], []
                if self.awaiting:  # the program waits for host calls that need approval: pause
                    for event in self._pause(step_closed):
                        yield event
                    await self._kill()
                    return
                yield Checkpoint(self._state())
                continue
            try:
                part = hp.decode_part(obj)
            except ProtocolError as exc:
                raise self._invalid(str(exc)) from None
            if isinstance(part, hp.FinishPart):
                self.finished = True
            step_closed = isinstance(part, hp.FinishStepPart)
            yield part
            if isinstance(part, hp.ToolCallPart) and part.provider_executed is not True:
                async for event in self._host_call(part):
                    yield event
        code = await proc.wait()
        if not self.finished:
            raise HarnessExitedError(f"the harness program exited with code {code} before 'finish'")
        if code != 0:
            logger.warning("harness program exited with code %s after 'finish'", code)

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
        return {"program": self.program, "hostResults": self.host_results, "awaitingHost": self.awaiting}

    # --- process I/O ------------------------------------------------------------------------------

    async def _spawn(self) -> asyncio.subprocess.Process:
        harness = self.harness
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *harness.command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=harness.cwd,
                env=harness.child_env(),
                limit=MAX_LINE_BYTES,
                start_new_session=True,  # a kill reaches the program, not our process group
            )
        except OSError as exc:
            raise AgentConfigError(f"cannot start the harness program {harness.command[0]!r}: {exc}") from exc
        self.stderr_task = asyncio.get_running_loop().create_task(_log_stderr(self.proc))
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

    async def _read_line(self, proc: asyncio.subprocess.Process) -> dict[str, Any] | None:
        """The next JSON object of stdout, or None at its end."""
        assert proc.stdout is not None
        try:
            raw = await proc.stdout.readline()
        except (ValueError, asyncio.LimitOverrunError):
            raise self._invalid(f"a line is longer than {MAX_LINE_BYTES} bytes") from None
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
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        try:
            proc.kill()
        except ProcessLookupError:
            return
        try:
            await asyncio.wait_for(proc.wait(), 5.0)
        except TimeoutError:
            logger.error("harness program %s did not die after SIGKILL", proc.pid)


def _result_line(result: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "tool-result",
        "toolCallId": result["toolCallId"],
        "toolName": result["toolName"],
        "result": result["result"],
        "isError": bool(result.get("isError")),
    }


def _start_line(run_id: str, session_id: str, messages: list[ModelMessage]) -> dict[str, Any]:
    return {
        "type": "start",
        "runId": run_id,
        "sessionId": session_id,
        "messages": [m.to_dict() for m in messages],
    }


async def _log_stderr(proc: asyncio.subprocess.Process) -> None:
    """Every stderr line of the program goes to the log (never to the client)."""
    assert proc.stderr is not None
    while True:
        try:
            line = await proc.stderr.readline()
        except (ValueError, asyncio.LimitOverrunError):
            continue
        if not line:
            return
        logger.info("harness program [%s] stderr: %s", proc.pid, line.decode("utf-8", "replace").rstrip())


__all__ = ["DEFAULT_STOP_GRACE_SECONDS", "PROTOCOL_VERSION", "HarnessExitedError", "ProcessHarness", "ProcessTurn"]
