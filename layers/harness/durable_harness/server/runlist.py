"""``GET /api/runs?status=&chat=&limit=&cursor=``: the caller's runs, newest first, a page at a time.

The list reads only the caller's own partition of the store's index on (principal, creation time)
(:class:`~durable_harness.ports.PrincipalRuns`). The cursor is opaque to clients: it encodes a
position inside that partition (the creation time and run id of the last run of the page), so a
cursor that was altered, or came from someone else, can at most skip some of the caller's own runs;
it never names another principal's partition. A malformed one is a 400.

``status`` takes the run statuses the runner defines (:data:`~durable_harness.runner.state.RunStatus`),
comma-separated, and two groups: ``running`` (the statuses that still need slices) and ``waiting``
(every ``awaiting_*`` status: a run paused for someone's answer).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from typing import Any, get_args

from ..errors import InvalidRequestError
from ..ids import MAX_CHAT_ID, is_run_id
from ..ports import CheckpointStore, ListPosition, ListQuery, PrincipalRuns
from ..runner.state import TERMINAL_STATUSES, RunStatus

STATUSES: tuple[str, ...] = get_args(RunStatus)
"""Every run status, from the one place the runner defines them."""
STATUS_GROUPS: dict[str, frozenset[str]] = {
    "running": frozenset(s for s in STATUSES if s not in TERMINAL_STATUSES and not s.startswith("awaiting_")),
    "waiting": frozenset(s for s in STATUSES if s.startswith("awaiting_")),
}
"""Names for several statuses at once, as the inspector's filter offers them."""
DEFAULT_LIMIT = 25
MAX_LIMIT = 100
_CURSOR_PREFIX = "c1."


def parse_list_query(query: Mapping[str, Sequence[str]]) -> ListQuery:
    """The list query from a request's query parameters; ``InvalidRequestError`` (400) saying what
    to fix for an unknown parameter, status, a bad limit or cursor."""
    unknown = sorted(set(query) - {"status", "chat", "limit", "cursor"})
    if unknown:
        raise InvalidRequestError(
            f"Unknown query parameter {unknown[0]!r}; GET /api/runs takes status, chat, limit and cursor.",
            code="invalid_query",
        )
    statuses: set[str] | None = None
    raw_status = _one(query, "status")
    if raw_status:
        statuses = set()
        for name in (part.strip() for part in raw_status.split(",")):
            if name in STATUS_GROUPS:
                statuses |= STATUS_GROUPS[name]
            elif name in STATUSES:
                statuses.add(name)
            else:
                known = ", ".join([*STATUS_GROUPS, *STATUSES])
                raise InvalidRequestError(
                    f"Unknown status {name!r}; use one or more (comma-separated) of: {known}.", code="invalid_status"
                )
    chat_id = _one(query, "chat") or None
    if chat_id is not None and len(chat_id) > MAX_CHAT_ID:
        raise InvalidRequestError(
            f"'chat' (a chat id) must be at most {MAX_CHAT_ID} characters.", code="invalid_chat_id"
        )
    raw_limit = _one(query, "limit")
    limit = DEFAULT_LIMIT
    if raw_limit:
        if not raw_limit.isascii() or not raw_limit.isdigit() or not 1 <= int(raw_limit) <= MAX_LIMIT:
            raise InvalidRequestError(
                f"'limit' must be a whole number from 1 to {MAX_LIMIT}, got {raw_limit!r}.", code="invalid_limit"
            )
        limit = int(raw_limit)
    raw_cursor = _one(query, "cursor")
    after = decode_cursor(raw_cursor) if raw_cursor else None
    return ListQuery(limit, after, frozenset(statuses) if statuses is not None else None, chat_id)


def encode_cursor(position: ListPosition) -> str:
    """An opaque cursor for ``position`` (URL-safe text)."""
    data = json.dumps(list(position), separators=(",", ":")).encode()
    return _CURSOR_PREFIX + base64.urlsafe_b64encode(data).decode().rstrip("=")


def decode_cursor(cursor: str) -> ListPosition:
    """The position a cursor of :func:`encode_cursor` holds; a 400 for anything else."""
    bad = InvalidRequestError(
        "'cursor' is not a cursor this API returned; pass the nextCursor of the previous page, or leave it out "
        "for the first page.",
        code="invalid_cursor",
    )
    if not cursor.startswith(_CURSOR_PREFIX) or len(cursor) > 300:
        raise bad
    body = cursor[len(_CURSOR_PREFIX) :]
    try:
        value = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except (ValueError, binascii.Error):
        raise bad from None
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(v, str) for v in value)
        or not 0 < len(value[0]) <= 40
        or not is_run_id(value[1])
    ):
        raise bad
    return value[0], value[1]


async def list_runs(store: CheckpointStore, principal: str, query: ListQuery) -> dict[str, Any]:
    """The JSON of one page of the principal's runs."""
    if not isinstance(store, PrincipalRuns):
        raise InvalidRequestError(
            f"This server's run store ({type(store).__name__}) cannot list runs; the SQLite (local) and "
            "DynamoDB (deployed) stores can.",
            code="not_supported",
            status=501,
        )
    runs, position = await asyncio.to_thread(store.runs_of, principal, query)
    items = []
    for run in runs:
        item = {"runId": run.run_id, "status": run.status, "createdAt": run.created_at, "chatId": run.chat_id}
        if run.agent is not None:
            item["agent"] = run.agent
        items.append(item)
    return {"runs": items, "nextCursor": encode_cursor(position) if position is not None else None}


def _one(query: Mapping[str, Sequence[str]], name: str) -> str:
    values = query.get(name) or [""]
    if len(values) > 1:
        raise InvalidRequestError(f"Give {name!r} once (comma-separate several statuses).", code="invalid_query")
    return values[0]
