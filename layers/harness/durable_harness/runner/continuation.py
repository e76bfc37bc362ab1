"""Continuations: a run that answers a paused run's approval requests (decision D12).

The paused run is found through the approval ledger (the latest pause of the assistant message,
for the caller), never through anything the client sent. Each answer is then checked like the
built-in loop always checked it: the signature over the tool call as the client sent it, and the
ledger record binding the principal, the message and the call (so a signed history cannot be
replayed elsewhere). Only answers that pass reach the harness; a tampered one leaves its request
unanswered, so the tool never runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass

from ..approvals import ApprovalSecret, canonical_json
from ..errors import FencedError, InvalidRequestError, RunNotFoundError, ToolError
from ..harness import interface as hi
from ..harness.answers import AnsweredApproval, match_approvals
from ..ledger import ApprovalLedger, approval_key
from ..messages import ModelMessage
from ..ports import CheckpointStore
from ..waits import RunEvents
from .state import ContinuationRecord, DecisionRecord, RunState, check_agent, checkpoint_of

_UNKNOWN = "The history answers an approval this server never asked for (in this conversation, for this caller)."


def pending_answers(messages: list[ModelMessage]) -> list[AnsweredApproval]:
    """The answers in the conversation's last tool message still to act on; 400 for a dangling one."""
    try:
        return [a for a in match_approvals(messages) if a.pending]
    except ToolError as exc:
        raise InvalidRequestError(f"Invalid approval: {exc}.", code="unknown_approval") from exc


