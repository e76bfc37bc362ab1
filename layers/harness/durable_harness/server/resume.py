"""Where a stream response begins: from an index of a run (:func:`stream_start`), and, resuming by
chat id, which run ``GET /api/chat/{chatId}/stream`` follows (:func:`chat_run_to_resume`).

The AI SDK's ``useChat({resume: true})`` (``Chat.resumeStream()``) calls the transport's reconnect
with the *chat* id, so a page that keeps nothing but its chat id resumes a reply after a reload.
The stream of a chat id is its latest run's (the one created last for the caller's chat, found
without a scan: :class:`~durable_harness.ports.ChatRuns`) while that run is in progress. When the
chat has no run in progress there is nothing to resume (the app answers so, see
:data:`NOTHING_TO_RESUME`), except for a request from a ``startIndex`` past 0: that is a client
that was following the run when its connection dropped (the transport reconnects with the count of
chunks it has), and it gets the rest of the run, which then ends with ``finish``.

Another principal's chat is another chat: the lookup is keyed by the caller's principal too, and
the run found is checked against it like any run.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import InvalidRequestError, RunNotFoundError
from ..ports import ChatRuns, RunSummary, read_tail
from ..protocol.sse import SSE_DONE
from ..protocol.ui_chunks import FINISH_PREFIX
from ..runner.state import TERMINAL_STATUSES

if TYPE_CHECKING:
    from .service import ChatService

RESUME_TAIL = 64
"""Chunks a resume at a non-negative index reads with the log's count: a client reconnecting after
a drop is usually that close to the end, and then the count and its chunks take one read."""

NOTHING_TO_RESUME = b'data: {"type":"finish"}\n\n' + SSE_DONE
"""The body of a resume with nothing to resume, for ``WorkflowChatTransport``: its reconnect never
returns "no stream" (a 204 has no body, which it reports as an error), and a stream of one
``finish`` ends its loop with nothing added to the chat. ``DefaultChatTransport`` (which sends no
``startIndex``) gets the ``204`` its ``reconnectToStream`` reads as "no active stream"."""


@dataclass(frozen=True)
class StreamStart:
    """Where a stream response begins (see :func:`stream_start`)."""

    start: int
    count: int
    first: list[str] | None
    complete: bool = False
    """The run's stream ended before ``start``: the response has nothing to send."""


async def stream_start(
    service: ChatService, run_id: str, start: int, principal: str | None, summary: RunSummary | None = None
) -> StreamStart:
    """Where a stream request from ``start`` (negative: from the tail) begins.

    Returns the resolved start, the log's count, the chunks from the resolved start when the
    read of the count already brought them (else None), and whether the stream is complete
    before the start (a finished run asked from its length: nothing to send). Raises
    ``RunNotFoundError`` for a run the principal may not see, ``InvalidRequestError`` for an
    index past the end, and ``StorageError`` (a 503) while storage is known to fail and the run's
    log is incomplete. Two storage reads in the common cases: the run's summary (unless given),
    and the log's tail with its count.
    """
    summary = summary or await service.summary(run_id, principal)
    want = min(-start, service.config.read_batch) if start < 0 else RESUME_TAIL
    count, tail = await asyncio.to_thread(read_tail, service.runner.log, run_id, want)
    if service.health is not None and service.health.unavailable:
        # Known storage trouble (local mode): the full state says whether the run's log is complete.
        await service.check_storage(await service.load(run_id))
    resolved = max(0, count + start) if start < 0 else start
    first = tail[resolved - (count - len(tail)) :] if count - len(tail) <= resolved <= count else None
    if summary.status not in TERMINAL_STATUSES:
        if resolved > count:
            # A client can never have more chunks than the log: a bogus index, not a reconnect.
            raise InvalidRequestError(
                f"startIndex {start} is past the end of this run's stream ({count} chunks so far).",
                code="invalid_start_index",
            )
        return StreamStart(resolved, count, first)
    # A terminal run's log ends with `finish`, or soon will: its checkpoint knows the final length
    # while the last chunks are still being appended, and only an index past that is an error.
    total = count if tail and tail[-1].startswith(FINISH_PREFIX) else (await service.load(run_id)).stream.chunk_count
    if resolved > total > 0:
        raise InvalidRequestError(
            f"startIndex {start} is past the end of this run's stream ({total} chunks, ended with 'finish').",
            code="invalid_start_index",
        )
    # From its length, what is left of a finished stream is nothing (as the seeds' handlers answer).
    return StreamStart(resolved, count, first, complete=0 < total <= resolved)


async def chat_run_to_resume(
    service: ChatService, chat_id: str, start: int, principal: str | None
) -> tuple[str, RunSummary] | None:
    """The run (and its summary) a stream request for ``chat_id`` from ``start`` follows, or
    ``None`` when there is nothing to resume."""
    store = service.runner.store
    if not isinstance(store, ChatRuns):
        return None
    run_id = await asyncio.to_thread(store.latest_run, chat_id, principal)
    if run_id is None:
        return None
    try:
        summary = await service.summary(run_id, principal)
    except RunNotFoundError:  # expired since, or (never: the lookup is the principal's) another's
        return None
    if summary.status in TERMINAL_STATUSES and start <= 0:
        return None
    return run_id, summary
