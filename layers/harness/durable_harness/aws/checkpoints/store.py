"""The deployed checkpoint store: a small head item plus append-only record items per run (D14).

The items are :mod:`..table`'s ``Head``, ``Record`` (the records 1..seq, full states or deltas in
:mod:`durable_harness.checkpoints.records`'s format) and ``Chat`` (a chat's latest run, put by each
run's creation). A head of another ``format`` than ``RECORD_FORMAT`` is refused.

A save appends record ``seq + 1`` and moves the head in one ``TransactWriteItems`` (one request;
DynamoDB bills both items, at two write units per KB as for any transaction), conditional on the
head's version: a fenced writer writes neither, and no crash can leave one without the other. The
head stays well under 1 KB and a record holds what the step added, so no write grows with the
history (a body over 900 bytes is stored zlib-compressed when that is smaller, as chunk data is: a
step of JSON compresses 2-3 times, often under the next KB). A state small enough to stay inline
(the approval ledger's) is one ``UpdateItem``, and so is a save that changes nothing but the head.
Loading is one strongly consistent ``Query`` for the head and its records (paged past 1 MB). A
record body over ``offload_bytes`` goes to an immutable S3 object
(``runs/<run_id>/state/<inc>-<seq>-<nonce>.json``) written before the transaction.

A run id can be used again once its record has expired (an idempotent chat POST or a "Start Run"
event repeated after ``RunTtlDays``). Everything keyed by the run id alone would then mix the two
runs, so ``inc`` tells them apart: Step Functions names the run's executions after it (execution
names stay taken for 90 days after an execution closes), the chunk log keys each incarnation's
items and objects by it, and records carry it (a save is conditional on it). Creating a record also
writes the empty log of the new incarnation (``sk="c#<created ms>.<inc>#~"``, see :mod:`..chunklog`)
in the same transaction; its keys sort after every older incarnation's, so the items an expired run
left are never read or appended to by the new one. The new incarnation writes its records over the
old ones from ``seq`` 1 on; those past its ``seq`` are never read.

Expiry (:mod:`.head`): a record gets the head's expiry of the write that made it. The runtime sets
``max_age_seconds`` to the chunk bucket's lifecycle expiration (``ChunkRetentionDays``), so a record
always expires before the oldest of its chunk segments and offloaded states (every one of them was
written after the record was created, and S3 keeps an object at least that many days), and with
``RunTtlDays`` at least as long, records and head expire together. A run whose writes go on longer
than ``max_age_seconds`` after its creation finds its record expired (and is treated as missing), as
is a run some of whose records expired; ``create`` may replace an expired record that TTL has not
deleted yet.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ...checkpoints.base import BaseCheckpointStore, Current, VersionConflict, handed_out
from ...checkpoints.records import Plan, fold, utf8_bytes
from ...errors import CorruptCheckpointError, RunExistsError, RunNotFoundError, StorageError
from ...ids import is_run_id
from ...ports import ListPosition, ListQuery, RunListing, RunSummary, StoredRun
from .._errors import aws_errors, check_format, translate
from ..chunklog.items import fresh_log_item, generation, unpacked_text
from ..table import EXPIRES_AT, FORMAT, PK, Chat, Head, Record, chat_key, run_key
from .head import HeadTable, iso
from .listing import query_principal_runs
from .objects import ObjectGone, StateObjects
from .records import (
    RECORD_FORMAT,
    StaleRead,
    chat_pointer_item,
    existing_item,
    from_last_full,
    meta_attr,
    n,
    num,
    query_run,
    record_item,
    split_run,
    write_error,
)

__all__ = ["DynamoCheckpointStore"]

logger = logging.getLogger(__name__)

_LOAD_ATTEMPTS = 3


class DynamoCheckpointStore(BaseCheckpointStore):
    """A :class:`~durable_harness.ports.CheckpointStore` on a DynamoDB table (and S3 for big records).

    ``client`` is a boto3 DynamoDB client; ``s3_client`` and ``bucket`` enable offloading record
    bodies larger than ``offload_bytes`` (without them, such a record fails with ``StorageError``
    rather than hitting DynamoDB's 400 KB item limit mid-run). ``ttl_seconds`` (``None``: never) is
    how long a record lives after its last write, ``max_age_seconds`` (``None``: no cap) how long
    at most after its creation. ``reset_log_head`` makes ``create`` write the run's empty chunk log
    (when the log shares the table, as deployed). ``clock`` returns epoch seconds (tests move it).
    """

    # The last head this process read or wrote per run, with its state: it is the base of the next
    # delta, and it lets claim/save skip re-reading the run.
    cache_runs = 16

    def __init__(
        self,
        table_name: str,
        *,
        client: Any,
        s3_client: Any | None = None,
        bucket: str | None = None,
        ttl_seconds: int | None = 30 * 86400,
        max_age_seconds: int | None = None,
        offload_bytes: int = 300_000,
        key_prefix: str = "runs/",
        reset_log_head: bool = True,
        clock: Callable[[], float] = time.time,
        on_created: Callable[[str, str], None] | None = None,
    ) -> None:
        """Use ``table_name`` through ``client``; see the class docstring for the options.
        ``on_created(run_id, generation)`` hears of each run created with its empty chunk log."""
        super().__init__()
        self._objects = StateObjects(s3_client, bucket, prefix=key_prefix, offload_bytes=offload_bytes)
        self._head = HeadTable(table_name, client, ttl_seconds=ttl_seconds, max_age_seconds=max_age_seconds,
                               clock=clock)  # fmt: skip
        self._table, self._ddb, self._clock = table_name, client, clock
        self._ttl, self._max_age = ttl_seconds, max_age_seconds
        self._reset_log_head, self._on_created = reset_log_head, on_created

    @property
    def table_name(self) -> str:
        """The DynamoDB table holding the run records."""
        return self._table

    def load(self, run_id: str) -> StoredRun:
        """The newest record of a run (one strongly consistent Query). Raises ``RunNotFoundError``."""
        return handed_out(self._load(run_id).record)

    def summary(self, run_id: str) -> RunSummary:
        """The record's status, principal and chat id: one strongly consistent GetItem that
        leaves the state out (so never a read of an offloaded state). Raises ``RunNotFoundError``."""
        item = self._head.get(run_id, PK, Head.STATUS, Head.PRINCIPAL, Head.CHAT_ID, FORMAT)
        check_format(item, RECORD_FORMAT, f"the record of run {run_id!r}")
        return RunSummary(run_id, item[Head.STATUS]["S"], _text(item, Head.PRINCIPAL), _text(item, Head.CHAT_ID))

    def runs_of(self, principal: str, query: ListQuery) -> tuple[list[RunListing], ListPosition | None]:
        """The principal's runs, newest first, from the table's index on (principal, created_at)."""
        return query_principal_runs(self._ddb, self._table, principal, query, clock=self._clock)

    def latest_run(self, chat_id: str, principal: str | None) -> str | None:
        """The run created last for ``principal``'s chat: one strongly consistent GetItem of the
        chat's pointer item, which each run's creation writes in its transaction (no scan, no index)."""
        with aws_errors(f"loading the latest run of chat {chat_id!r}"):
            item = self._ddb.get_item(TableName=self._table, Key=chat_key(chat_id, principal),
                                      ConsistentRead=True).get("Item")  # fmt: skip
        if item is None or self._head.expired(item):
            return None
        return str(item[Chat.RUN_ID]["S"])

    def incarnation(self, run_id: str) -> str | None:
        """The token of the run's current incarnation (``None`` for a record made before there were
        any); ``RunNotFoundError`` when the run does not exist. One small strongly consistent read."""
        return _text(self._head.get(run_id, Head.INC), Head.INC)

    def version(self, run_id: str) -> int:
        """The run's current version: one small strongly consistent read of the head."""
        return num(self._head.get(run_id, Head.VERSION)[Head.VERSION])

    def _claim(self, run_id: str, expected_version: int) -> StoredRun:
        known = self._head_at(run_id, expected_version)
        update = "SET #version = #version + :one, #epoch = #epoch + :one, #updated_at = :u"
        # Only the counters come back, not the state.
        attrs = self._head.write(run_id, expected_version, known.inc, "claim", update, {}, returns="UPDATED_NEW")
        claimed = replace(known.record, version=num(attrs[Head.VERSION]), epoch=num(attrs[Head.EPOCH]))
        self._remember(replace(known, record=claimed))
        return claimed

    @contextmanager
    def _current(self, run_id: str, expected_version: int) -> Iterator[Current]:
        yield self._head_at(run_id, expected_version)  # the write's condition is the version check

    def _write(self, current: Current, after: Current, plan: Plan) -> None:
        """Append the state's record and move the head: one transaction, or one UpdateItem when no
        record is needed."""
        checkpoint = after.record
        run_id, seq = checkpoint.run_id, after.seq
        values: dict[str, Any] = {":status": {"S": checkpoint.status}, ":meta": meta_attr(checkpoint.meta)}
        sets = ["#version = #version + :one", "#status = :status", "#meta = :meta", "#updated_at = :u"]
        removes: list[str] = []
        for name, value in ((Head.PRINCIPAL, checkpoint.principal), (Head.CHAT_ID, checkpoint.chat_id)):
            if value is None:
                removes.append(f"#{name}")
            else:
                sets.append(f"#{name} = :{name}")
                values[f":{name}"] = {"S": value}
        if plan.inline is not None:
            sets.append("#state = :state")
            values[":state"] = {"S": plan.inline}
        if plan.drop_base:
            removes.append("#state")
        record, body_key = None, None
        if plan.record is not None:
            sets.append("#seq = :seq")
            values[":seq"] = n(seq)
            kind, body = plan.record
            body_key = self._objects.put(run_id, f"{current.inc or '-'}-{seq:08d}", body)
            expiry = self._head.expiry(run_id, int(self._clock()))[0] if self._ttl is not None else None
            record = record_item(run_id, seq, kind, body=body, body_key=body_key, inc=current.inc, expires_at=expiry)
        update = "SET " + ", ".join(sets)
        try:
            self._head.write(run_id, current.record.version, current.inc, "save", update, values, removes=removes,
                             record=record)  # fmt: skip
        except VersionConflict:
            self._objects.delete(body_key)  # ours, and never referenced: the write did not happen
            raise

    # --- reads -------------------------------------------------------------------------------------

    def _load(self, run_id: str) -> Current:
        for _ in range(_LOAD_ATTEMPTS):
            items = query_run(self._ddb, self._table, run_id)
            try:
                head, records = split_run(items)
            except StaleRead:
                continue  # the run was created again while it was read
            if head is None or self._head.expired(head):
                raise RunNotFoundError(run_id)
            return self._decode(head, records)
        raise StorageError(f"run {run_id!r}: the record keeps changing while it is read")

    def _decode(self, head: dict[str, Any], records: list[dict[str, Any]]) -> Current:
        run_id = head[PK]["S"]
        check_format(head, RECORD_FORMAT, f"the record of run {run_id!r}")
        if Head.CREATED_AT in head:
            self._head.note_created(run_id, head)
        seq = num(head[Head.SEQ]) if Head.SEQ in head else 0
        if len(records) != seq:
            logger.warning("run %s: %d of its %d checkpoint records have expired", run_id, seq - len(records), seq)
            raise RunNotFoundError(run_id)
        bodies = [(r[Record.KIND]["S"], self._body(run_id, r)) for r in from_last_full(records)]
        base = _text(head, Head.STATE)
        folded = fold(base, bodies)
        record = StoredRun(
            run_id=run_id,
            state=folded.text,
            status=head[Head.STATUS]["S"],
            version=num(head[Head.VERSION]),
            epoch=num(head[Head.EPOCH]),
            principal=_text(head, Head.PRINCIPAL),
            chat_id=_text(head, Head.CHAT_ID),
            meta={k: v["S"] for k, v in head.get(Head.META, {}).get("M", {}).items()},
        )
        known = Current(record, folded, seq, utf8_bytes(base) if base is not None else 0, _text(head, Head.INC))
        self._remember(known)
        return known

    def _body(self, run_id: str, item: dict[str, Any]) -> str:
        if Record.BODY in item:  # text, or zlib bytes (records written since issue 20)
            return unpacked_text(item[Record.BODY]).decode("utf-8")
        try:
            return self._objects.text(item[Record.BODY_KEY]["S"])
        except ObjectGone:  # record objects are never deleted while their run lives
            raise CorruptCheckpointError(f"run {run_id!r}: the object of a checkpoint record is missing") from None

    # --- writes ------------------------------------------------------------------------------------

    def _create(self, first: Current, plan: Plan) -> Current:
        """Conditionally put the head ``first`` (``RunExistsError`` when the run exists); returns it."""
        record = first.record
        run_id = record.run_id
        at = self._clock()
        now, clock = iso(at), int(at)
        incarnation = secrets.token_hex(5)
        expires_at = clock + min(self._ttl, self._max_age or self._ttl) if self._ttl is not None else None
        item: dict[str, Any] = {
            **run_key(run_id),
            FORMAT: n(RECORD_FORMAT),
            Head.VERSION: n(1),
            Head.EPOCH: n(0),
            Head.STATUS: {"S": record.status},
            Head.META: meta_attr(record.meta),
            Head.CREATED_AT: {"S": now},
            Head.UPDATED_AT: {"S": now},
            Head.INC: {"S": incarnation},
        }
        for name, value in ((Head.PRINCIPAL, record.principal), (Head.CHAT_ID, record.chat_id)):
            if value is not None:
                item[name] = {"S": value}
        if expires_at is not None:
            item[EXPIRES_AT] = n(expires_at)
        put = {
            "TableName": self._table,
            "Item": item,
            # An expired record still sits in the table until TTL deletes it; it may be replaced.
            "ConditionExpression": "attribute_not_exists(#pk) OR #expires_at <= :now",
            "ExpressionAttributeNames": {"#pk": PK, "#expires_at": EXPIRES_AT},
            "ExpressionAttributeValues": {":now": n(clock)},
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        writes: list[dict[str, Any]] = [{"Put": put}]
        body_key = None
        if plan.inline is not None:
            item[Head.STATE] = {"S": plan.inline}
        elif plan.record is not None:
            item[Head.SEQ] = n(1)
            kind, body = plan.record
            body_key = self._objects.put(run_id, f"{incarnation}-{1:08d}", body)
            item_1 = record_item(run_id, 1, kind, body=body, body_key=body_key, inc=incarnation, expires_at=expires_at)
            writes.append({"Put": {"TableName": self._table, "Item": item_1}})
        if self._reset_log_head and is_run_id(run_id):  # other records (the approval ledger's) have no log
            head_ttl = self._max_age if self._max_age is not None else self._ttl
            head = fresh_log_item(run_id, generation(at, incarnation), None if head_ttl is None else clock + head_ttl)
            writes.append({"Put": {"TableName": self._table, "Item": head}})
        if record.chat_id is not None:
            # The chat's latest run, for a resume by chat id: one more item in the same request.
            pointer = chat_pointer_item(record.chat_id, record.principal, run_id, expires_at)
            writes.append({"Put": {"TableName": self._table, "Item": pointer}})
        try:
            if len(writes) == 1:
                self._ddb.put_item(**put)
            else:
                # The token makes botocore's retry of a transaction whose reply was lost a no-op.
                self._ddb.transact_write_items(TransactItems=writes, ClientRequestToken=secrets.token_hex(16))
        except ClientError as exc:
            self._objects.delete(body_key)
            if existing_item(exc) is None:
                raise write_error(exc, f"creating run {run_id!r}") from exc
            raise RunExistsError(run_id) from None
        except BotoCoreError as exc:
            self._objects.delete(body_key)
            raise translate(exc, f"creating run {run_id!r}") from exc
        self._head.note_created(run_id, item)
        if self._on_created is not None and self._reset_log_head and is_run_id(run_id):
            self._on_created(run_id, generation(at, incarnation))
        return replace(first, inc=incarnation)

    def _head_at(self, run_id: str, version: int) -> Current:
        """The run's head at ``version``: known, or read (``VersionConflict`` if it moved on)."""
        known = self._known_at(run_id, version) or self._load(run_id)
        VersionConflict.check(known.record.version, version)
        return known


def _text(item: dict[str, Any], name: str) -> str | None:
    """The string attribute ``name`` of ``item`` (``None`` when it has none)."""
    return str(item[name]["S"]) if name in item else None
