"""Logs written by the previous deployed chunk log (S3 segments and a head item), read-only.

That log kept a head item ``pk=<run_id>, sk="log"`` (``count``, ``epoch``: the fence, ``inc``) and
one S3 object per append at ``<prefix><run_id>[/<inc>]/seg/<10**12 - start>-<10**12 - epoch>``
(13 digits each). Of two objects at one start, the one of the higher epoch is committed (the
other is an orphan of a writer fenced off before its commit); objects at or past ``count`` were
never committed.

:class:`~.chunklog.DynamoChunkLog` reads such a log while it has no items of its own, and the
first writer to ``open`` it after the upgrade raises the head's fence (so that a slice still
running the previous code cannot commit any more) and seals the whole log into one segment of
the new layout: from then on the run's log is an ordinary one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ..errors import FencedError, StorageError
from ._errors import aws_errors, error_code, error_item, translate

__all__ = ["LegacyHead", "LegacyLog"]

_SK = "log"
_INVERT = 10**12
_WIDTH = 13


@dataclass(frozen=True)
class LegacyHead:
    """What the previous log's head item says."""

    count: int
    epoch: int
    inc: str | None

    @classmethod
    def of(cls, item: dict[str, Any]) -> LegacyHead:
        """Decode a head item."""
        count, epoch = int(item.get("count", {}).get("N", "0")), int(item.get("epoch", {}).get("N", "0"))
        return cls(count, epoch, item["inc"]["S"] if "inc" in item else None)


class LegacyLog:
    """Reads a previous-format log: its head (one GetItem), its chunks (one LIST + parallel GETs)."""

    def __init__(self, *, dynamodb_client: Any, table_name: str, s3_client: Any, bucket: str, prefix: str) -> None:
        """Use the runs table and the bucket through the given clients."""
        self._ddb = dynamodb_client
        self._table = table_name
        self._s3 = s3_client
        self._bucket = bucket
        self._prefix = prefix

    def head(self, run_id: str) -> LegacyHead | None:
        """The run's head item, or ``None`` when the run never had a log of the previous format."""
        with aws_errors(f"reading the chunk log of run {run_id!r}"):
            item = self._ddb.get_item(TableName=self._table, Key=self._key(run_id), ConsistentRead=True).get("Item")
        return LegacyHead.of(item) if item else None

    def fence(self, run_id: str, epoch: int) -> LegacyHead:
        """Raise the head's fence to ``epoch``: a writer of the previous code can commit no more."""
        try:
            response = self._ddb.update_item(
                TableName=self._table,
                Key=self._key(run_id),
                UpdateExpression="SET #e = :e",
                ConditionExpression="attribute_exists(pk) AND #e <= :e",
                ExpressionAttributeNames={"#e": "epoch"},
                ExpressionAttributeValues={":e": {"N": str(epoch)}},
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise translate(exc, f"fencing the chunk log of run {run_id!r}") from exc
            old = error_item(exc)
            fence = LegacyHead.of(old).epoch if old else None
            raise FencedError(f"run {run_id!r}: epoch {epoch} is older than the log's fence {fence}") from None
        except BotoCoreError as exc:
            raise translate(exc, f"fencing the chunk log of run {run_id!r}") from exc
        return LegacyHead.of(response["Attributes"])

    def chunks(self, run_id: str, head: LegacyHead, fetch_all: Callable[[list[str]], Iterable[bytes]]) -> list[str]:
        """All ``head.count`` committed chunks; ``fetch_all`` gets objects by key (in parallel)."""
        if head.count == 0:
            return []
        folder = f"{self._prefix}{run_id}/" if head.inc is None else f"{self._prefix}{run_id}/{head.inc}/"
        best: dict[int, tuple[int, str]] = {}  # start -> (epoch, key) of the committed candidate
        request: dict[str, Any] = {"Bucket": self._bucket, "Prefix": folder + "seg/"}
        while True:
            with aws_errors(f"listing the chunk log of run {run_id!r}"):
                page = self._s3.list_objects_v2(**request)
            for obj in page.get("Contents", ()):
                parsed = _parse(obj["Key"].rsplit("/", 1)[-1])
                if parsed is not None and parsed[0] < head.count and parsed[1] >= best.get(parsed[0], (-1, ""))[0]:
                    best[parsed[0]] = (parsed[1], obj["Key"])
            if not page.get("IsTruncated"):
                break
            request["ContinuationToken"] = page["NextContinuationToken"]
        starts = sorted(best)
        bodies = dict(zip(starts, fetch_all([best[s][1] for s in starts]), strict=True))
        out: list[str] = []
        while len(out) < head.count:
            body = bodies.get(len(out))
            if body is None or not body.endswith(b"\n"):
                raise StorageError(f"run {run_id!r}: the previous chunk log has no segment at chunk {len(out)}")
            out.extend(body[:-1].decode("utf-8").split("\n"))
        return out[: head.count]

    def get(self, key: str) -> bytes:
        """One object's bytes."""
        try:
            body: bytes = self._s3.get_object(Bucket=self._bucket, Key=key)["Body"].read()
        except ClientError as exc:
            raise translate(exc, f"reading segment {key!r}") from exc
        except BotoCoreError as exc:
            raise translate(exc, f"reading segment {key!r}") from exc
        return body

    @staticmethod
    def _key(run_id: str) -> dict[str, Any]:
        return {"pk": {"S": run_id}, "sk": {"S": _SK}}


def _parse(name: str) -> tuple[int, int] | None:
    """``(start, epoch)`` of a previous-format segment name; ``None`` for anything else."""
    head, sep, tail = name.partition("-")
    if not sep or len(head) != _WIDTH or len(tail) != _WIDTH or not (head.isdigit() and tail.isdigit()):
        return None
    return _INVERT - int(head), _INVERT - int(tail)
