"""A run's head in DynamoDB: its small reads, its fenced writes, and its expiry (see :mod:`.store`).

A write pushes ``expires_at`` out to ``ttl_seconds`` from now, but never past ``created_at +
max_age_seconds`` when that is set. DynamoDB's TTL deletion is lazy (up to days), so an item whose
``expires_at`` has passed is treated as missing by every operation.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ...checkpoints.base import VersionConflict
from ...errors import RunNotFoundError
from ...lru import LRU
from .._errors import aws_errors, translate
from ..table import EXPIRES_AT, FORMAT, PK, Head, run_key
from .records import condition_failed, existing_item, n, num, write_error

# Every attribute goes through a placeholder: status, state and others are DynamoDB reserved words.
NAMES = {
    f"#{name}": name
    for name in (
        PK, FORMAT, EXPIRES_AT, Head.VERSION, Head.EPOCH, Head.STATUS, Head.PRINCIPAL, Head.CHAT_ID, Head.META,
        Head.STATE, Head.SEQ, Head.INC, Head.UPDATED_AT, Head.WRITE_ID, Head.CREATED_AT,
    )
}  # fmt: skip
"""``#<attribute>`` for every attribute of the head an expression names."""
_LIVE = "(attribute_not_exists(#expires_at) OR #expires_at > :now)"
_PLACEHOLDER = re.compile(r"#\w+")
_CACHE_RUNS = 16


def iso(at: float) -> str:
    """``at`` (epoch seconds) as the head's timestamps are stored: ISO 8601, UTC, milliseconds."""
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")


class HeadTable:
    """The requests on runs' heads in ``table`` through ``client``: small reads and fenced writes."""

    def __init__(
        self, table: str, client: Any, *, ttl_seconds: int | None, max_age_seconds: int | None,
        clock: Callable[[], float],
    ) -> None:  # fmt: skip
        """Heads live ``ttl_seconds`` after a write (``None``: for ever), at most ``max_age_seconds``
        after their creation (``None``: no cap); ``clock`` returns epoch seconds."""
        self._table = table
        self._ddb = client
        self._ttl = ttl_seconds
        self._max_age = max_age_seconds
        self._clock = clock
        self._created: LRU[str, tuple[int, str]] = LRU(_CACHE_RUNS)  # run -> creation, for the expiry cap

    def expired(self, item: dict[str, Any]) -> bool:
        """Whether ``item`` is past its ``expires_at`` (it counts as missing)."""
        return EXPIRES_AT in item and num(item[EXPIRES_AT]) <= int(self._clock())

    def get(self, run_id: str, *attributes: str) -> dict[str, Any]:
        """The head's ``attributes`` (and its expiry), one strongly consistent GetItem.
        Raises ``RunNotFoundError`` when there is no live head."""
        placeholders = [f"#{a}" for a in (*attributes, EXPIRES_AT)]
        with aws_errors(f"loading run {run_id!r}"):
            item = self._ddb.get_item(
                TableName=self._table, Key=run_key(run_id), ConsistentRead=True,
                ProjectionExpression=", ".join(placeholders),
                ExpressionAttributeNames={p: NAMES[p] for p in placeholders},
            ).get("Item")  # fmt: skip
        if item is None or self.expired(item):
            raise RunNotFoundError(run_id)
        return dict(item)

    def write(
        self, run_id: str, expected: int, inc: str | None, what: str, update: str, values: dict[str, Any], *,
        removes: list[str] | None = None, record: dict[str, Any] | None = None, returns: str = "NONE",
    ) -> dict[str, Any]:  # fmt: skip
        """A write of the head conditional on the version (and on the run being live, of the same
        incarnation): bumps the version, stamps ``updated_at``, pushes ``expires_at`` out; with
        ``record``, in one transaction with the put of that record item. Returns the attributes
        ``returns`` asks for. A failed condition is reported as :class:`VersionConflict`."""
        now = int(self._clock())
        # A token of this write: if its reply is lost and botocore retries it, the retry fails the
        # version condition against our own write, and the token tells that apart from a rival.
        token = secrets.token_hex(8)
        values = {
            **values, ":v": n(expected), ":one": n(1), ":u": {"S": iso(self._clock())}, ":now": n(now),
            ":w": {"S": token},
        }  # fmt: skip
        update += ", #write_id = :w"
        condition = f"#version = :v AND {_LIVE}"
        if inc is not None:  # a writer of an expired incarnation must not land on the new one
            condition += " AND #inc = :inc"
            values[":inc"] = {"S": inc}
        if self._ttl is not None:
            update += ", #expires_at = :exp"  # every write keeps a live run alive (up to its max age)
            expiry, created = self.expiry(run_id, now)
            values[":exp"] = n(expiry)
            if created is not None:
                # The cap was computed for this creation: it must not land on another incarnation.
                condition += " AND #created_at = :created"
                values[":created"] = {"S": created}
        if removes:
            update += " REMOVE " + ", ".join(removes)
        # DynamoDB rejects placeholders a request does not use, so pass exactly the ones it has.
        names = {name: NAMES[name] for name in _PLACEHOLDER.findall(update + " " + condition)}
        request = {
            "TableName": self._table,
            "Key": run_key(run_id),
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
            if not condition_failed(exc):
                raise write_error(exc, f"{what} of run {run_id!r}") from exc
            current = existing_item(exc)
            if current is None or self.expired(current):
                raise VersionConflict(None) from None
            found = num(current[Head.VERSION])
            if current.get(Head.WRITE_ID, {}).get("S") == token and found == expected + 1:
                return current  # our write landed; only its first reply was lost
            # found == expected: only the incarnation or creation condition can have failed
            raise VersionConflict(found) from None
        except BotoCoreError as exc:
            raise translate(exc, f"{what} of run {run_id!r}") from exc

    def expiry(self, run_id: str, now: int) -> tuple[int, str | None]:
        """``expires_at`` for a write at ``now`` (``ttl_seconds`` ahead, capped at creation + max
        age), and the ``created_at`` the cap was computed from (``None`` without a cap)."""
        assert self._ttl is not None
        expiry = now + self._ttl
        if self._max_age is None:
            return expiry, None
        created = self._created.get(run_id)
        if created is None:  # normally known: writers load the record first
            try:
                created = self.note_created(run_id, self.get(run_id, Head.CREATED_AT))
            except RunNotFoundError:
                return expiry, None  # the conditional write that follows reports the missing run
        at, text = created
        return min(expiry, at + self._max_age), text

    def note_created(self, run_id: str, item: dict[str, Any]) -> tuple[int, str]:
        """Remember (and return) when the record in ``item`` was created: epoch seconds, and as stored."""
        text = item[Head.CREATED_AT]["S"]
        created = (int(datetime.fromisoformat(text).timestamp()), text)
        return self._created.put(run_id, created)
