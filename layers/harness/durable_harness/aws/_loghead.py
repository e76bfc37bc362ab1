"""The chunk log's head item in DynamoDB: committed count, fence and last writer of one run.

``pk=<run_id>, sk="log"`` in the runs table, next to the run record (``sk="run"``). See
:mod:`.s3log` for what the attributes mean and how appends use them.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ._errors import aws_errors, error_code, error_item, translate

__all__ = ["ConditionFailed", "Head", "LogHead", "fresh_head_item", "n"]

_SK = "log"
_NAMES = {"#c": "count", "#e": "epoch", "#w": "writer", "#wf": "writer_from", "#x": "expires_at", "#i": "inc"}
_PLACEHOLDER = re.compile(r"#\w+")


@dataclass
class Head:
    """What a writer or reader knows of a run's head item."""

    count: int = 0
    fence: int = 0
    writer: int | None = None
    writer_from: int = 0
    inc: str | None = None
    """The run incarnation whose log this is (``None``: a log made before incarnations existed)."""

    @classmethod
    def of(cls, item: dict[str, Any] | None) -> Head:
        """The head described by a DynamoDB item (the empty head when there is none)."""
        item = item or {}

        def num(name: str) -> int | None:
            return int(item[name]["N"]) if name in item else None

        inc = item["inc"]["S"] if "inc" in item else None
        return cls(num("count") or 0, num("epoch") or 0, num("writer"), num("writer_from") or 0, inc)


class ConditionFailed(Exception):
    """A conditional head update failed; ``head`` is the item as it was (empty if missing)."""

    def __init__(self, head: Head) -> None:
        super().__init__("condition failed")
        self.head = head


class LogHead:
    """Reads and conditional updates of head items, through a boto3 DynamoDB client.

    Placeholders ``#c #e #w #wf #x #i`` name ``count epoch writer writer_from expires_at inc`` (two
    of which are DynamoDB reserved words). Every update also pushes ``expires_at`` out by
    ``ttl_seconds`` (unless ``None``).
    """

    def __init__(
        self, client: Any, table_name: str, *, ttl_seconds: int | None, clock: Callable[[], float] = time.time
    ) -> None:
        """Use ``table_name`` through ``client``."""
        self._ddb = client
        self._table = table_name
        self._ttl = ttl_seconds
        self._clock = clock

    def get(self, run_id: str, projection: str) -> Head:
        """The head (strongly consistent), only the attributes in ``projection``."""
        with aws_errors(f"reading the log head of run {run_id!r}"):
            item = self._ddb.get_item(
                TableName=self._table,
                Key=self._key(run_id),
                ConsistentRead=True,
                ProjectionExpression=projection,
                ExpressionAttributeNames={p: _NAMES[p] for p in _PLACEHOLDER.findall(projection)},
            ).get("Item")
        return Head.of(item)

    def update(
        self, run_id: str, update: str, condition: str, values: dict[str, Any], returns: str
    ) -> dict[str, Any] | None:
        """A conditional ``UpdateItem``; raises :class:`ConditionFailed` with the old head."""
        if self._ttl is not None:
            values = {**values, ":x": n(int(self._clock()) + self._ttl)}
            update += ", #x = :x"
        try:
            response = self._ddb.update_item(
                TableName=self._table,
                Key=self._key(run_id),
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeNames={p: _NAMES[p] for p in set(_PLACEHOLDER.findall(update + condition))},
                ExpressionAttributeValues=values,
                ReturnValues=returns,
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if error_code(exc) == "ConditionalCheckFailedException":
                raise ConditionFailed(Head.of(error_item(exc))) from None
            raise translate(exc, f"updating the log head of run {run_id!r}") from exc
        except BotoCoreError as exc:
            raise translate(exc, f"updating the log head of run {run_id!r}") from exc
        attributes: dict[str, Any] | None = response.get("Attributes")
        return attributes

    @staticmethod
    def _key(run_id: str) -> dict[str, Any]:
        return {"pk": {"S": run_id}, "sk": {"S": _SK}}


def fresh_head_item(run_id: str, inc: str, expires_at: int | None) -> dict[str, Any]:
    """The head item of an empty log of incarnation ``inc`` (written when the run record is created)."""
    item: dict[str, Any] = {"pk": {"S": run_id}, "sk": {"S": _SK}, "count": n(0), "epoch": n(0), "inc": {"S": inc}}
    if expires_at is not None:
        item["expires_at"] = n(expires_at)
    return item


def n(value: int) -> dict[str, str]:
    """A DynamoDB number attribute."""
    return {"N": str(value)}