@dataclass(eq=False)
class ContinuationResolver:
    """Finds the paused run a continuation answers and verifies its answers."""

    store: CheckpointStore
    ledger: ApprovalLedger
    secret: ApprovalSecret
    _: KW_ONLY
    agent_id: str | None = None
    """The runner's agent: another agent's paused run is a 409 (``OtherAgentError``)."""

    def from_messages(
        self, messages: list[ModelMessage], *, principal: str | None, message_id: str, run_id: str
    ) -> ContinuationRecord | None:
        """The continuation a chat conversation makes (None when its last message answers nothing).

        Marks each verified answer in the ledger as answered by ``run_id`` and, when any was, the
        paused run as continued by it (both idempotent for the same ``run_id``, so a retried POST is
        fine).
        """
        answers = pending_answers(messages)
        if not answers:
            return None
        paused = self._paused(principal, message_id)
        requested = {r.approval_id: r for r in paused.pending_approvals}
        decisions: list[DecisionRecord] = []
        for answer in answers:
            approval_id, call = answer.response.approval_id, answer.call
            if approval_id not in requested:  # whatever its signature: this pause never asked it
                raise InvalidRequestError(_UNKNOWN, code="unknown_approval")
            if not self.secret.verify(
                answer.request.signature, approval_id, call.tool_call_id, call.tool_name, call.input
            ):
                continue  # tampered or unsigned: the request stays unanswered, the tool never runs
            key = approval_key(principal, message_id, approval_id, call.tool_call_id, call.tool_name, call.input)
            self.ledger.answer(key, run_id)  # 400 if never issued as sent, 409 if answered by another run
            recorded = requested[approval_id]
            if (recorded.tool_call_id, recorded.tool_name, canonical_json(recorded.input)) != (
                call.tool_call_id, call.tool_name, canonical_json(call.input),
            ):  # fmt: skip
                continue  # the ledger matched another request of the same id: not this pause's
            decisions.append(
                DecisionRecord(
                    approval_id=approval_id, tool_call_id=call.tool_call_id, approved=answer.response.approved,
                    reason=answer.response.reason, tool_name=call.tool_name, input=call.input,
                )
            )  # fmt: skip
        if decisions:  # a tampered answer does not use the pause up: the genuine one may still come
            self._mark(paused, run_id)
        return ContinuationRecord(
            paused_run_id=paused.run_id, approvals=decisions, pending=paused.pending_approvals, with_messages=True
        )

    def from_answers(self, paused: RunState, answers: Sequence[tuple[str, bool, str | None]], run_id: str
                     ) -> ContinuationRecord:  # fmt: skip
        """The continuation the run API makes: ``(approval id, approved, reason)`` for every pending
        request of ``paused`` (an authenticated caller answering its own run needs no signature)."""
        check_agent(paused, self.agent_id)
        requested = {r.approval_id: r for r in paused.pending_approvals}
        unknown = [a[0] for a in answers if a[0] not in requested]
        if unknown:
            raise InvalidRequestError(
                f"Unknown approval ids: {unknown}; pending: {sorted(requested)}.", code="unknown_approval"
            )
        missing = sorted(set(requested) - {a[0] for a in answers})
        if missing:
            raise InvalidRequestError(f"Answer every pending approval; missing: {missing}.", code="missing_approval")
        if paused.continued_by not in (None, run_id):
            raise InvalidRequestError(f"Run {paused.run_id} was already answered by run {paused.continued_by}.",
                                      code="already_answered", status=409)  # fmt: skip
        for record in paused.pending_approvals:
            key = approval_key(paused.principal, paused.message_id, record.approval_id, record.tool_call_id,
                               record.tool_name, record.input)  # fmt: skip
            self.ledger.answer(key, run_id)
        self._mark(paused, run_id)
        decisions = [
            DecisionRecord(
                approval_id=approval_id, tool_call_id=requested[approval_id].tool_call_id, approved=approved,
                reason=reason, tool_name=requested[approval_id].tool_name, input=requested[approval_id].input,
            )
            for approval_id, approved, reason in answers
        ]  # fmt: skip
        return ContinuationRecord(paused_run_id=paused.run_id, approvals=decisions, pending=paused.pending_approvals)

    def _paused(self, principal: str | None, message_id: str) -> RunState:
        paused_id = self.ledger.paused_run(principal, message_id)
        if paused_id is None:
            raise InvalidRequestError(_UNKNOWN, code="unknown_approval")
        try:
            paused = RunState.model_validate_json(self.store.load(paused_id).state)
        except RunNotFoundError:
            raise InvalidRequestError(_UNKNOWN, code="unknown_approval") from None
        check_agent(paused, self.agent_id)  # before anything is marked answered
        if paused.status == "cancelled":
            raise InvalidRequestError(f"Run {paused_id} was cancelled; its approvals cannot be answered any more.",
                                      code="run_ended", status=409)  # fmt: skip
        if paused.status != "awaiting_tool_approval":
            raise InvalidRequestError(_UNKNOWN, code="unknown_approval")
        return paused

    def _mark(self, paused: RunState, run_id: str) -> None:
        """Record that ``run_id`` continues ``paused`` (a conditional write: one continuation per pause)."""
        for _ in range(5):
            cp = self.store.load(paused.run_id)
            state = RunState.model_validate_json(cp.state)
            if state.continued_by == run_id:
                return
            if state.continued_by is not None:
                raise InvalidRequestError(f"Run {paused.run_id} was already answered by run {state.continued_by}.",
                                          code="already_answered", status=409)  # fmt: skip
            if state.status != "awaiting_tool_approval":
                raise InvalidRequestError(f"Run {paused.run_id} is not waiting for approval ({state.status}).",
                                          code="not_paused", status=409)  # fmt: skip
            state.continued_by = run_id
            try:
                self.store.save(checkpoint_of(state, cp), cp.version)
                return
            except FencedError:
                continue
        raise InvalidRequestError(f"Run {paused.run_id} changed meanwhile; reload it.", code="conflict", status=409)


def turn_request(
    state: RunState,
    session: str,
    replay: bool,
    events: RunEvents | None = None,
    budget_seconds: float | None = None,
) -> hi.TurnRequest:
    """What the harness is opened with for a slice of ``state``: a new turn, or the last
    checkpoint's state (with the verified answers on the first slice of a continuation);
    ``events``: the run's external events."""
    record = state.continuation
    if record is None and state.turn is None:
        return hi.StartTurn(
            run_id=state.run_id, session_id=session, messages=list(state.input_messages),
            call_options=state.call_options, events=events, session_state=state.session_state,
            budget_seconds=budget_seconds,
        )  # fmt: skip
    continuation = None
    if record is not None:
        continuation = hi.Continuation(
            paused_run_id=record.paused_run_id,
            approvals=tuple(hi.ApprovalDecision(**d.model_dump()) for d in record.approvals),
            pending=tuple(hi.PendingApproval(**p.model_dump()) for p in record.pending),
            messages=tuple(state.input_messages) if record.with_messages else None,
        )
    return hi.ContinueTurn(
        run_id=state.run_id, session_id=session, state=state.turn, replay_step=replay,
        continuation=continuation, call_options=state.call_options, events=events,
        budget_seconds=budget_seconds,
    )  # fmt: skip
