"""Driving a harness through the runner the way the chat service does: UI messages in, chunks out."""

from __future__ import annotations

import copy
from typing import Any

from durable_harness import ApprovalSecret
from durable_harness.harness import Harness
from durable_harness.ports import CheckpointStore
from durable_harness.protocol.ui_messages import convert_to_model_messages, parse_ui_messages
from durable_harness.runner import LocalOrchestrator, Runner, RunState
from durable_harness.storage.memory import MemoryCheckpointStore, MemoryChunkLog

from tests.support import log_chunks, message_of, user_message

SECRET = "topsecret-0123456789abcdefghijklmn"


class Turns:
    """Turns of one conversation over one harness, each run driven to its end by the local
    orchestrator (slices of ``slice_seconds``; retries of crashed slices)."""

    def __init__(
        self,
        harness: Harness,
        *,
        slice_seconds: float | None = None,
        secret: str = SECRET,
        store: CheckpointStore | None = None,
    ) -> None:
        self.log, self.store = MemoryChunkLog(), store or MemoryCheckpointStore()
        self.runner = Runner(
            harness, self.store, self.log, flush_interval=0, approval_secret=ApprovalSecret.from_value(secret)
        )
        self.orchestrator = LocalOrchestrator(self.runner, slice_seconds=slice_seconds, retry_delay=0.01)

    def create(self, ui_messages: list[dict[str, Any]], message_id: str) -> str:
        """Create the run of one turn of ``ui_messages`` (as a client posts them); its id."""
        messages = convert_to_model_messages(parse_ui_messages(ui_messages))
        return self.runner.create_run(messages, message_id=message_id).run_id

    async def run(self, ui_messages: list[dict[str, Any]], message_id: str) -> tuple[list[dict[str, Any]], RunState]:
        """Run one turn of ``ui_messages`` (as a client posts them) to its end."""
        run_id = self.create(ui_messages, message_id)
        state = await self.orchestrator.drive(run_id)
        assert state is not None
        return log_chunks(self.log, run_id), state

    async def ask(self, text: str, message_id: str = "msg_a") -> tuple[list[dict[str, Any]], RunState]:
        """A first turn: one user message."""
        return await self.run([user_message(text)], message_id)


def answered(
    text: str, chunks: list[dict[str, Any]], call_id: str, approved: bool, **change: Any
) -> list[dict[str, Any]]:
    """The history a client POSTs after answering the approval of ``call_id`` (``change`` tampers)."""
    assistant = copy.deepcopy(message_of(chunks))
    part = next(p for p in assistant["parts"] if p.get("toolCallId") == call_id)
    part["state"] = "approval-responded"
    part["approval"] = {**part["approval"], "approved": approved, **({} if approved else {"reason": "not now"})}
    for key, value in change.items():
        if key == "signature":
            part["approval"]["signature"] = value
        else:
            part[key] = value
    return [user_message(text), assistant]


def parts_of(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The assembled message's parts (its id left out)."""
    return list(message_of(chunks)["parts"])
