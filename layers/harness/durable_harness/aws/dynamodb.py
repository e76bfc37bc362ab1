"""The deployed checkpoint store: a small head item plus append-only record items per run (D14).

Table layout (shared with the chunk log's items, see :mod:`.chunklog`; the records' format is
:mod:`durable_harness.storage.records`, their items :mod:`._records`)::

    pk (S) = run id    sk (S) = "run"          the head
    format (N)                 the storage format version (``RECORD_FORMAT``), set on create; a
                               record of another version is refused (``FormatVersionError``)
    version, epoch (N)         fencing counters (ports.py); every write is conditional on version
    status, principal, chat_id copied out of the state for the API and for people reading the table
    meta (M of S)
    seq (N)                    how many records the state has (absent: none)
    state (S)                  the inline base: a state of at most ``INLINE_BYTES``
    created_at, updated_at (S) ISO 8601, UTC
    expires_at (N)             epoch seconds: the table's TTL attribute
    inc (S)                    the incarnation: a random token made when the record is created

    pk (S) = run id    sk (S) = "run#00000001", ...   the records 1..seq (full states or deltas)

    pk (S) = "chat#" + sha256(principal, chat id)    sk (S) = "latest"
    run_id (S), expires_at (N) the chat's latest run (a resume by chat id), put by each run's creation

A save appends record ``seq + 1`` and moves the head in one ``TransactWriteItems`` (one request;
DynamoDB bills both items, at two write units per KB as for any transaction), conditional on the
head's version: a fenced writer writes neither, and no crash can leave one without the other. The
head stays well under 1 KB and a record holds what the step added, so no write grows with the
history. A state small enough to stay inline (the approval ledger's) is one ``UpdateItem``, and so
is a save that changes nothing but the head. Loading is one strongly consistent ``Query`` for the
head and its records (paged past 1 MB). A record body over ``offload_bytes`` goes to an immutable
S3 object (``runs/<run_id>/state/<inc>-<seq>-<nonce>.json``) written before the transaction.

A run id can be used again once its record has expired (an idempotent chat POST or a "Start Run"
event repeated after ``RunTtlDays``). Everything keyed by the run id alone would then mix the two
runs, so ``inc`` tells them apart: Step Functions names the run's executions after it (execution
names stay taken for 90 days after an execution closes), the chunk log keys each incarnation's
items and objects by it, and records carry it (a save is conditional on it). Creating a record also
writes the empty log of the new incarnation (``sk="c#<created ms>.<inc>#~"``, see :mod:`.chunklog`)
in the same transaction; its keys sort after every older incarnation's, so the items an expired run
left are never read or appended to by the new one. The new incarnation writes its records over the
old ones from ``seq`` 1 on; those past its ``seq`` are never read.

Expiry. Every write pushes the head's ``expires_at`` out to ``ttl_seconds`` from now, but never
past ``created_at + max_age_seconds`` when that is set; a record gets the head's expiry of the
write that made it. The runtime sets ``max_age_seconds`` to the chunk bucket's lifecycle
expiration (``ChunkRetentionDays``), so a record always expires before the oldest of its chunk
segments and offloaded states (every one of them was written after the record was created, and S3
keeps an object at least that many days), and with ``RunTtlDays`` at least as long, records and
head expire together. A run whose writes go on longer than ``max_age_seconds`` after its creation
finds its record expired (and is treated as missing), as is a run some of whose records expired.

DynamoDB's TTL deletion is lazy (up to days), so an item whose ``expires_at`` has passed is
treated as missing by every operation, and ``create`` may replace it.
"""

from __future__ import annotations

