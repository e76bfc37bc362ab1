"""The DynamoDB items of a run's checkpoint: its head and its records, and how to read them in one go.

The format is :mod:`durable_harness.checkpoints.records`'s; the items' keys and attributes are
:mod:`..table`'s (the head ``sk = "run"``, record ``seq`` ``sk = "run#<seq, 8 digits>"``). Also
here: how the outcome of a conditional write or transaction on these items is read.

Every ``sk`` of a run's checkpoint begins with ``run`` and the head sorts first, so one strongly
consistent ``Query`` (paged past 1 MB) returns the head and then the records. A Query is not a
snapshot: a record read after the head may belong to a later save or a later incarnation. Records
past the head's ``seq`` are ignored (a save that committed after the head was read, or leftovers of
an expired incarnation, overwritten as the new one writes its own ``seq``), and a record of
another incarnation makes the caller read again.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from ...errors import HarnessError, StorageError
from .._errors import aws_errors, error_code, error_item, translate
from ..chunklog.items import packed_text
from ..table import EXPIRES_AT, PK, RECORD_PREFIX, RUN_SK, SK, Chat, Head, Record, chat_key, item_key

RECORD_FORMAT = 1
"""The version of the run record's layout (head and records), in the head's ``format``: a later
release that changes the layout raises it, and reads (or migrates) a record by what it finds."""
# Why a transaction was cancelled, when a retry of the slice may well succeed.
_TRANSIENT_CANCELLATIONS = frozenset(
    {"None", "TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded"}
)


class StaleRead(Exception):
    """The Query saw records of another incarnation than its head: read again."""


def record_sk(seq: int) -> str:
    """The sort key of record ``seq`` (zero-padded so that records sort in order)."""
    return f"{RECORD_PREFIX}{seq:08d}"


def record_item(
    run_id: str, seq: int, kind: str, *, body: str | None, body_key: str | None, inc: str | None,
    expires_at: int | None,
) -> dict[str, Any]:  # fmt: skip
    """The item of one record: its body inline (zlib-compressed when that is smaller, as chunk data
    is: the record shares the head's transaction, billed twice per started KB), or the key of the
    S3 object holding it."""
    item: dict[str, Any] = {**item_key(run_id, record_sk(seq)), Record.KIND: {"S": kind}}
    if body_key is not None:
        item[Record.BODY_KEY] = {"S": body_key}
    else:
        item[Record.BODY] = packed_text((body or "").encode("utf-8"))[0]
    if inc is not None:
        item[Record.INC] = {"S": inc}
    if expires_at is not None:
        item[EXPIRES_AT] = n(expires_at)
    return item


def query_run(client: Any, table: str, run_id: str) -> list[dict[str, Any]]:
    """The head and every record item of ``run_id`` (strongly consistent; all pages)."""
    items: list[dict[str, Any]] = []
    request: dict[str, Any] = {
        "TableName": table,
        "KeyConditionExpression": "#pk = :pk AND begins_with(#sk, :run)",
        "ExpressionAttributeNames": {"#pk": PK, "#sk": SK},
        "ExpressionAttributeValues": {":pk": {"S": run_id}, ":run": {"S": RUN_SK}},
        "ConsistentRead": True,
    }
    with aws_errors(f"loading run {run_id!r}"):
        while True:
            page = client.query(**request)
            items += page.get("Items", [])
            last = page.get("LastEvaluatedKey")
            if not last:
                return items
            request["ExclusiveStartKey"] = last


def split_run(items: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The head item and its records ``1..seq`` in order; raises :class:`StaleRead` (see module).

    Returns fewer records than ``seq`` when some are missing (expired): the caller decides.
    """
    head = next((item for item in items if item[SK]["S"] == RUN_SK), None)
    if head is None:
        return None, []
    seq = num(head[Head.SEQ]) if Head.SEQ in head else 0
    inc = head.get(Head.INC, {}).get("S")
    records: dict[int, dict[str, Any]] = {}
    for item in items:
        sk = item[SK]["S"]
        if not sk.startswith(RECORD_PREFIX) or not sk[len(RECORD_PREFIX) :].isdigit():
            continue
        number = int(sk[len(RECORD_PREFIX) :])
        if 1 <= number <= seq:
            if item.get(Record.INC, {}).get("S") != inc:
                raise StaleRead(f"record {number} belongs to another incarnation")
            records[number] = item
    return head, [records[k] for k in sorted(records)]


def from_last_full(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records a fold needs: from the last ``full`` one on (all of them if there is none)."""
    for i in range(len(records) - 1, -1, -1):
        if records[i][Record.KIND]["S"] == "full":
            return records[i:]
    return records


def cancel_reason(exc: ClientError) -> str:
    """The code the first write of a cancelled transaction failed with (the head comes first)."""
    reasons = exc.response.get("CancellationReasons") or []
    return str(reasons[0].get("Code")) if reasons else ""


def cancel_item(exc: ClientError) -> dict[str, Any] | None:
    """The item the first write of a cancelled transaction found (``ALL_OLD``), if any."""
    reasons = exc.response.get("CancellationReasons") or []
    item = reasons[0].get("Item") if reasons else None
    return item if isinstance(item, dict) and item else None


def condition_failed(exc: ClientError) -> bool:
    """Whether a write failed its condition (a transaction: its first write, the head's)."""
    code = error_code(exc)
    return code == "ConditionalCheckFailedException" or (
        code == "TransactionCanceledException" and cancel_reason(exc) == "ConditionalCheckFailed"
    )


def existing_item(exc: ClientError) -> dict[str, Any] | None:
    """The item that made a write fail its condition (``None``: none, or it failed otherwise)."""
    return (error_item(exc) or cancel_item(exc)) if condition_failed(exc) else None


def write_error(exc: ClientError, what: str) -> HarnessError:
    """The domain error for a write that failed for another reason than its condition."""
    if error_code(exc) == "TransactionCanceledException":
        codes = {str(r.get("Code")) for r in exc.response.get("CancellationReasons") or []}
        if codes <= _TRANSIENT_CANCELLATIONS:
            return StorageError(f"{what}: transaction cancelled ({', '.join(sorted(codes - {'None'})) or 'no reason'})")
        if "ConditionalCheckFailed" in codes:  # a condition failed without an item: cannot happen
            return StorageError(f"{what}: the condition failed without an existing record")
    return translate(exc, what)


def n(value: int) -> dict[str, str]:
    """A DynamoDB number attribute."""
    return {"N": str(value)}


def num(attr: dict[str, str]) -> int:
    """The value of a DynamoDB number attribute."""
    return int(attr["N"])


def meta_attr(meta: dict[str, str]) -> dict[str, Any]:
    """A record's ``meta`` as a DynamoDB map of strings."""
    return {"M": {str(k): {"S": str(v)} for k, v in meta.items()}}


def chat_pointer_item(chat_id: str, principal: str | None, run_id: str, expires_at: int | None) -> dict[str, Any]:
    """The pointer item naming ``run_id`` as the chat's latest run (it expires with the run's head)."""
    item = {**chat_key(chat_id, principal), Chat.RUN_ID: {"S": run_id}}
    if expires_at is not None:
        item[EXPIRES_AT] = n(expires_at)
    return item
