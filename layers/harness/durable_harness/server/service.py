"""The chat service behind the HTTP app: start turns, follow a run's chunk log.

It knows only the ports (checkpoint store, chunk log, orchestrator) and the runner, so the same
service runs locally (SQLite, files, in-process orchestrator) and in Lambda (DynamoDB, S3, Step
Functions). Deployed, a chat POST may run the new run's first slice in this process
(:class:`~durable_harness.server.inline.InlineSlices`, decision D14): its stream is then served
from the commit signal, and the response lasts until that slice is done.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..agent.options import body_call_options
from ..errors import (
    FencedError,
    HarnessError,
    InvalidRequestError,
    ProtocolError,
    RunExistsError,
    RunNotFoundError,
    StorageError,
)
from ..ids import derived_run_id, new_id, new_run_id
from ..messages import ModelMessage, ToolApprovalResponsePart, ToolMessage
from ..ports import CommitCadence, LeasedStart, Orchestrator, RunSummary, StoredRun, read_summary
from ..protocol.ui_chunks import FINISH_PREFIX
from ..protocol.ui_messages import UIMessage, convert_to_model_messages, parse_ui_messages
from ..runner.continuation import pending_answers
from ..runner.runner import Runner
from ..runner.state import RunState, pending_json, state_of, waits_json
from ..storage.health import StorageHealth
from ..telemetry.costs import DeployedFunctions, estimate_run_cost, run_record
from ..wire import compact_json
from .notifier import CommitSignal

if TYPE_CHECKING:
    from .inline import InlineSlices

logger = logging.getLogger(__name__)

KEEPALIVE = None
"""Yielded by :meth:`ChatService.follow` when the run is idle, so the edge can send a keep-alive."""
_LATE_RETRY = 0.015


@dataclass
class ServiceConfig:
    """Tunables of the chat service."""

    allow_system_messages: bool | None = None
    """Accept client-sent system messages; None follows the agent's ``allow_system_in_messages``."""
    stream_window_seconds: float = 840.0
    """How long one response follows a run before ending without ``finish`` (the client
    reconnects); just under the Lambda timeout when deployed."""
    keepalive_seconds: float = 15.0
    poll_seconds: float = 0.25
    """How often to look at the log while the run streams, when no in-process commit signal arrives."""
    idle_poll_seconds: float = 1.0
    """The longest wait between looks at a quiet log. The poll backs off from ``poll_seconds`` to
    this by a quarter of the time the log has been quiet, so a chunk after a quiet spell of ``q``
    seconds waits at most about ``q / 4`` longer (a tool call's result, the next step)."""
    read_batch: int = 512
    max_messages: int = 1000
    storage_retry_after: int = 2
    """Seconds a ``503 storage_unavailable`` answer asks the client to wait (``Retry-After``)."""
    cost: DeployedFunctions | None = None
    """Deployed: the functions whose bill a run's ``cost`` estimate prices (the run API's ``cost``);
    None (the local kit, which has no AWS bill): no estimate."""


