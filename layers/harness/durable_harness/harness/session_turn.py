"""One slice of a persistent :class:`~durable_harness.harness.process.ProcessHarness` (protocol 2).

The program lives in a session owned by a bridge (:mod:`.bridge`), across slices and turns. A
slice connects through the harness's transport factory, writes the turn's first line (``start``
with ``"protocol": 2``; ``continue`` with a paused turn's verified answers), or reattaches to the
boot and cursor its checkpoint names, and reads the program's numbered lines. It never writes
``stop``: when the slice's budget is spent it *detaches* (a checkpoint with the cursor); the
program goes on. A boot id other than the checkpoint's means the session was lost: a new boot gets
``continue`` from the program's last checkpoint with ``replayStep: true`` (and the client
``reset-step`` when it saw part of the step). See ``docs/harness.md``, "Persistent sessions".

A ``wait`` or ``sleep`` line (:mod:`.process_waits`) the runner cannot answer yet parks the run
and the slice detaches: the program goes on waiting on its stdin. The slice that resumes the run
reattaches and sends it the ``event`` line; a new boot (the session was lost meanwhile) resumes
from the program's last checkpoint instead, and its ``wait`` line written again is answered.

The state the runner checkpoints is slice mode's (``program``, ``hostResults``, ``awaitingHost``)
plus ``session``: ``{"bootId", "cursor", "shown"}`` (``shown``: parts of the current step went to
the client since the program's last checkpoint) and, while the run is parked, ``"waiting"``: the
program's unanswered wait line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from typing import TYPE_CHECKING, Any

from ..errors import OutputError, ProtocolError
from ..protocol import harness_parts as hp
from ..protocol.ui_chunks import ResetStepChunk
from .bridge.client import NumberedLine
from .bridge.transport import BridgeError, SessionLostError, SessionSpec, SessionTransport
from .interface import CancelNotice, Checkpoint, ContinueTurn, HarnessEvent, StartTurn, TurnRequest, Wait
from .process_turn import HarnessExitedError, ProcessTurn, _result_line, _start_line

if TYPE_CHECKING:
    from .process import ProcessHarness

logger = logging.getLogger("durable_harness.harness.process")

SESSION_PROTOCOL_VERSION = 2
MAX_RESTARTS = 2
"""How many times one slice starts a lost session's program again before it gives up (retried)."""
ATTACH_SECONDS = 300.0
"""An attach's deadline when the slice has no budget (it is renewed while the turn goes on)."""


