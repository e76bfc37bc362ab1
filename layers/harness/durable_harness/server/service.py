"""The chat service behind the HTTP app: start turns, follow a run's chunk log.

It knows only the ports (checkpoint store, chunk log, orchestrator) and the runner, so the same
service runs locally (SQLite, files, in-process orchestrator) and in Lambda (DynamoDB, S3, Step
Functions).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from ..agent.continuation import ApprovalAnswer
from ..agent.execution import match_approvals
from ..errors import FencedError, InvalidRequestError, ProtocolError, RunExistsError, RunNotFoundError, ToolError
from ..ids import derived_run_id, new_id, new_run_id
from ..ledger import approval_key
from ..messages import ModelMessage
from ..ports import CommitCadence, Orchestrator, RunSummary, read_summary, read_tail
from ..protocol.ui_messages import UIMessage, convert_to_model_messages, parse_ui_messages
from ..protocol.wire import compact_json
from ..runner.runner import Runner
from ..runner.state import TERMINAL_STATUSES, RunState
from .notifier import CommitSignal

_FINISH_PREFIX = '{"type":"finish"'
KEEPALIVE = None
"""Yielded by :meth:`ChatService.follow` when the run is idle, so the edge can send a keep-alive."""
_LATE_RETRY = 0.015
RESUME_TAIL = 64
"""Chunks a resume at a non-negative index reads with the log's count: a client reconnecting after
a drop is usually that close to the end, and then the count and its chunks take one read."""


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


class ChatService:
    """Starts runs for chat turns and streams their logs."""

    def __init__(
        self,
        runner: Runner,
        orchestrator: Orchestrator,
        *,
        signal: CommitSignal | None = None,
        config: ServiceConfig | None = None,
    ) -> None:
        self.runner = runner
        self.orchestrator = orchestrator
        self.signal = signal
        self.config = config or ServiceConfig()

    async def start_turn(self, body: Any, *, principal: str | None = None) -> RunState:
        """Validate a chat POST body, create its run and start driving it."""
        messages, chat_id = self._parse_body(body)
        model_messages = self._to_model_messages(messages)
        last = messages[-1]
        # A continuation (after an approval) streams into the existing assistant message.
        message_id = last.id if last.role == "assistant" and last.id else new_id("msg")
        # A retried POST (same principal, chat and last message) gets the run it already started.
        run_id = derived_run_id(principal or "", chat_id or "", compact_json(last.model_dump(mode="json")))
        secret = getattr(self.runner.agent, "approval_secret", None)
        for answer in (a for a in match_approvals(model_messages) if a.pending):
            request, call = answer.request, answer.call
            if secret is not None and not secret.verify(
                request.signature, request.approval_id, call.tool_call_id, call.tool_name, call.input
            ):
                continue  # never executed: the agent tells the model the approval was not valid
            key = approval_key(
                principal, message_id, answer.request.approval_id, answer.call.tool_call_id,
                answer.call.tool_name, answer.call.input,
            )  # fmt: skip
            await asyncio.to_thread(self.runner.ledger.answer, key, run_id)
        try:
            state = await asyncio.to_thread(
                self.runner.create_run,
                model_messages,
                run_id=run_id,
                chat_id=chat_id,
                principal=principal,
                message_id=message_id,
            )
        except RunExistsError:
            state = await self.load(run_id, principal)
        self.orchestrator.start(state.run_id)
        return state

    async def load(self, run_id: str, principal: str | None = None) -> RunState:
        """The run's checkpointed state, if ``principal`` may see it.

        ``RunNotFoundError`` both for a run that does not exist and for another principal's run,
        so that run ids cannot be probed. A run started without a principal (an event-triggered
        run whose event named none) is visible to every authenticated caller.
        """
        state = await asyncio.to_thread(self.runner.load, run_id)
        if principal is not None and state.principal is not None and state.principal != principal:
            raise RunNotFoundError(run_id)
        return state

    async def summary(self, run_id: str, principal: str | None = None) -> RunSummary:
        """What the run record says about the run (not its state), if ``principal`` may see it.

        The same visibility rule as :meth:`load`, for a fraction of its cost: a resume calls this.
        """
        summary = await asyncio.to_thread(read_summary, self.runner.store, run_id)
        if principal is not None and summary.principal is not None and summary.principal != principal:
            raise RunNotFoundError(run_id)
        return summary

    async def stream_start(self, run_id: str, start: int, principal: str | None) -> tuple[int, int, list[str] | None]:
        """Where a stream request from ``start`` (negative: from the tail) begins.

        Returns ``(resolved start, the log's count, the chunks from the resolved start when the
        read of the count already brought them, else None)``. Raises ``RunNotFoundError`` for a
        run the principal may not see, ``InvalidRequestError`` for an index past the end. Two
        storage reads in the common cases: the run's summary, and the log's tail with its count.
        """
        summary = await self.summary(run_id, principal)
        want = min(-start, self.config.read_batch) if start < 0 else RESUME_TAIL
        count, tail = await asyncio.to_thread(read_tail, self.runner.log, run_id, want)
        resolved = max(0, count + start) if start < 0 else start
        first = tail[resolved - (count - len(tail)) :] if count - len(tail) <= resolved <= count else None
        if summary.status not in TERMINAL_STATUSES:
            if resolved > count:
                # A client can never have more chunks than the log: a bogus index, not a reconnect.
                raise InvalidRequestError(
                    f"startIndex {start} is past the end of this run's stream ({count} chunks so far).",
                    code="invalid_start_index",
                )
            return resolved, count, first
        # A terminal run's log ends with `finish`, or soon will: its checkpoint knows the final length
        # while the last chunks are still being appended, and only an index past that is an error.
        total = count if tail and tail[-1].startswith(_FINISH_PREFIX) else (await self.load(run_id)).stream.chunk_count
        if resolved >= total > 0:
            raise InvalidRequestError(
                f"startIndex {start} is past the end of this run's stream ({total} chunks, ended with 'finish').",
                code="invalid_start_index",
            )
        return resolved, count, first

    async def status(self, run_id: str, principal: str | None) -> dict[str, Any]:
        """What the run API reports about a run."""
        state = await self.load(run_id, principal)
        result = state.final_result
        pending_of = getattr(self.runner.agent, "pending_approvals", None)
        pending = (
            pending_of(state.turn) if state.status == "awaiting_tool_approval" and state.turn and pending_of else []
        )
        body: dict[str, Any] = {
            "runId": state.run_id,
            "status": state.status,
            "origin": state.origin,
            "chatId": state.chat_id,
            "messageId": state.message_id,
            "createdAt": state.created_at,
            "slices": state.slices,
            "chunkCount": await self.count(run_id),
            "pendingApprovals": pending,
            "continuedBy": state.continued_by,
        }
        if result is not None:
            body["finishReason"] = result.finish_reason
            body["usage"] = {"inputTokens": result.input_tokens, "outputTokens": result.output_tokens}
            if result.output is not None:
                body["output"] = result.output
        if state.error:
            body["error"] = state.error
        return {k: v for k, v in body.items() if v is not None}

    async def cancel(self, run_id: str, principal: str | None) -> RunState:
        """Stop a run: no more slices; it ends ``cancelled`` with ``finish`` in its log."""
        state = await self.load(run_id, principal)
        if state.status == "awaiting_tool_approval" and state.continued_by is None:
            try:  # a paused run is abandoned: nothing runs, its log already ends with `finish`
                return await asyncio.to_thread(self.runner.abandon, run_id)
            except FencedError:
                raise InvalidRequestError(f"Run {run_id} changed meanwhile; reload it.", code="conflict",
                                          status=409) from None  # fmt: skip
        if state.terminal:
            # A cancel that died between its terminal checkpoint and `finish` is completed here.
            await self.runner.finalize(run_id, status="cancelled")
            raise InvalidRequestError(f"Run {run_id} already ended ({state.status}).", code="run_ended", status=409)
        self.orchestrator.cancel(run_id)
        return await self.runner.finalize(run_id, status="cancelled")

    async def answer_approvals(self, run_id: str, body: Any, principal: str | None) -> RunState:
        """Answer a paused run's approvals without a chat client; starts the continuation run."""
        state = await self.load(run_id, principal)
        if state.status != "awaiting_tool_approval" or state.turn is None:
            raise InvalidRequestError(f"Run {run_id} is not waiting for approval ({state.status}).", code="not_paused",
                                      status=409)  # fmt: skip
        continuation = getattr(self.runner.agent, "approval_continuation", None)
        if continuation is None:
            raise InvalidRequestError("This agent cannot be continued through the run API.", code="unsupported")
        messages = continuation(state.turn, _parse_answers(body))
        if state.continued_by is not None:
            raise InvalidRequestError(f"Run {run_id} was already answered by run {state.continued_by}.",
                                      code="already_answered", status=409)  # fmt: skip
        new_id = new_run_id()
        for pending in self.runner.agent.pending_approvals(state.turn):  # type: ignore[attr-defined]
            key = approval_key(
                state.principal, state.message_id, pending["approvalId"], pending["toolCallId"],
                pending["toolName"], pending["input"],
            )  # fmt: skip
            await asyncio.to_thread(self.runner.ledger.answer, key, new_id)
        try:  # record the answer first (a conditional write), so two answers cannot both start a run
            await asyncio.to_thread(self.runner.mark_continued, run_id, new_id)
        except FencedError:
            raise InvalidRequestError(f"Run {run_id} changed meanwhile; reload it.", code="conflict",
                                      status=409) from None  # fmt: skip
        new = await asyncio.to_thread(
            self.runner.create_run,
            messages,
            run_id=new_id,
            chat_id=state.chat_id,
            session_id=state.session_id,
            principal=state.principal,
            origin=state.origin,
            message_id=state.message_id,
        )
        self.orchestrator.start(new.run_id)
        return new

    async def count(self, run_id: str) -> int:
        """Chunks currently in the run's log."""
        return await asyncio.to_thread(self.runner.log.count, run_id)

    async def follow(self, run_id: str, start: int, first: list[str] | None = None) -> AsyncIterator[list[str] | None]:
        """Batches of chunks from ``start`` until ``finish`` or the response window ends.

        ``first``, when given, is what the log holds from ``start`` as already read (by
        :meth:`stream_start`). Yields ``None`` (:data:`KEEPALIVE`) after a quiet
        ``keepalive_seconds``. Without a commit signal it polls: right when the writer's next
        append is due if the log can tell (:class:`~durable_harness.ports.CommitCadence`), else
        every ``poll_seconds`` while chunks come, backing off towards ``idle_poll_seconds`` while
        the log is quiet; never again at once after a read that reached the end.
        """
        cfg = self.config
        log = self.runner.log
        cadence = log if self.signal is None and isinstance(log, CommitCadence) else None
        deadline = time.monotonic() + cfg.stream_window_seconds
        index, quiet_since = start, time.monotonic()
        while True:
            if first is not None:
                chunks, first = first, None
            else:
                chunks = await asyncio.to_thread(self.runner.log.read, run_id, index, cfg.read_batch)
            now = time.monotonic()
            if chunks:
                index += len(chunks)
                quiet_since = now
                for i, chunk in enumerate(chunks):
                    if chunk.startswith(_FINISH_PREFIX):
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
            timeout = min(deadline - now, self._poll_delay(now - quiet_since, cadence, run_id), cfg.keepalive_seconds)
            if self.signal is not None:
                await self.signal.wait(run_id, index, timeout)
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
            allow = bool(getattr(self.runner.agent, "allow_system_in_messages", False))
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
        try:
            match_approvals(converted)  # every answer must match a request in the history
        except ToolError as exc:
            raise InvalidRequestError(f"Invalid approval: {exc}.", code="unknown_approval") from exc
        return converted


def _parse_answers(body: Any) -> list[ApprovalAnswer]:
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
        answers.append(ApprovalAnswer(item["approvalId"], item["approved"], item.get("reason")))
    return answers