class ChatService:
    """Starts runs for chat turns and streams their logs."""

    def __init__(
        self,
        runner: Runner,
        orchestrator: Orchestrator,
        *,
        signal: CommitSignal | None = None,
        config: ServiceConfig | None = None,
        health: StorageHealth | None = None,
        announce: Callable[[RunState, str], None] | None = None,
        inline: InlineSlices | None = None,
    ) -> None:
        """``announce(state, kind)`` is told of the lifecycle transitions the service itself makes
        (``"Run Cancelled"``); deployed, it publishes them on the event bus. Best effort: a failure
        is logged, and the cancel stands. ``inline``, when given, runs the first slice of each run
        a chat POST creates in this process (instead of ``orchestrator.start``)."""
        self.runner = runner
        self.orchestrator = orchestrator
        self.signal = signal
        self.config = config or ServiceConfig()
        self.health = health
        """Known storage trouble (local mode): new streams of unfinished runs get a 503 meanwhile."""
        self.announce = announce
        self.inline = inline
        self._cancels: dict[str, asyncio.Future[RunState]] = {}

    async def start_turn(self, body: Any, *, principal: str | None = None, origin: str | None = None) -> RunState:
        """Validate a chat POST body, create its run and start driving it; ``origin`` (the
        request's ``scheme://host``) is the base of the event URLs of a first slice run here."""
        messages, chat_id = self._parse_body(body)
        # Validated before anything is recorded: a bad option is a 400 that changes nothing.
        call_options = self.runner.agent.parse_call_options(body_call_options(body))
        model_messages = self._to_model_messages(messages)
        last = messages[-1]
        if last.role == "assistant" and not _answers_approvals(model_messages):
            raise InvalidRequestError(
                "The last message must be a user message, or an assistant message whose tool approval "
                "requests carry the user's answers (an approval continuation); this one has none.",
                code="invalid_last_message",
            )
        # A continuation (after an approval) streams into the existing assistant message.
        message_id = last.id if last.role == "assistant" and last.id else new_id("msg")
        run_id = _turn_run_id(body, principal, chat_id, last)
        # Answers to approvals make it a continuation of the paused run: the runner finds that run
        # through the approval ledger and verifies every answer (see Runner.create_run).
        created, leased = True, False
        # A local orchestrator takes the new run's lease in the trip that creates it (one thread
        # hop fewer before the first slice); an inline first slice needs none.
        leases = self.orchestrator if isinstance(self.orchestrator, LeasedStart) and self.inline is None else None

        def create() -> tuple[RunState, bool]:
            state = self.runner.create_run(
                model_messages, run_id=run_id, chat_id=chat_id, principal=principal, message_id=message_id,
                call_options=call_options,
            )  # fmt: skip
            return state, leases is not None and leases.take_lease(state.run_id)

        try:
            state, leased = await asyncio.to_thread(create)
        except RunExistsError:
            state, created = await self.load(run_id, principal), False
        if created and self.inline is not None:
            # The first slice runs here, the orchestrator takes over after it.
            self.inline.begin(state, public_url=origin)
        elif leased and leases is not None:
            leases.start_leased(state.run_id)
        else:
            self.orchestrator.start(state.run_id)
        # The run exists and is driven: once storage is back it goes on, and the retried POST
        # (the same run id) streams it. A stream now could only send keep-alives.
        await self.check_storage(state)
        return state

    async def settle(self, run_id: str) -> None:
        """Wait until a slice of the run that this process runs in-process is done (a POST's
        response lasts that long: deployed, the function is frozen once its response ends)."""
        if self.inline is not None:
            await self.inline.settle(run_id)

    async def check_storage(self, state: RunState) -> None:
        """``StorageError`` (a 503) when writes fail lately and the run has not finished: a new
        stream of it could only send keep-alives. A run whose log is complete (``finish`` in) is
        served whatever storage does."""
        if self.health is None or not self.health.unavailable:
            return
        if state.terminal and await self.count(state.run_id) >= state.stream.chunk_count:
            return
        raise StorageError(f"storage writes fail ({self.health.last_error}); run {state.run_id} cannot go on yet")

    async def load(self, run_id: str, principal: str | None = None) -> RunState:
        """The run's checkpointed state, if ``principal`` may see it.

        ``RunNotFoundError`` both for a run that does not exist and for another principal's run,
        so that run ids cannot be probed. A run started without a principal (an event-triggered
        run whose event named none) is visible to every authenticated caller.
        """
        return (await self._record(run_id, principal))[1]

    async def _record(self, run_id: str, principal: str | None) -> tuple[StoredRun, RunState]:
        """The run's record and state, under :meth:`load`'s visibility rule."""
        cp = await asyncio.to_thread(self.runner.store.load, run_id)
        state = state_of(cp)
        if principal is not None and state.principal is not None and state.principal != principal:
            raise RunNotFoundError(run_id)
        return cp, state

    async def summary(self, run_id: str, principal: str | None = None) -> RunSummary:
        """What the run record says about the run (not its state), if ``principal`` may see it.

        The same visibility rule as :meth:`load`, for a fraction of its cost: a resume calls this.
        """
        summary = await asyncio.to_thread(read_summary, self.runner.store, run_id)
        if principal is not None and summary.principal is not None and summary.principal != principal:
            raise RunNotFoundError(run_id)
        return summary

    async def status(self, run_id: str, principal: str | None) -> dict[str, Any]:
        """What the run API reports about a run."""
        cp, state = await self._record(run_id, principal)
        result = state.final_result
        pending = pending_json(state) if state.status == "awaiting_tool_approval" else []
        chunk_count = await self.count(run_id)
        body: dict[str, Any] = {
            "runId": state.run_id,
            "status": state.status,
            "origin": state.origin,
            "agent": state.agent,
            "chatId": state.chat_id,
            "messageId": state.message_id,
            "createdAt": state.created_at,
            "slices": state.slices,
            "chunkCount": chunk_count,
            "pendingApprovals": pending,
            "continuedBy": state.continued_by,
            "waitingFor": waits_json(state) if state.status == "awaiting_event" else None,
            # When slices began and timed chunks were written: (log index, epoch seconds), for the inspector.
            "sliceTimes": state.slice_times,
            "chunkTimes": state.chunk_times,
        }
        if result is not None:
            body["finishReason"] = result.finish_reason
            body["usage"] = {"inputTokens": result.input_tokens, "outputTokens": result.output_tokens}
            if result.output is not None:
                body["output"] = result.output
        if state.error:
            body["error"] = state.error
        if self.config.cost is not None:  # deployed: what the run cost on AWS, from what it recorded
            body["cost"] = estimate_run_cost(run_record(cp, state, chunk_count), self.config.cost)
        return {k: v for k, v in body.items() if v is not None}

    async def result(self, run_id: str, principal: str | None) -> dict[str, Any]:
        """The result of a run that ended (or paused): its response messages, steps, text, output and
        usage. 409 while it still runs."""
        state = await self.load(run_id, principal)
        if not state.terminal:
            raise InvalidRequestError(
                f"Run {run_id} is still running ({state.status}); its result is ready once it ends "
                f"(follow /api/chat/{run_id}/stream).",
                code="run_in_progress",
                status=409,
            )
        result = await asyncio.to_thread(self.runner.result, state)  # it may read the run's log
        body: dict[str, Any] = {"runId": state.run_id, "status": state.status, **result}
        if state.error:
            body["error"] = state.error
        return body

    async def cancel(self, run_id: str, principal: str | None) -> RunState:
        """Stop a run: no more slices; it ends ``cancelled`` with ``finish`` in its log.

        Idempotent: a run already cancelled is answered as it is (and announced once). Concurrent
        cancels of one run in this process share one cancel; across processes the runner's
        finalize lets the first one through (see :meth:`Runner.finalize_once`).
        """
        state = await self.load(run_id, principal)
        running = self._cancels.get(run_id)
        if running is None:
            running = self._cancels[run_id] = asyncio.ensure_future(self._cancel(state))
            running.add_done_callback(lambda _: self._cancels.pop(run_id, None))
        return await asyncio.shield(running)  # a caller that goes away leaves the others' cancel be

    async def _cancel(self, state: RunState) -> RunState:
        run_id = state.run_id
        if state.status == "awaiting_tool_approval" and state.continued_by is None:
            try:  # a paused run is abandoned: nothing runs, its log already ends with `finish`
                abandoned = await asyncio.to_thread(self.runner.abandon, run_id)
            except FencedError:
                state = await self.load(run_id)
                if state.status == "cancelled":  # another cancel got there first
                    return state
                raise InvalidRequestError(f"Run {run_id} changed meanwhile; reload it.", code="conflict",
                                          status=409) from None  # fmt: skip
            await self.runner.notify_cancel(abandoned)
            await self._announce(abandoned, "Run Cancelled")
            return abandoned
        if state.terminal:
            # A cancel that died between its terminal checkpoint and `finish` is completed here.
            ended = await self.runner.finalize(run_id, status="cancelled")
            if ended.status == "cancelled":
                return ended
            raise InvalidRequestError(f"Run {run_id} already ended ({state.status}).", code="run_ended", status=409)
        self.orchestrator.cancel(run_id)
        cancelled, ended_here = await self.runner.finalize_once(run_id, status="cancelled")
        if ended_here and cancelled.status == "cancelled":  # not when the run ended by itself first
            await self._announce(cancelled, "Run Cancelled")
        return cancelled

    async def _announce(self, state: RunState, kind: str) -> None:
        if self.announce is None:
            return
        try:
            await asyncio.to_thread(self.announce, state, kind)
        except HarnessError as exc:  # a lost notification must not undo (or fail) what happened
            logger.warning("run %s: could not announce %r: %s", state.run_id, kind, exc)

    async def answer_approvals(self, run_id: str, body: Any, principal: str | None) -> RunState:
        """Answer a paused run's approvals without a chat client; starts the continuation run."""
        state = await self.load(run_id, principal)
        if state.status != "awaiting_tool_approval":
            raise InvalidRequestError(f"Run {run_id} is not waiting for approval ({state.status}).", code="not_paused",
                                      status=409)  # fmt: skip
        answers = _parse_answers(body)
        new_id = new_run_id()
        # Checks the answers against the run's requests, marks them answered in the ledger and the
        # paused run as continued (a conditional write, so two answers cannot both start a run).
        continuation = await asyncio.to_thread(self.runner.continuations.from_answers, state, answers, new_id)
        new = await asyncio.to_thread(
            self.runner.create_run,
            [],
            run_id=new_id,
            chat_id=state.chat_id,
            session_id=state.session_id,
            principal=state.principal,
            origin=state.origin,
            message_id=state.message_id,
            call_options=state.call_options,
            continuation=continuation,
        )
        self.orchestrator.start(new.run_id)
        return new

    async def count(self, run_id: str) -> int:
        """Chunks currently in the run's log."""
        return await asyncio.to_thread(self.runner.log.count, run_id)

    async def follow(self, run_id: str, start: int, first: list[str] | None = None) -> AsyncIterator[list[str] | None]:
        """Batches of chunks from ``start`` until ``finish`` or the response window ends.

        ``first``, when given, is what the log holds from ``start`` as already read (by
        :func:`.resume.stream_start`). Yields ``None`` (:data:`KEEPALIVE`) after a quiet
        ``keepalive_seconds``. Without a commit signal it polls: right when the writer's next
        append is due if the log can tell (:class:`~durable_harness.ports.CommitCadence`), else
        every ``poll_seconds`` while chunks come, backing off towards ``idle_poll_seconds`` while
        the log is quiet; never again at once after a read that reached the end.

        A read stops at what the signal says was committed, when it knows more than was read (the
        log's cache has it: no request). While the signal holds the run (its writer is in this
        process), it waits for the signal and looks at the log itself only every
        ``idle_poll_seconds`` of quiet (a cancel, or a slice that took over, writes from
        elsewhere); once the run is released it polls as above.
        """
        cfg = self.config
        log = self.runner.log
        signal = self.signal
        deadline = time.monotonic() + cfg.stream_window_seconds
        index, quiet_since = start, time.monotonic()
        woken = False  # the last wait ended with a signal (not a timeout)
        while True:
            held = signal is not None and signal.held(run_id)
            # What this process's writer committed (and the log's cache holds): read no further.
            known = signal.count(run_id) if signal is not None else None
            if first is not None:
                chunks, first = first, None
            elif held and (woken or index == start) and (known is None or known <= index):
                chunks = []  # its writer is here and signalled nothing new: nothing to look at
            else:
                limit = cfg.read_batch if known is None or known <= index else min(cfg.read_batch, known - index)
                chunks = await asyncio.to_thread(log.read, run_id, index, limit)
            now = time.monotonic()
            if chunks:
                index += len(chunks)
                quiet_since = now
                for i, chunk in enumerate(chunks):
                    if chunk.startswith(FINISH_PREFIX):
                        yield chunks[: i + 1]
                        return
                yield chunks
                if len(chunks) >= cfg.read_batch:
                    continue  # more may be waiting
                now = time.monotonic()
            if now >= deadline:
                return
            if now - quiet_since >= cfg.keepalive_seconds:
                quiet_since = now
                yield KEEPALIVE
            if held:
                delay = cfg.idle_poll_seconds
            else:
                # A log that knows its writers' pace (deployed) is read when the next append is due;
                # in-process writers' commits are signalled as well (locally, every one of them).
                cadence = log if isinstance(log, CommitCadence) else None
                delay = self._poll_delay(now - quiet_since, cadence, run_id)
            timeout = min(deadline - now, delay, cfg.keepalive_seconds)
            if signal is not None:
                woken = await signal.wait(run_id, index, timeout)
            else:
                await asyncio.sleep(timeout)

    def _poll_delay(self, quiet: float, cadence: CommitCadence | None, run_id: str) -> float:
        """How long a follower waits before it looks at the log again."""
        cfg = self.config
        backoff = max(cfg.poll_seconds, min(cfg.idle_poll_seconds, quiet / 4))
        due = cadence.next_commit(run_id) if cadence is not None else None
        if due is None:
            return backoff
        ahead = due - time.time()
        if ahead > 0:
            return min(ahead, backoff)
        # Due already: a late write (look again soon), or the writer paused (back off as usual).
        return min(backoff, _LATE_RETRY) if -ahead < backoff else backoff

    # --- validation ------------------------------------------------------------------------------

    def _parse_body(self, body: Any) -> tuple[list[UIMessage], str | None]:
        if not isinstance(body, dict):
            raise InvalidRequestError("The request body must be a JSON object with a 'messages' array.")
        raw = body.get("messages")
        if not isinstance(raw, list) or not raw:
            raise InvalidRequestError("'messages' must be a non-empty array of UI messages.")
        if len(raw) > self.config.max_messages:
            raise InvalidRequestError(f"'messages' has {len(raw)} items; at most {self.config.max_messages}.")
        chat_id = body.get("id")
        if chat_id is not None and (not isinstance(chat_id, str) or not 0 < len(chat_id) <= 200):
            raise InvalidRequestError("'id' (the chat id) must be a string of 1 to 200 characters.")
        try:
            messages = parse_ui_messages(raw)
        except ProtocolError as exc:
            raise InvalidRequestError(f"Invalid messages: {exc}", code="invalid_messages") from exc
        allow = self.config.allow_system_messages
        if allow is None:
            allow = self.runner.options.allow_system_in_messages
        if not allow:
            for i, message in enumerate(messages):
                if message.role == "system":
                    raise InvalidRequestError(
                        f"messages[{i}] has role 'system'; system messages are not accepted from clients "
                        "(set the agent's instructions instead).",
                        code="system_message_not_allowed",
                    )
        if messages[-1].role not in ("user", "assistant"):
            raise InvalidRequestError(
                "The last message must be a user message (or an assistant message carrying tool approval responses)."
            )
        return messages, chat_id

    def _to_model_messages(self, messages: list[UIMessage]) -> list[ModelMessage]:
        try:
            converted = convert_to_model_messages(messages)
        except (ProtocolError, ValueError) as exc:
            raise InvalidRequestError(f"Invalid messages: {exc}", code="invalid_messages") from exc
        pending_answers(converted)  # 400 for an answer whose request or call is not in the history
        return converted


