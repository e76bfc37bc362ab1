"""The deployed checkpoint store: one DynamoDB item per run, large states offloaded to S3 (D5).

Table layout (shared with the chunk log's items, see :mod:`.chunklog`)::

    pk (S) = run id    sk (S) = "run"
    version, epoch (N)         fencing counters (ports.py); every write is conditional on version
    status, principal, chat_id copied out of the state for the API and for people reading the table
    meta (M of S)
    state (S)                  the state's JSON text, or, when it is over ``offload_bytes``:
    state_key (S)              the S3 key of an immutable object holding it
    created_at, updated_at (S) ISO 8601, UTC
    expires_at (N)             epoch seconds: the table's TTL attribute
    inc (S)                    the incarnation: a random token made when the record is created

A run id can be used again once its record has expired (an idempotent chat POST or a "Start Run"
event repeated after ``RunTtlDays``). Everything keyed by the run id alone would then mix the two
runs, so ``inc`` tells them apart: Step Functions names the run's executions after it (execution
names stay taken for 90 days after an execution closes), and the chunk log keys each incarnation's
items and objects by it. Creating a record also writes the empty log of the new incarnation
(``sk="c#<created ms>.<inc>#~"``, see :mod:`.chunklog`) in the same transaction; its keys sort
after every older incarnation's, so the items an expired run left are never read or appended to
by the new one.

Expiry. Every write pushes ``expires_at`` out to ``ttl_seconds`` from now, but never past
``created_at + max_age_seconds`` when that is set. The runtime sets it to the chunk bucket's
lifecycle expiration (``ChunkRetentionDays``), so a record always expires before the oldest of
its chunk segments and offloaded states: every one of them was written after the record was
created, and S3 keeps an object at least that many days. A run whose writes go on longer than
``max_age_seconds`` after its creation finds its record expired (and is treated as missing).

Offloaded objects are written under ``runs/<run_id>/state/<version>-<nonce>.json`` *before* the
conditional write that points at them, so a record never points at a missing object. The nonce
matters: two writers racing with the same expected version would otherwise write the same key,
and the loser's overwrite would corrupt the winner's committed state. Superseded objects are
deleted once the new record is written (best effort; the bucket's lifecycle rule is the backstop),
and ``load`` re-reads the record if the object it pointed at was deleted meanwhile.

DynamoDB's TTL deletion is lazy (up to days), so an item whose ``expires_at`` has passed is
treated as missing by every operation, and ``create`` may replace it.
"""

from __future__ import annotations

import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from contextlib import suppress
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ..errors import FencedError, HarnessError, RunExistsError, RunNotFoundError, StorageError
from ..ids import is_run_id
from ..ports import Checkpoint, RunSummary
from ._errors import aws_errors, error_code, error_item, translate
from ._logitems import fresh_log_item, generation

__all__ = ["DynamoCheckpointStore"]

_RUN_SK = "run"
_CACHE_RUNS = 16
_LOAD_ATTEMPTS = 3
# Every attribute goes through a placeholder: status, state and others are DynamoDB reserved words.
_NAMES = {f"#{n}": n for n in ("pk", "version", "epoch", "status", "principal", "chat_id", "meta", "state")} | {
    "#state_key": "state_key",
    "#updated_at": "updated_at",
    "#expires_at": "expires_at",
    "#write_id": "write_id",
    "#created_at": "created_at",
}
_SUMMARY = ("#pk", "#status", "#principal", "#chat_id", "#expires_at")
_LIVE = "(attribute_not_exists(#expires_at) OR #expires_at > :now)"
_PLACEHOLDER = re.compile(r"#\w+")


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")