import logging
import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ..errors import (
    CorruptCheckpointError,
    FencedError,
    RunExistsError,
    RunNotFoundError,
    StorageError,
)
from ..ids import is_run_id
from ..ports import Checkpoint, ListPosition, RunListing, RunSummary
from ..storage.records import Folded, fold, parse, plan_create, plan_save
from ._errors import aws_errors, check_format, error_code, error_item, translate
from ._listing import query_principal_runs
from ._logitems import fresh_log_item, generation
from ._records import (
    RECORD_FORMAT,
    RUN_SK,
    StaleRead,
    cancel_item,
    cancel_reason,
    chat_key,
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
from ._stateobjects import ObjectGone, StateObjects

__all__ = ["DynamoCheckpointStore"]

logger = logging.getLogger(__name__)

_CACHE_RUNS = 16
_LOAD_ATTEMPTS = 3
# Every attribute goes through a placeholder: status, state and others are DynamoDB reserved words.
_NAMES = {
    f"#{n}": n
    for n in (
        "pk", "version", "epoch", "status", "principal", "chat_id", "meta", "state", "seq", "inc",
        "updated_at", "expires_at", "write_id", "created_at", "format",
    )
}  # fmt: skip
_SUMMARY = ("#pk", "#status", "#principal", "#chat_id", "#expires_at", "#format")
_LIVE = "(attribute_not_exists(#expires_at) OR #expires_at > :now)"
_PLACEHOLDER = re.compile(r"#\w+")


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class _Known:
    """A run's head at one version, as this process last read or wrote it (a version never changes)."""

    record: Checkpoint
    seq: int
    base_bytes: int
    """Size of the head's inline base (0: no base)."""
    inc: str | None
    folded: Folded


class DynamoCheckpointStore:
    """A :class:`~durable_harness.ports.CheckpointStore` on a DynamoDB table (and S3 for big records).

    ``client`` is a boto3 DynamoDB client; ``s3_client`` and ``bucket`` enable offloading record
    bodies larger than ``offload_bytes`` (without them, such a record fails with ``StorageError``
    rather than hitting DynamoDB's 400 KB item limit mid-run). ``ttl_seconds`` (``None``: never) is
    how long a record lives after its last write, ``max_age_seconds`` (``None``: no cap) how long
    at most after its creation. ``reset_log_head`` makes ``create`` write the run's empty chunk log
    (when the log shares the table, as deployed). ``clock`` returns epoch seconds (tests move it).
    """

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
        self._objects = StateObjects(s3_client, bucket, prefix=key_prefix, offload_bytes=offload_bytes)
        self._max_age = max_age_seconds
        self._reset_log_head = reset_log_head
        self._on_created = on_created
        self._table = table_name
        self._ddb = client
        self._ttl = ttl_seconds
        self._clock = clock
        # The last head this process read or wrote per run, with its state: it is the base of the
        # next delta, and it lets claim/save skip re-reading the run.
        self._lock = threading.Lock()
        self._known: OrderedDict[str, _Known] = OrderedDict()
        self._created: OrderedDict[str, tuple[int, str]] = OrderedDict()  # run -> creation, for the expiry cap

    @property
    def table_name(self) -> str:
        """The DynamoDB table holding the run records."""
        return self._table

    def create(self, checkpoint: Checkpoint) -> Checkpoint:
        """Store a new run record at version 1, epoch 0. Raises ``RunExistsError``."""
        created, existing = self._put_new(checkpoint)
        if existing is not None:
            raise RunExistsError(checkpoint.run_id)
        return created

    def create_if_absent(self, checkpoint: Checkpoint) -> tuple[Checkpoint, bool]:
        """Create the record unless the run exists: ``(record, True)``, or ``(existing, False)``.

        Idempotent starts use it: the same start request delivered twice creates one run.
        """
        created, existing = self._put_new(checkpoint)
        if existing is None:
            return created, True
        if "seq" not in existing and "state" in existing:  # the whole state is in the head
            return self._copy(self._decode(existing, []).record), False
        return self.load(checkpoint.run_id), False

    def load(self, run_id: str) -> Checkpoint:
        """The newest record of a run (one strongly consistent Query). Raises ``RunNotFoundError``."""
        return self._copy(self._load(run_id).record)

    def summary(self, run_id: str) -> RunSummary:
        """The record's status, principal and chat id: one strongly consistent GetItem that
        leaves the state out (so never a read of an offloaded state). Raises ``RunNotFoundError``."""
        with aws_errors(f"loading run {run_id!r}"):
            item = self._ddb.get_item(
                TableName=self._table,
                Key=self._key(run_id),
                ConsistentRead=True,
                ProjectionExpression=", ".join(_SUMMARY),
                ExpressionAttributeNames={name: _NAMES[name] for name in _SUMMARY},
            ).get("Item")
        if item is None or self._expired(item):
            raise RunNotFoundError(run_id)
        check_format(item, RECORD_FORMAT, f"the record of run {run_id!r}")
        return RunSummary(
            run_id,
            item["status"]["S"],
            item["principal"]["S"] if "principal" in item else None,
            item["chat_id"]["S"] if "chat_id" in item else None,
        )

    def runs_of(
        self,
        principal: str,
        *,
        limit: int,
        after: ListPosition | None = None,
        statuses: frozenset[str] | None = None,
        chat_id: str | None = None,
    ) -> tuple[list[RunListing], ListPosition | None]:
        """The principal's runs, newest first, from the table's index on (principal, created_at)."""
        return query_principal_runs(
            self._ddb, self._table, principal, limit=limit, after=after, statuses=statuses, chat_id=chat_id,
            clock=self._clock,
        )  # fmt: skip

    def latest_run(self, chat_id: str, principal: str | None) -> str | None:
        """The run created last for ``principal``'s chat: one strongly consistent GetItem of the
        chat's pointer item, which each run's creation writes in its transaction (no scan, no index)."""
        with aws_errors(f"loading the latest run of chat {chat_id!r}"):
            item = self._ddb.get_item(TableName=self._table, Key=chat_key(chat_id, principal),
                                      ConsistentRead=True).get("Item")  # fmt: skip
        if item is None or self._expired(item):
            return None
        return str(item["run_id"]["S"])

    def incarnation(self, run_id: str) -> str | None:
        """The token of the run's current incarnation (``None`` for a record made before there were
        any); ``RunNotFoundError`` when the run does not exist. One small strongly consistent read."""
        with aws_errors(f"loading run {run_id!r}"):
            item = self._ddb.get_item(
                TableName=self._table,
                Key=self._key(run_id),
                ConsistentRead=True,
                ProjectionExpression="#inc, #expires_at",
                ExpressionAttributeNames={"#inc": "inc", "#expires_at": "expires_at"},
            ).get("Item")
        if item is None or self._expired(item):
            raise RunNotFoundError(run_id)
        return item["inc"]["S"] if "inc" in item else None

    def version(self, run_id: str) -> int:
        """The run's current version: one small strongly consistent read of the head."""
        with aws_errors(f"loading run {run_id!r}"):
            item = self._ddb.get_item(
                TableName=self._table,
                Key=self._key(run_id),
                ConsistentRead=True,
                ProjectionExpression="#version, #expires_at",
                ExpressionAttributeNames={"#version": "version", "#expires_at": "expires_at"},
            ).get("Item")
        if item is None or self._expired(item):
            raise RunNotFoundError(run_id)
        return num(item["version"])

    def claim(self, run_id: str, expected_version: int) -> Checkpoint:
        """Bump epoch and version if the version is still ``expected_version``."""
        known = self._known_at(run_id, expected_version)
        update = "SET #version = #version + :one, #epoch = #epoch + :one, #updated_at = :u"
        # Only the counters come back, not the state.
        attrs = self._write(run_id, expected_version, known.inc, "claim", update, {}, returns="UPDATED_NEW")
        claimed = replace(known.record, version=num(attrs["version"]), epoch=num(attrs["epoch"]))
        self._remember(replace(known, record=claimed))
        return self._copy(claimed)

    def save(self, checkpoint: Checkpoint, expected_version: int) -> Checkpoint:
        """Append the state's record and move the head if its version is still ``expected_version``
        (version + 1): one transaction, or one UpdateItem when no record is needed."""
        run_id = checkpoint.run_id
        known = self._known_at(run_id, expected_version)
        plan, folded = plan_save(
            known.folded, checkpoint.state, seq=known.seq, base_bytes=known.base_bytes, value=checkpoint.value
        )
        values: dict[str, Any] = {":status": {"S": checkpoint.status}, ":meta": meta_attr(checkpoint.meta)}
        sets = ["#version = #version + :one", "#status = :status", "#meta = :meta", "#updated_at = :u"]
        removes: list[str] = []
        for name, value in (("principal", checkpoint.principal), ("chat_id", checkpoint.chat_id)):
            if value is None:
                removes.append(f"#{name}")
            else:
                sets.append(f"#{name} = :{name}")
                values[f":{name}"] = {"S": value}
        seq, base_bytes = known.seq, known.base_bytes
        if plan.inline is not None:
            sets.append("#state = :state")
            values[":state"] = {"S": plan.inline}
            base_bytes = len(plan.inline.encode("utf-8"))
        if plan.drop_base:
            removes.append("#state")
            base_bytes = 0
        record, body_key = None, None
        if plan.record is not None:
            seq += 1
            sets.append("#seq = :seq")
            values[":seq"] = n(seq)
            kind, body = plan.record
            body_key = self._objects.put(run_id, f"{known.inc or '-'}-{seq:08d}", body)
            expiry = self._expiry(run_id, int(self._clock()))[0] if self._ttl is not None else None
            record = record_item(
                run_id, seq, kind, body=body, body_key=body_key, inc=known.inc, expires_at=expiry
            )  # fmt: skip
        update = "SET " + ", ".join(sets)
        try:
            self._write(run_id, expected_version, known.inc, "save", update, values, removes=removes, record=record)
        except (FencedError, RunNotFoundError):
            self._objects.delete(body_key)  # ours, and never referenced: the write did not happen
            raise
        saved = replace(  # not the writer's value: a record saved again with another state must not carry it
            checkpoint, version=expected_version + 1, epoch=known.record.epoch, meta=dict(checkpoint.meta), value=None
        )
        self._remember(_Known(saved, seq, base_bytes, known.inc, folded))
        return self._copy(saved)

    # --- reads -------------------------------------------------------------------------------------

    def _load(self, run_id: str) -> _Known:
        for _ in range(_LOAD_ATTEMPTS):
            items = query_run(self._ddb, self._table, run_id)
            try:
                head, records = split_run(items)
            except StaleRead:
                continue  # the run was created again while it was read
            if head is None or self._expired(head):
                raise RunNotFoundError(run_id)
            return self._decode(head, records)
        raise StorageError(f"run {run_id!r}: the record keeps changing while it is read")

    def _decode(self, head: dict[str, Any], records: list[dict[str, Any]]) -> _Known:
        run_id = head["pk"]["S"]
        check_format(head, RECORD_FORMAT, f"the record of run {run_id!r}")
        if "created_at" in head:
            self._note_created(run_id, head)
        seq = num(head["seq"]) if "seq" in head else 0
        if len(records) != seq:
            logger.warning("run %s: %d of its %d checkpoint records have expired", run_id, seq - len(records), seq)
            raise RunNotFoundError(run_id)
        bodies = [(r["kind"]["S"], self._body(run_id, r)) for r in from_last_full(records)]
        base: str | None = head["state"]["S"] if "state" in head else None
        base_bytes = len(base.encode("utf-8")) if base is not None else 0
        record = Checkpoint(
            run_id=run_id,
            state="",
            status=head["status"]["S"],
            version=num(head["version"]),
            epoch=num(head["epoch"]),
            principal=head["principal"]["S"] if "principal" in head else None,
            chat_id=head["chat_id"]["S"] if "chat_id" in head else None,
            meta={k: v["S"] for k, v in head.get("meta", {}).get("M", {}).items()},
        )
        folded = fold(base, bodies)
        inc = head["inc"]["S"] if "inc" in head else None
        known = _Known(replace(record, state=folded.text), seq, base_bytes, inc, folded)
        self._remember(known)
        return known

    def _body(self, run_id: str, item: dict[str, Any]) -> str:
        if "body" in item:
            return str(item["body"]["S"])
        try:
            return self._objects.text(item["body_key"]["S"])
        except ObjectGone:  # record objects are never deleted while their run lives
            raise CorruptCheckpointError(f"run {run_id!r}: the object of a checkpoint record is missing") from None

    # --- writes ------------------------------------------------------------------------------------

    def _put_new(self, checkpoint: Checkpoint) -> tuple[Checkpoint, dict[str, Any] | None]:
        """Conditionally put a version-1 record; returns it, or the existing head when the run exists."""
        run_id = checkpoint.run_id
        record = replace(checkpoint, version=1, epoch=0, meta=dict(checkpoint.meta))
        plan = plan_create(record.state)
        at = self._clock()
        now, clock = _iso(at), int(at)
        incarnation = secrets.token_hex(5)
        expires_at = clock + min(self._ttl, self._max_age or self._ttl) if self._ttl is not None else None
        item: dict[str, Any] = {
            **self._key(run_id),
            "format": n(RECORD_FORMAT),
            "version": n(1),
            "epoch": n(0),
            "status": {"S": record.status},
            "meta": meta_attr(record.meta),
            "created_at": {"S": now},
            "updated_at": {"S": now},
            "inc": {"S": incarnation},
        }
        if record.principal is not None:
            item["principal"] = {"S": record.principal}
        if record.chat_id is not None:
            item["chat_id"] = {"S": record.chat_id}
        if expires_at is not None:
            item["expires_at"] = n(expires_at)
        put = {
            "TableName": self._table,
            "Item": item,
            # An expired record still sits in the table until TTL deletes it; it may be replaced.
            "ConditionExpression": "attribute_not_exists(#pk) OR #expires_at <= :now",
            "ExpressionAttributeNames": {"#pk": "pk", "#expires_at": "expires_at"},
            "ExpressionAttributeValues": {":now": n(clock)},
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        writes: list[dict[str, Any]] = [{"Put": put}]
        body_key = None
        if plan.inline is not None:
            item["state"] = {"S": plan.inline}
        elif plan.record is not None:
            item["seq"] = n(1)
            kind, body = plan.record
            body_key = self._objects.put(run_id, f"{incarnation}-{1:08d}", body)
            first = record_item(run_id, 1, kind, body=body, body_key=body_key, inc=incarnation, expires_at=expires_at)
            writes.append({"Put": {"TableName": self._table, "Item": first}})
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
            existing = existing_item(exc)
            if existing is None:
                raise write_error(exc, f"creating run {run_id!r}") from exc
            return record, existing
        except BotoCoreError as exc:
            self._objects.delete(body_key)
            raise translate(exc, f"creating run {run_id!r}") from exc
        self._note_created(run_id, item)
        size = len(plan.inline.encode("utf-8")) if plan.inline is not None else 0
        self._remember(_Known(record, 0 if plan.inline is not None else 1, size, incarnation,
                              Folded(record.state, parse(record.state))))  # fmt: skip
        if self._on_created is not None and self._reset_log_head and is_run_id(run_id):
            self._on_created(run_id, generation(at, incarnation))
        return self._copy(record), None

    def _write(
        self,
        run_id: str,
        expected: int,
        inc: str | None,
        what: str,
        update: str,
        values: dict[str, Any],
        *,
        removes: list[str] | None = None,
        record: dict[str, Any] | None = None,
        returns: str = "NONE",
    ) -> dict[str, Any]:
        """A write of the head conditional on the version (and on the run being live, of the same
        incarnation): bumps the version, stamps ``updated_at``, pushes ``expires_at`` out; with
        ``record``, in one transaction with the put of that record item. Returns the attributes
        ``returns`` asks for. A failed condition becomes NotFound or Fenced."""
        now = int(self._clock())
        # A token of this write: if its reply is lost and botocore retries it, the retry fails the
        # version condition against our own write, and the token tells that apart from a rival.
        token = secrets.token_hex(8)
        values = {
            **values, ":v": n(expected), ":one": n(1), ":u": {"S": _iso(self._clock())}, ":now": n(now),
            ":w": {"S": token},
        }  # fmt: skip
        update += ", #write_id = :w"
        condition = f"#version = :v AND {_LIVE}"
        if inc is not None:  # a writer of an expired incarnation must not land on the new one
            condition += " AND #inc = :inc"
            values[":inc"] = {"S": inc}
        if self._ttl is not None:
            update += ", #expires_at = :exp"  # every write keeps a live run alive (up to its max age)
            expiry, created = self._expiry(run_id, now)
            values[":exp"] = n(expiry)
            if created is not None:
                # The cap was computed for this creation: it must not land on another incarnation.
                condition += " AND #created_at = :created"
                values[":created"] = {"S": created}
        if removes:
            update += " REMOVE " + ", ".join(removes)
        # DynamoDB rejects placeholders a request does not use, so pass exactly the ones it has.
        names = {name: _NAMES[name] for name in _PLACEHOLDER.findall(update + " " + condition)}
        request = {
            "TableName": self._table,
            "Key": self._key(run_id),
            "UpdateExpression": update,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        try:
            if record is None:
                response: dict[str, Any] = self._ddb.update_item(**request, ReturnValues=returns)
                return dict(response.get("Attributes", {}))
            self._ddb.transact_write_items(
                TransactItems=[{"Update": request}, {"Put": {"TableName": self._table, "Item": record}}],
                ClientRequestToken=secrets.token_hex(16),
            )
            return {}
        except ClientError as exc:
            code = error_code(exc)
            if code == "ConditionalCheckFailedException":
                current = error_item(exc)
            elif code == "TransactionCanceledException" and cancel_reason(exc) == "ConditionalCheckFailed":
                current = cancel_item(exc)
            else:
                raise write_error(exc, f"{what} of run {run_id!r}") from exc
            if current is None or self._expired(current):
                raise RunNotFoundError(run_id) from None
            if current.get("write_id", {}).get("S") == token and num(current["version"]) == expected + 1:
                return current  # our write landed; only its first reply was lost
            found = num(current["version"])
            if found == expected:  # only the incarnation or creation condition can have failed
                raise FencedError(f"run {run_id!r}: {what}: the run was created again meanwhile") from None
            raise FencedError(f"run {run_id!r}: {what} expected version {expected}, found {found}") from None
        except BotoCoreError as exc:
            raise translate(exc, f"{what} of run {run_id!r}") from exc

    def _expiry(self, run_id: str, now: int) -> tuple[int, str | None]:
        """``expires_at`` for a write at ``now`` (``ttl_seconds`` ahead, capped at creation + max
        age), and the ``created_at`` the cap was computed from (``None`` without a cap)."""
        assert self._ttl is not None
        expiry = now + self._ttl
        if self._max_age is None:
            return expiry, None
        with self._lock:
            created = self._created.get(run_id)
        if created is None:  # normally known: writers load the record first
            with aws_errors(f"loading run {run_id!r}"):
                item = self._ddb.get_item(
                    TableName=self._table,
                    Key=self._key(run_id),
                    ConsistentRead=True,
                    ProjectionExpression="created_at",
                ).get("Item")
            if item is None:
                return expiry, None  # the conditional write that follows reports the missing run
            created = self._note_created(run_id, item)
        at, text = created
        return min(expiry, at + self._max_age), text

    def _note_created(self, run_id: str, item: dict[str, Any]) -> tuple[int, str]:
        """Remember (and return) when the record in ``item`` was created: epoch seconds, and as stored."""
        text = item["created_at"]["S"]
        created = (int(datetime.fromisoformat(text).timestamp()), text)
        with self._lock:
            self._created[run_id] = created
            self._created.move_to_end(run_id)
            while len(self._created) > _CACHE_RUNS:
                self._created.popitem(last=False)
        return created

    # --- records -----------------------------------------------------------------------------------

    def _key(self, run_id: str) -> dict[str, Any]:
        if not run_id:
            raise ValueError("run id must not be empty")
        return {"pk": {"S": run_id}, "sk": {"S": RUN_SK}}

    def _expired(self, item: dict[str, Any]) -> bool:
        return "expires_at" in item and num(item["expires_at"]) <= int(self._clock())

    @staticmethod
    def _copy(record: Checkpoint) -> Checkpoint:
        return replace(record, meta=dict(record.meta))

    def _remember(self, known: _Known) -> None:
        run_id = known.record.run_id
        with self._lock:
            self._known[run_id] = replace(known, record=self._copy(known.record))
            self._known.move_to_end(run_id)
            while len(self._known) > _CACHE_RUNS:
                self._known.popitem(last=False)

    def _known_at(self, run_id: str, version: int) -> _Known:
        """The run's head at ``version``: cached, or read (``FencedError`` if it moved on)."""
        with self._lock:
            known = self._known.get(run_id)
        if known is None or known.record.version != version:
            known = self._load(run_id)
        if known.record.version != version:
            raise FencedError(f"run {run_id!r}: expected version {version}, found {known.record.version}")
        return known
