"""The approval ledger: every approval request the server issued, answerable exactly once.

A signature proves the server asked about exactly this tool call and input, but not *where*: a
signed, approved history could be posted again (another chat, another message id, another
principal, the run API after a chat POST) and run the tool again. The ledger closes that. When a
run pauses for approval it records each request under a key that binds the principal, the
assistant message that asked and the call itself; an answer must find that record unanswered and
marks it answered by the run it starts (a conditional write, so two answers cannot both win).

A second kind of record finds the paused run itself: when a run pauses, the ledger notes it as the
latest pause of its assistant message (for its principal). A continuation (a chat POST whose last
message answers approvals) looks the paused run up there and hands the harness that run's last
checkpoint: an external harness cannot rebuild its state from the chat messages.

Records live in the checkpoint store under ids ``apv_<digest>`` (which no run id can match) and
expire with it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from .approvals import canonical_json
from .errors import FencedError, InvalidRequestError, RunExistsError, RunNotFoundError
from .ports import CheckpointStore, StoredRun


def approval_key(
    principal: str | None, message_id: str, approval_id: str, tool_call_id: str, tool_name: str, tool_input: Any
) -> str:
    """The ledger id of one issued approval request."""
    parts = [principal or "", message_id, approval_id, tool_call_id, tool_name, canonical_json(tool_input)]
    digest = hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()
    return "apv_" + digest[:48]


def pause_key(principal: str | None, message_id: str) -> str:
    """The ledger id of the latest pause of an assistant message."""
    digest = hashlib.sha256("\x1f".join([principal or "", message_id, "paused"]).encode("utf-8", "surrogatepass"))
    return "apv_" + digest.hexdigest()[:48]


class ApprovalLedger:
    """Issued approval requests and who answered them, in a checkpoint store."""

    def __init__(self, store: CheckpointStore) -> None:
        self.store = store

    def issue(self, key: str, run_id: str) -> None:
        """Record that ``run_id`` asked for this approval (idempotent for the same run)."""
        record = StoredRun(run_id=key, state=_state(run_id, None), status="issued")
        try:
            self.store.create(record)
        except RunExistsError:
            current = self.store.load(key)
            issued_by, answered_by = _read(current)
            if answered_by is not None and issued_by != run_id:
                # The same call asked again later in the same message: a fresh request.
                self.store.save(
                    StoredRun(run_id=key, state=_state(run_id, None), status="issued", version=current.version),
                    current.version,
                )

    def pause(self, principal: str | None, message_id: str, run_id: str) -> None:
        """Record ``run_id`` as the latest pause of this assistant message (last writer wins)."""
        key = pause_key(principal, message_id)
        state = json.dumps({"pausedRun": run_id})
        for _ in range(5):
            try:
                self.store.create(StoredRun(run_id=key, state=state, status="paused"))
                return
            except RunExistsError:
                pass
            current = self.store.load(key)
            try:
                self.store.save(StoredRun(run_id=key, state=state, status="paused", version=current.version),
                                current.version)  # fmt: skip
                return
            except FencedError:
                continue
        raise FencedError(f"the pause record of message {message_id} keeps changing")

    def paused_run(self, principal: str | None, message_id: str) -> str | None:
        """The run that last paused this assistant message, or None."""
        try:
            record = self.store.load(pause_key(principal, message_id))
        except RunNotFoundError:
            return None
        value = json.loads(record.state).get("pausedRun")
        return value if isinstance(value, str) else None

    def answer(self, key: str, run_id: str) -> str | None:
        """Mark the request answered by ``run_id``; 400 if it was never issued, 409 if already answered
        by another run. Answering again for the same run (a retried request) is fine. Returns the
        run that issued the request."""
        for _ in range(5):
            try:
                current = self.store.load(key)
            except RunNotFoundError:
                raise InvalidRequestError(
                    "The history answers an approval this server never asked for "
                    "(in this conversation, for this caller).",
                    code="unknown_approval",
                ) from None
            issued_by, answered_by = _read(current)
            if answered_by == run_id:
                return issued_by
            if answered_by is not None:
                raise InvalidRequestError(
                    f"This approval was already answered (by run {answered_by}).", code="already_answered", status=409
                )
            record = StoredRun(run_id=key, state=_state(issued_by, run_id), status="answered", version=current.version)
            try:
                self.store.save(record, current.version)
                return issued_by
            except FencedError:
                continue  # answered at the same moment: look again (it may be this very run)
        raise InvalidRequestError("This approval keeps changing; try again.", code="conflict", status=409)


def _state(issued_by: str | None, answered_by: str | None) -> str:
    return json.dumps({"issuedBy": issued_by, "answeredBy": answered_by})


def _read(record: StoredRun) -> tuple[str | None, str | None]:
    data = json.loads(record.state)
    return data.get("issuedBy"), data.get("answeredBy")