class DynamoCheckpointStore:
    """A :class:`~durable_harness.ports.CheckpointStore` on a DynamoDB table (and S3 for big states).

    ``client`` is a boto3 DynamoDB client; ``s3_client`` and ``bucket`` enable offloading states
    larger than ``offload_bytes`` (without them, such a state fails with ``StorageError`` rather
    than hitting DynamoDB's 400 KB item limit mid-run). ``ttl_seconds`` (``None``: never) is how
    long a record lives after its last write, ``max_age_seconds`` (``None``: no cap) how long at
    most after its creation. ``reset_log_head`` makes ``create`` write the run's empty chunk log
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
        if (s3_client is None) != (bucket is None):
            raise ValueError("pass both s3_client and bucket to offload large states, or neither")
        self._max_age = max_age_seconds
        self._reset_log_head = reset_log_head
        self._on_created = on_created
        self._table = table_name
        self._ddb = client
        self._s3 = s3_client
        self._bucket = bucket
        self._ttl = ttl_seconds
        self._offload = offload_bytes
        self._prefix = key_prefix
        self._clock = clock
        # The last record this process read or wrote per run, with its state key. A record at a
        # given version never changes, so it lets save/claim skip returning (and re-reading) a
        # state of up to 300 KB, and the superseded S3 object can be deleted.
        self._lock = threading.Lock()
        self._known: OrderedDict[str, tuple[Checkpoint, str | None]] = OrderedDict()
        self._created: OrderedDict[str, tuple[int, str]] = OrderedDict()  # run -> creation, for the expiry cap
        self._texts: OrderedDict[str, str] = OrderedDict()  # S3 key -> state text (immutable)

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
        try:
            return self._decode(existing), False
        except _StateGone:
            return self.load(checkpoint.run_id), False

    def load(self, run_id: str) -> Checkpoint:
        """The newest record of a run (strongly consistent read). Raises ``RunNotFoundError``."""
        for _ in range(_LOAD_ATTEMPTS):
            with aws_errors(f"loading run {run_id!r}"):
                item = self._ddb.get_item(TableName=self._table, Key=self._key(run_id), ConsistentRead=True).get("Item")
            if item is None or self._expired(item):
                raise RunNotFoundError(run_id)
            try:
                return self._decode(item)
            except _StateGone:
                continue  # a save replaced the record (and deleted its old object) meanwhile
        raise StorageError(f"run {run_id!r}: the offloaded state keeps disappearing")

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
        return RunSummary(
            run_id,
            item["status"]["S"],
            item["principal"]["S"] if "principal" in item else None,
            item["chat_id"]["S"] if "chat_id" in item else None,
        )

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

    def claim(self, run_id: str, expected_version: int) -> Checkpoint:
        """Bump epoch and version if the version is still ``expected_version``."""
        known = self._known_at(run_id, expected_version)
        update = "SET #version = #version + :one, #epoch = #epoch + :one, #updated_at = :u"
        # With the record at hand only the counters need to come back, not a 300 KB state.
        response = self._update(run_id, expected_version, "claim", update, {}, "UPDATED_NEW" if known else "ALL_NEW")
        attrs = response["Attributes"]
        if known is not None:
            record, state_key = known
            claimed = replace(
                record, version=_int(attrs["version"]), epoch=_int(attrs["epoch"]), meta=dict(record.meta)
            )
            self._remember(claimed, state_key)
            return claimed
        return self._decode(attrs)

    def save(self, checkpoint: Checkpoint, expected_version: int) -> Checkpoint:
        """Replace the record if its version is still ``expected_version`` (version + 1)."""
        run_id = checkpoint.run_id
        known = self._known_at(run_id, expected_version)
        state_key = self._offload_state(checkpoint, expected_version + 1)
        values: dict[str, Any] = {":status": {"S": checkpoint.status}, ":meta": _meta(checkpoint.meta)}
        sets = ["#version = #version + :one", "#status = :status", "#meta = :meta", "#updated_at = :u"]
        removes = []
        if state_key is None:
            sets.append("#state = :state")
            values[":state"] = {"S": checkpoint.state}
            removes.append("#state_key")
        else:
            sets.append("#state_key = :state_key")
            values[":state_key"] = {"S": state_key}
            removes.append("#state")
        for name, value in (("principal", checkpoint.principal), ("chat_id", checkpoint.chat_id)):
            if value is None:
                removes.append(f"#{name}")
            else:
                sets.append(f"#{name} = :{name}")
                values[f":{name}"] = {"S": value}
        update = "SET " + ", ".join(sets)
        try:
            returns = "NONE" if known else "ALL_NEW"
            response = self._update(run_id, expected_version, "save", update, values, returns, removes)
        except (FencedError, RunNotFoundError):
            self._delete_object(state_key)  # ours, and never referenced: the write did not happen
            raise
        epoch = known[0].epoch if known else _int(response["Attributes"]["epoch"])
        saved = replace(checkpoint, version=expected_version + 1, epoch=epoch, meta=dict(checkpoint.meta))
        self._remember(saved, state_key)
        if known is not None and known[1] is not None and known[1] != state_key:
            self._delete_object(known[1])
        return saved

    # --- writes ------------------------------------------------------------------------------------

    def _put_new(self, checkpoint: Checkpoint) -> tuple[Checkpoint, dict[str, Any] | None]:
        """Conditionally put a version-1 record; returns it, or the existing item when the run exists."""
        run_id = checkpoint.run_id
        record = replace(checkpoint, version=1, epoch=0, meta=dict(checkpoint.meta))
        state_key = self._offload_state(record, 1)
        at = self._clock()
        now, clock = _iso(at), int(at)
        incarnation = secrets.token_hex(5)
        item: dict[str, Any] = {
            **self._key(run_id),
            "version": _n(1),
            "epoch": _n(0),
            "status": {"S": record.status},
            "meta": _meta(record.meta),
            "created_at": {"S": now},
            "updated_at": {"S": now},
            "inc": {"S": incarnation},
        }
        item.update({"state_key": {"S": state_key}} if state_key else {"state": {"S": record.state}})
        if record.principal is not None:
            item["principal"] = {"S": record.principal}
        if record.chat_id is not None:
            item["chat_id"] = {"S": record.chat_id}
        if self._ttl is not None:
            item["expires_at"] = _n(clock + min(self._ttl, self._max_age or self._ttl))
        put = {
            "TableName": self._table,
            "Item": item,
            # An expired record still sits in the table until TTL deletes it; it may be replaced.
            "ConditionExpression": "attribute_not_exists(#pk) OR #expires_at <= :now",
            "ExpressionAttributeNames": {"#pk": "pk", "#expires_at": "expires_at"},
            "ExpressionAttributeValues": {":now": _n(clock)},
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        try:
            if self._reset_log_head and is_run_id(run_id):  # other records (the approval ledger's) have no log
                head_ttl = self._max_age if self._max_age is not None else self._ttl
                gen = generation(at, incarnation)
                head = fresh_log_item(run_id, gen, None if head_ttl is None else clock + head_ttl)
                self._ddb.transact_write_items(
                    TransactItems=[{"Put": put}, {"Put": {"TableName": self._table, "Item": head}}],
                    # Makes botocore's retry of a transaction whose reply was lost a no-op.
                    ClientRequestToken=secrets.token_hex(16),
                )
            else:
                self._ddb.put_item(**put)
        except ClientError as exc:
            existing = _existing_item(exc)
            if existing is None:
                raise _creation_error(exc, run_id) from exc
            self._delete_object(state_key)
            return record, existing
        except BotoCoreError as exc:
            raise translate(exc, f"creating run {run_id!r}") from exc
        self._remember(record, state_key)
        self._note_created(run_id, item)
        if self._on_created is not None and self._reset_log_head and is_run_id(run_id):
            self._on_created(run_id, generation(at, incarnation))
        return record, None

    def _update(
        self,
        run_id: str,
        expected: int,
        what: str,
        update: str,
        values: dict[str, Any],
        returns: str,
        removes: list[str] | None = None,
    ) -> dict[str, Any]:
        """A write conditional on the version (and on the record being live): bumps the version,
        stamps ``updated_at``, pushes ``expires_at`` out. A failed condition becomes NotFound or
        Fenced."""
        now = int(self._clock())
        # A token of this write: if its reply is lost and botocore retries it, the retry fails the
        # version condition against our own write, and the token tells that apart from a rival.
        token = secrets.token_hex(8)
        values = {
            **values, ":v": _n(expected), ":one": _n(1), ":u": {"S": _iso(self._clock())}, ":now": _n(now),
            ":w": {"S": token},
        }  # fmt: skip
        update += ", #write_id = :w"
        condition = f"#version = :v AND {_LIVE}"
        if self._ttl is not None:
            update += ", #expires_at = :exp"  # every write keeps a live run alive (up to its max age)
            expiry, created = self._expiry(run_id, now)
            values[":exp"] = _n(expiry)
            if created is not None:
                # The cap was computed for this creation: it must not land on another incarnation.
                condition += " AND #created_at = :created"
                values[":created"] = {"S": created}
        if removes:
            update += " REMOVE " + ", ".join(removes)
        # DynamoDB rejects placeholders a request does not use, so pass exactly the ones it has.
        names = {name: _NAMES[name] for name in _PLACEHOLDER.findall(update + " " + condition)}
        try:
            response: dict[str, Any] = self._ddb.update_item(
                TableName=self._table,
                Key=self._key(run_id),
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
                ReturnValues=returns,
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
            return response
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise translate(exc, f"{what} of run {run_id!r}") from exc
            current = error_item(exc)
            if current is None or self._expired(current):
                raise RunNotFoundError(run_id) from None
            if current.get("write_id", {}).get("S") == token and _int(current["version"]) == expected + 1:
                return {"Attributes": current}  # our write landed; only its first reply was lost
            found = _int(current["version"])
            if found == expected:  # only the creation condition can have failed
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

    # --- state offloading --------------------------------------------------------------------------

    def _offload_state(self, checkpoint: Checkpoint, version: int) -> str | None:
        """Write a large state to S3 and return its key; ``None`` when it stays in the item."""
        data = checkpoint.state.encode("utf-8")
        if len(data) <= self._offload:
            return None
        if self._s3 is None:
            raise StorageError(
                f"run {checkpoint.run_id!r}: state of {len(data)} bytes exceeds {self._offload} and no bucket is set"
            )
        key = f"{self._prefix}{checkpoint.run_id}/state/{version:010d}-{secrets.token_hex(6)}.json"
        with aws_errors(f"offloading the state of run {checkpoint.run_id!r}"):
            self._s3.put_object(
                Bucket=self._bucket, Key=key, Body=data, ContentType="application/json", IfNoneMatch="*"
            )
        self._cache_text(key, checkpoint.state)
        return key

    def _state_text(self, key: str) -> str:
        with self._lock:
            if key in self._texts:
                self._texts.move_to_end(key)
                return self._texts[key]
        if self._s3 is None:
            raise StorageError(f"a record points at S3 object {key!r}, but the store has no bucket")
        try:
            body = self._s3.get_object(Bucket=self._bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if error_code(exc) in ("NoSuchKey", "404"):
                raise _StateGone(key) from exc
            raise translate(exc, f"reading state object {key!r}") from exc
        except BotoCoreError as exc:
            raise translate(exc, f"reading state object {key!r}") from exc
        text = bytes(body).decode("utf-8")
        self._cache_text(key, text)
        return text

    def _cache_text(self, key: str, text: str) -> None:
        with self._lock:
            self._texts[key] = text
            while len(self._texts) > 4:
                self._texts.popitem(last=False)

    def _delete_object(self, key: str | None) -> None:
        """Best-effort delete of an object no record points at (lifecycle rules catch misses)."""
        if key is None or self._s3 is None:
            return
        with suppress(ClientError, BotoCoreError):
            self._s3.delete_object(Bucket=self._bucket, Key=key)
        with self._lock:
            self._texts.pop(key, None)

    # --- records -----------------------------------------------------------------------------------

    def _key(self, run_id: str) -> dict[str, Any]:
        if not run_id:
            raise ValueError("run id must not be empty")
        return {"pk": {"S": run_id}, "sk": {"S": _RUN_SK}}

    def _expired(self, item: dict[str, Any]) -> bool:
        return "expires_at" in item and _int(item["expires_at"]) <= int(self._clock())

    def _decode(self, item: dict[str, Any]) -> Checkpoint:
        if "created_at" in item:
            self._note_created(item["pk"]["S"], item)
        state_key = item["state_key"]["S"] if "state_key" in item else None
        state = self._state_text(state_key) if state_key else item["state"]["S"]
        record = Checkpoint(
            run_id=item["pk"]["S"],
            state=state,
            status=item["status"]["S"],
            version=_int(item["version"]),
            epoch=_int(item["epoch"]),
            principal=item["principal"]["S"] if "principal" in item else None,
            chat_id=item["chat_id"]["S"] if "chat_id" in item else None,
            meta={k: v["S"] for k, v in item.get("meta", {}).get("M", {}).items()},
        )
        self._remember(record, state_key)
        return replace(record, meta=dict(record.meta))

    def _remember(self, record: Checkpoint, state_key: str | None) -> None:
        with self._lock:
            self._known[record.run_id] = (replace(record, meta=dict(record.meta)), state_key)
            self._known.move_to_end(record.run_id)
            while len(self._known) > _CACHE_RUNS:
                self._known.popitem(last=False)

    def _known_at(self, run_id: str, version: int) -> tuple[Checkpoint, str | None] | None:
        """The cached record of ``run_id`` if it is the one at ``version``."""
        with self._lock:
            known = self._known.get(run_id)
        return known if known is not None and known[0].version == version else None


def _existing_item(exc: ClientError) -> dict[str, Any] | None:
    """The live record that made a create fail its condition (``None``: it failed otherwise)."""
    code = error_code(exc)
    if code == "ConditionalCheckFailedException":
        return error_item(exc)
    if code == "TransactionCanceledException":
        reasons = exc.response.get("CancellationReasons") or []
        first = reasons[0] if reasons else {}
        if first.get("Code") == "ConditionalCheckFailed":
            item = first.get("Item")
            return item if isinstance(item, dict) and item else None
    return None


def _creation_error(exc: ClientError, run_id: str) -> HarnessError:
    """The domain error for a create that failed for another reason than an existing run."""
    what = f"creating run {run_id!r}"
    if error_code(exc) == "TransactionCanceledException":
        codes = {str(r.get("Code")) for r in exc.response.get("CancellationReasons") or []} - {"None"}
        if codes <= {"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded"}:
            return StorageError(f"{what}: transaction cancelled ({', '.join(sorted(codes)) or 'no reason'})")
        if "ConditionalCheckFailed" in codes:  # the condition failed without an item: cannot happen
            return StorageError(f"{what}: the condition failed without an existing record")
    return translate(exc, what)


class _StateGone(Exception):
    """The S3 object a record pointed at was deleted (the record has moved on)."""


def _n(value: int) -> dict[str, str]:
    return {"N": str(value)}


def _int(attr: dict[str, str]) -> int:
    return int(attr["N"])


def _meta(meta: dict[str, str]) -> dict[str, Any]:
    return {"M": {str(k): {"S": str(v)} for k, v in meta.items()}}
