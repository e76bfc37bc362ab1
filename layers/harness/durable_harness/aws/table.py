"""The runs table: its key schema, the sort keys of every kind of item, and their attribute names.

Every AWS adapter that reads or writes the table takes its names from here (the state machine's
``run.asl.json`` and ``template.yaml`` spell the same names: ``tests/deploy`` checks them). A run's
partition holds its checkpoint (:class:`Head`, :class:`Record`; :mod:`.checkpoints`) and its chunk
log (:class:`Append`, :class:`Index`; :mod:`.chunklog`); a chat's, a pointer to its latest run.
"""

from __future__ import annotations

import hashlib
from typing import Any

PK, SK = "pk", "sk"
"""The key: ``pk`` (S) the run id or a chat pointer's hashed name, ``sk`` (S) what the item is."""
EXPIRES_AT = "expires_at"
"""The TTL attribute (N, epoch seconds) of every item; an item past it counts as missing."""
FORMAT = "format"
"""The storage format version (N) on the run's head and the chunk log's index."""
RUN_SK, RECORD_PREFIX, CHAT_PREFIX, CHAT_SK = "run", "run#", "chat#", "latest"
LOG_PREFIX, LOG_TOP = "c#", "c$"
"""Every chunk log key starts with ``c#``; ``c$`` sorts above them all (``$`` follows ``#``)."""


class Head:
    """A run's head (``sk = "run"``): the fencing counters of ``ports.py`` (N), the status,
    principal and chat id (S, copied out of the state for the API and for people), ``meta`` (M of
    S), ``seq`` (N, how many records; absent: none), the inline base ``state`` (S), ISO 8601 times,
    the incarnation (S, a random token made with the record), the last write's token, and what the
    state machine puts there and no checkpoint write touches: the task tokens of ``AwaitChatSlice``
    (:mod:`.handover`) and ``AwaitEvent`` (:mod:`.waits`), and ``event_pending`` (N)."""

    VERSION, EPOCH, STATUS, PRINCIPAL, CHAT_ID = "version", "epoch", "status", "principal", "chat_id"
    META, SEQ, STATE, INC, WRITE_ID = "meta", "seq", "state", "inc", "write_id"
    CREATED_AT, UPDATED_AT = "created_at", "updated_at"
    INLINE_TOKEN, EVENT_TOKEN, EVENT_PENDING = "inline_token", "event_token", "event_pending"


class Record:
    """A checkpoint record (``sk = "run#<seq, 8 digits>"``): ``kind`` (``full`` or ``delta``), the
    body inline or the key of an immutable S3 object holding it, the incarnation that wrote it."""

    KIND, BODY, BODY_KEY, INC = "kind", "body", "body_key", "inc"


class Chat:
    """A chat's pointer to its latest run (``sk = "latest"``)."""

    RUN_ID = "run_id"


class Append:
    """One append of the chunk log (``sk = "c#<gen>#<start>"``), or a marker (``n`` 0): how many
    chunks (N), the writer's epoch (N: the last item's is the log's fence), the write's id, when it
    was sent (N, epoch ms), the chunks one per line (S, or zlib-compressed B) or the S3 key of an
    append too large for an item, and the key of the append after it (S: where the state machine's
    failure path appends)."""

    N, EPOCH, WRITE_ID, SENT, DATA, SPILL_KEY, NEXT = "n", "e", "w", "t", "d", "k", "x"


class Index:
    """A chunk log generation's segment index, its head (``sk = "c#<gen>#~"``): how many chunks
    sealed S3 segments hold (N), and each segment's end (L of N, contiguous from 0)."""

    SEALED, ENDS = "sealed", "ends"


def item_key(pk: str, sk: str) -> dict[str, Any]:
    """The key of an item, as a request takes it."""
    return {PK: {"S": pk}, SK: {"S": sk}}


def run_key(run_id: str) -> dict[str, Any]:
    """The key of a run's head."""
    if not run_id:
        raise ValueError("run id must not be empty")
    return item_key(run_id, RUN_SK)


def chat_key(chat_id: str, principal: str | None) -> dict[str, Any]:
    """The key of a chat's pointer item (its latest run). Hashed: a chat id is the client's text (up
    to 200 characters), a principal an ARN; another principal's chat of the same id is another item."""
    digest = hashlib.sha256("\x1f".join((principal or "", chat_id)).encode("utf-8", "surrogatepass")).hexdigest()
    return item_key(f"{CHAT_PREFIX}{digest}", CHAT_SK)


PRINCIPAL_INDEX = "by-principal"
"""The table's global secondary index: ``principal`` (hash), ``created_at`` (range), both S. Only
the run heads carry both (``template.yaml``'s ``RunsTable``)."""
PRINCIPAL_INDEX_PROJECTED = (Head.STATUS, Head.CHAT_ID, Head.META, EXPIRES_AT)
"""The attributes the index projects besides the keys (``INCLUDE``): what a list shows."""