def _turn_run_id(body: dict[str, Any], principal: str | None, chat_id: str | None, last: UIMessage) -> str:
    """The run id of a chat POST: derived from what identifies the request, so that a retried POST
    gets the run it already started.

    A submit is keyed on (principal, chat, last message). A regenerate (the AI SDK's ``trigger:
    "regenerate-message"``) sends the same history as the submit it answers again, so it is keyed
    on the assistant message it replaces (``messageId``) as well: a new run, and a retried
    regenerate the same one. A regenerate without ``messageId`` (``regenerate()`` with no
    argument) cannot be told from its own retry, and always starts a new run.
    """
    trigger = body.get("trigger", "submit-message")
    if trigger not in ("submit-message", "regenerate-message"):
        raise InvalidRequestError(
            "'trigger' must be 'submit-message' or 'regenerate-message' (the AI SDK's triggers), or left out.",
            code="invalid_trigger",
        )
    replaced = body.get("messageId")
    if replaced is not None and (not isinstance(replaced, str) or not 0 < len(replaced) <= 200):
        raise InvalidRequestError("'messageId' must be a string of 1 to 200 characters.")
    key = (principal or "", chat_id or "", compact_json(last.model_dump(mode="json")))
    if trigger == "submit-message":
        return derived_run_id(*key)
    if last.role != "user":
        raise InvalidRequestError(
            "A regenerate ('trigger': 'regenerate-message') must end with the user message to answer again.",
            code="invalid_last_message",
        )
    return new_run_id() if replaced is None else derived_run_id(*key, "regenerate-message", replaced)


def _answers_approvals(messages: list[ModelMessage]) -> bool:
    """True when the conversation ends with answers to tool approval requests (a continuation)."""
    last = messages[-1] if messages else None
    return isinstance(last, ToolMessage) and any(isinstance(p, ToolApprovalResponsePart) for p in last.content)


def _parse_answers(body: Any) -> list[tuple[str, bool, str | None]]:
    items = body.get("approvals") if isinstance(body, dict) else None
    if not isinstance(items, list) or not items:
        raise InvalidRequestError(
            'The body must be {"approvals": [{"approvalId": "...", "approved": true|false, "reason"?: "..."}]}.'
        )
    answers = []
    for i, item in enumerate(items):
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("approvalId"), str)
            or not isinstance(item.get("approved"), bool)
            or not isinstance(item.get("reason", ""), str)
        ):
            raise InvalidRequestError(
                f"approvals[{i}] needs a string approvalId, a boolean approved, an optional reason."
            )
        answers.append((item["approvalId"], item["approved"], item.get("reason")))
    return answers