class SessionTurn(ProcessTurn):
    """One slice of a persistent session: the program is reached through a :class:`SessionTransport`."""

    drains_after_stop = False

    def __init__(self, harness: ProcessHarness, request: TurnRequest) -> None:
        super().__init__(harness, request)
        session = request.state.get("session") if isinstance(request, ContinueTurn) and isinstance(
            request.state, dict) else None  # fmt: skip
        session = session if isinstance(session, dict) else {}
        self.boot_id: str | None = session.get("bootId")
        self.cursor: int = int(session.get("cursor") or 0)
        self.step_shown = bool(session.get("shown"))
        waiting = session.get("waiting")
        self.waiting: dict[str, Any] | None = waiting if isinstance(waiting, dict) else None
        """The program's wait line the run parked on: the program of this boot still waits for its answer."""
        self.transport: SessionTransport | None = None
        self.pending: list[HarnessEvent] = []
        self.restarts = 0
        self.output: Any = None
        loop = asyncio.get_running_loop()
        self.deadline = None if request.budget_seconds is None else loop.time() + request.budget_seconds
        self._lines: AsyncIterator[NumberedLine] | None = None
        self._attachment: Any = None
        self.failed = False

    async def _run(self) -> AsyncGenerator[HarnessEvent, None]:
        try:
            async for event in super()._run():
                yield event
                if isinstance(event, Wait):  # parked (also on a resumed wait line): the slice detaches
                    return
        except (ProtocolError, OutputError):  # the run fails: destroy_on_finish ends the session too
            self.failed = True
            raise

    # --- the HarnessTurn interface ----------------------------------------------------------------

    async def stop(self) -> Checkpoint | None:
        """Detach at the slice point: the program goes on; the checkpoint names where to read on."""
        return Checkpoint(self._state())

    async def close(self) -> None:
        """Detach (the program goes on), or end the session after a finished turn with
        ``destroy_on_finish``."""
        if self._events is not None:
            await self._events.aclose()
        await self._close_attachment()
        if self.transport is not None:
            if self.harness.destroy_on_finish and (self.failed or (self.finished and not self.awaiting)):
                try:
                    await self.transport.destroy()
                except BridgeError as exc:
                    logger.warning("session %s: destroy failed: %s", self.request.session_id, exc)
            await self.transport.aclose()

    # --- the turn's first lines -----------------------------------------------------------------------

    async def _spawn(self) -> Any:
        self.transport = await self.harness.transport(session_spec(self.harness, self.request.session_id))
        return None

    async def _open_turn(self) -> AsyncGenerator[HarnessEvent, None]:
        request, transport = self.request, self._transport()
        if isinstance(request, StartTurn):
            boot = await transport.start()
            status = await transport.status()
            resumed = status.get("bootId") == boot and int(status.get("cursor") or 0) > 0
            self.boot_id, self.cursor = boot, int(status.get("cursor") or 0)
            await self._send({**_start_line(request), "protocol": SESSION_PROTOCOL_VERSION, "resumed": resumed})
            return
        assert isinstance(request, ContinueTurn)
        if request.continuation is not None:  # a new turn answers the paused one: the program waits for it
            for event in await self._resolve_awaiting(request):
                yield event
            if self.boot_id is None or not await self._same_boot():
                async for event in self._restart("the session was lost while the turn was paused"):
                    yield event
                return
            if self.awaiting_resolved:  # the program waits for host results, not for a new turn
                for result in self.host_results:
                    await self._send(_result_line(result))
                yield Checkpoint(self._state())
            else:
                async for event in self._continue(request, False, SESSION_PROTOCOL_VERSION):
                    yield event
            return
        if self.boot_id is None or not await self._same_boot():
            async for event in self._restart("the session's program was restarted"):
                yield event
        elif self.waiting is not None:  # the parked run resumes: the program still waits for the answer
            line, self.waiting = self.waiting, None
            wait = await self._wait_line(line)  # None: answered; else not due after all, park again
            yield Checkpoint(self._state())  # answered: a later slice (after a crash) must not answer again
            if wait is not None:
                yield wait

    async def _same_boot(self) -> bool:
        status = await self._transport().status()
        return bool(status.get("running")) and status.get("bootId") == self.boot_id

    async def _restart(self, why: str) -> AsyncGenerator[HarnessEvent, None]:
        """The session was lost: a new boot resumes from the program's last checkpoint."""
        self.restarts += 1
        if self.restarts > MAX_RESTARTS:
            raise HarnessExitedError(f"The session's program ended {self.restarts} times in one slice ({why}).")
        request = self.request
        if self.program is None and not isinstance(request, StartTurn):
            # Detached before the program's first checkpoint: nothing to resume from, so no new boot
            # either (it would run in the session with no turn to serve).
            raise ProtocolError(
                f"The session {request.session_id} was lost ({why}) before its program's first checkpoint "
                "of this turn: it cannot be resumed. Send the message again."
            )
        logger.warning("session %s: %s; resuming from the last checkpoint", request.session_id, why)
        await self._close_attachment()
        transport = self._transport()
        self.boot_id, self.cursor = await transport.start(), 0
        self.waiting = None  # the new program writes its wait line again
        if self.step_shown:  # the client saw part of the step: it drops it, and sees it again
            yield ResetStepChunk()
            self.step_shown = False
        if self.program is None and isinstance(request, StartTurn):  # the first step: from `start` again
            await self._send({**_start_line(request), "protocol": SESSION_PROTOCOL_VERSION, "resumed": False})
            return
        async for event in self._continue(request, True, SESSION_PROTOCOL_VERSION, answers=False):
            yield event

    # --- reading ----------------------------------------------------------------------------------

    async def _read_line(self, proc: Any, *, idle: bool = True) -> dict[str, Any] | None:
        """The next JSON object the program wrote (heartbeats skipped); None when the slice detaches."""
        while True:
            line = await self._next_numbered()
            if line is None:
                return None
            if line.invalid is not None:
                raise ProtocolError(f"The harness program's output line {line.seq + 1} is invalid: {line.invalid}.")
            obj = line.line
            if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
                raise ProtocolError(f"The harness program's output line {line.seq + 1} is invalid: it must be a "
                                    'JSON object with a string "type".')  # fmt: skip
            if obj["type"] != "heartbeat":
                return obj

    async def _next_numbered(self) -> NumberedLine | None:
        loop = asyncio.get_running_loop()
        while True:
            if self._lines is None:
                left = ATTACH_SECONDS if self.deadline is None else self.deadline - loop.time()
                if left <= 0:
                    self.pending.append(Checkpoint(self._state(), detach=True))
                    return None
                assert self.boot_id is not None
                self._attachment = self._transport().attach(self.boot_id, self.cursor, min(left, 3600.0))
                self._lines = aiter(self._attachment)
            try:
                line = await anext(self._lines)
                self.cursor = self.lines = line.seq + 1  # `lines`: the boot's line number, for errors
                return line
            except StopAsyncIteration:
                reason, code = self._attachment.reason, self._attachment.exit_code
                self.cursor = max(self.cursor, self._attachment.cursor)
                await self._close_attachment()
                if reason == "deadline" and self.deadline is not None and self.deadline - loop.time() < 0.1:
                    self.pending.append(Checkpoint(self._state(), detach=True))
                    return None
                if reason in ("exit", "shutdown"):
                    await self._lost(f"the program exited (code {code})" if reason == "exit" else "the bridge ended")
                elif reason == "turn-end" and not self.finished:
                    await self._lost("the program ended the turn without 'finish'")
            except SessionLostError as exc:
                await self._close_attachment()
                await self._lost(str(exc))
            except BridgeError as exc:  # broke off: read on from the cursor
                await self._close_attachment()
                logger.warning("session %s: %s; attaching again", self.request.session_id, exc)
                await self._lost_if_gone()

    async def _lost(self, why: str) -> None:
        async for event in self._restart(why):
            self.pending.append(event)

    async def _lost_if_gone(self) -> None:
        try:
            same = await self._same_boot()
        except BridgeError:
            same = False
        if not same:
            await self._lost("the session's bridge cannot be reached or was restarted")

    def _take_pending(self) -> list[HarnessEvent]:
        events, self.pending = self.pending, []
        return events

    async def _close_attachment(self) -> None:
        lines, self._lines, self._attachment = self._lines, None, None
        close = getattr(lines, "aclose", None)
        if close is not None:
            await close()

    # --- what differs from slice mode -------------------------------------------------------------------

    def _note_checkpoint(self, obj: dict[str, Any]) -> None:
        if "output" in obj:  # protocol 2: the turn's output comes on its last checkpoint before `finish`
            self.output = self.harness.check_output(obj["output"])
        self.program, self.host_results, self.step_shown = obj["state"], [], False

    def _shown(self, part: hp.HarnessStreamPart) -> None:
        self.step_shown = not isinstance(part, hp.FinishStepPart)

    async def _wait_line(self, obj: dict[str, Any]) -> Wait | None:
        """Answered at once when it can be (as in slice mode); otherwise the run parks and the
        slice detaches: the program waits on, and the slice that resumes the run answers ``obj``."""
        wait = await super()._wait_line(obj)
        self.waiting = obj if wait is not None else None
        return wait

    async def _end_paused(self) -> None:
        """Paused for host approvals: the program waits (for the results) in its session."""

    async def _after_finish(self, proc: Any) -> AsyncGenerator[HarnessEvent, None]:
        """The turn is over; the program stays (its last checkpoint came before ``finish``)."""
        await self._close_attachment()
        yield Checkpoint(self._state(), output=self.output)

    async def _lines_ended(self, proc: Any) -> AsyncGenerator[HarnessEvent, None]:
        return  # the slice detached (its checkpoint was yielded as pending)
        yield  # an async generator (never reached)

    async def _send(self, obj: dict[str, Any]) -> None:
        try:
            await self._transport().send(obj, self.boot_id)
        except BridgeError as exc:  # the program is gone: reading tells how, and resumes
            logger.warning("session %s: a line was not delivered: %s", self.request.session_id, exc)

    async def _kill(self) -> None:
        if self.transport is not None and self.boot_id is not None:
            with contextlib.suppress(BridgeError):
                await self.transport.kill(self.boot_id)

    def _state(self) -> dict[str, Any]:
        session: dict[str, Any] = {"bootId": self.boot_id, "cursor": self.cursor, "shown": self.step_shown}
        if self.waiting is not None:
            session["waiting"] = self.waiting
        return {**super()._state(), "session": session}

    def _transport(self) -> SessionTransport:
        assert self.transport is not None, "the session is not connected"
        return self.transport


