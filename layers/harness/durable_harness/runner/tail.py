"""What a slice appends, and what it takes from the run's past: the chunks a dead slice already
appended that a replaying harness sends again (``HarnessOptions.replays_tail``), and the state of
the chat's previous turn (``StartTurn.session_state``)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from typing import Any

from ..chunks.writer import ChunkWriter
from ..errors import RunNotFoundError
from ..harness.interface import HarnessOptions
from ..ports import ChatRuns, CheckpointStore, ChunkLog
from ..protocol.ui_chunks import ResetStepChunk, UIMessageChunk, encode_ui_chunk
from .state import RunState, foreign, state_of

logger = logging.getLogger("durable_harness.runner.runner")  # the runner's own logger


def write_chunks(writer: ChunkWriter, tail: list[str] | None, chunks: Sequence[UIMessageChunk]) -> None:
    """Append ``chunks``; those a dead slice already appended (``tail``, in order) are skipped.
    A chunk that differs from the tail ends the matching: the client is sent ``reset-step`` first."""
    for chunk in chunks:
        encoded = encode_ui_chunk(chunk)
        if tail:
            if json.loads(tail[0]) == json.loads(encoded):
                tail.pop(0)
                continue
            logger.warning("the harness's replay differs from what the dead slice sent; resetting the step")
            tail.clear()
            if chunk.type != "reset-step":
                writer.write(encode_ui_chunk(ResetStepChunk()))
        writer.write(encoded)


async def replayed_tail(log: ChunkLog, options: HarnessOptions, state: RunState, count: int) -> list[str] | None:
    """What a dead slice appended after the checkpoint, when the harness replays it exactly
    (``replays_tail``): matched, not sent again. None: nothing to match (or no such harness)."""
    if not options.replays_tail or count <= state.stream.chunk_count:
        return None
    logger.info("run %s: previous attempt died mid-step; the harness replays what it sent", state.run_id)
    return list(await asyncio.to_thread(log.read, state.run_id, state.stream.chunk_count))


def previous_turn_state(
    store: CheckpointStore, chat_id: str | None, principal: str | None, run_id: str, agent_id: str | None
) -> Any:
    """The state of the last checkpoint of the chat's previous turn: the turn state of the run
    ``principal`` created last in chat ``chat_id`` (the store's latest-run pointer, ``ChatRuns``: one
    read, on every store, deployed too), when that run has ended and is this agent's. None: a first
    turn, a previous turn still going, or another agent's."""
    if chat_id is None or not isinstance(store, ChatRuns):
        return None
    latest = store.latest_run(chat_id, principal)  # read before this run's record exists
    if latest is None or latest == run_id:
        return None
    try:
        previous = state_of(store.load(latest))
    except RunNotFoundError:  # expired since
        return None
    if not previous.terminal or foreign(previous.agent, agent_id):
        return None
    return previous.turn


__all__ = ["previous_turn_state", "replayed_tail", "write_chunks"]