def session_spec(harness: ProcessHarness, session_id: str) -> SessionSpec:
    """What the harness asks its transport factory for, for session ``session_id``."""
    return SessionSpec(
        session_id=session_id, command=harness.command, cwd=harness.cwd, env=harness.child_env(),
        idle_seconds=harness.session_idle_seconds, grace_seconds=harness.stop_grace_seconds,
    )  # fmt: skip


async def cancel_session(harness: ProcessHarness, notice: CancelNotice) -> None:
    """A cancelled run's program gets ``cancel``; one that does not end the turn (``finish``)
    within the stop grace is killed (the session stays, unless ``destroy_on_finish``)."""
    state = notice.state if isinstance(notice.state, dict) else {}
    session = state.get("session")
    session = session if isinstance(session, dict) else {}
    boot_id, cursor = session.get("bootId"), int(session.get("cursor") or 0)
    transport = await harness.transport(session_spec(harness, notice.session_id))
    grace = harness.stop_grace_seconds
    try:
        if not isinstance(boot_id, str):  # cancelled before its first checkpoint: the current boot's turn
            status = await transport.status()
            if not status.get("busy") or not isinstance(status.get("bootId"), str):
                return
            boot_id, cursor = status["bootId"], int(status.get("cursor") or 0)
        await transport.send({"type": "cancel", "protocol": SESSION_PROTOCOL_VERSION, "runId": notice.run_id}, boot_id)
        ended = False
        attachment = transport.attach(boot_id, cursor, grace)
        async with asyncio.timeout(grace + 5.0):
            async for line in attachment:
                if isinstance(line.line, dict) and line.line.get("type") == "finish":
                    ended = True
                    break
        ended = ended or attachment.reason == "turn-end"
        if not ended:
            logger.warning("session %s: the program did not end the cancelled turn within %g s; killing it",
                           notice.session_id, grace)  # fmt: skip
            await transport.kill(boot_id)
        if harness.destroy_on_finish:
            await transport.destroy()
    except SessionLostError:
        pass  # that boot is gone already
    except (BridgeError, TimeoutError) as exc:
        logger.warning("session %s: cancel: %s; killing the program", notice.session_id, exc)
        with contextlib.suppress(BridgeError):
            await transport.kill(boot_id)
    finally:
        await transport.aclose()


__all__ = ["SESSION_PROTOCOL_VERSION", "SessionTurn", "cancel_session", "session_spec"]
