"""The chunk log's S3 side: sealed segments (the log of record), spilled appends, and the seal record.

A *seal* copies the committed chunks ``[a, b)`` of one generation into one S3 object,
``<prefix><run_id>/<inc>/seg/<a, 13 digits>-<b, 13 digits>.ndjson`` (one chunk per line; without
an incarnation, ``<prefix><run_id>/seg/...``), and then records it in the generation's segment
index with one conditional UpdateItem (``sealed = :a`` before, ``:b`` after). The object's key and
bytes follow from the committed chunks alone, so sealing again after a crash between the two
writes puts the same object again and records it: harmless. An object whose record never lands
(its sealer lost a race) is never read, and the bucket's lifecycle rule removes it.

Spilled appends (too large for an item) live under ``.../spill/`` and are read through the item
that points at them.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ..errors import StorageError
from ._errors import aws_errors, error_code, error_item, translate
from ._logitems import LOG_FORMAT, IndexItem, decode_chunks, decode_item, gen_inc, index_key

__all__ = ["Segments"]

_NAMES = {"#s": "sealed", "#ends": "ends", "#x": "expires_at", "#f": "format"}


class Segments:
    """Writes and reads a chunk log's S3 objects, and its segment index items."""

    def __init__(self, *, s3_client: Any, bucket: str, prefix: str, dynamodb_client: Any, table_name: str) -> None:
        """Use ``bucket`` (keys under ``prefix``) and the runs table through the given clients."""
        self._s3 = s3_client
        self._bucket = bucket
        self._prefix = prefix
        self._ddb = dynamodb_client
        self._table = table_name

    # --- keys --------------------------------------------------------------------------------------

    def folder(self, run_id: str, gen: str) -> str:
        """Where a generation's objects live (the incarnation's folder)."""
        inc = gen_inc(gen)
        return f"{self._prefix}{run_id}/" if inc is None else f"{self._prefix}{run_id}/{inc}/"

    def segment_key(self, run_id: str, gen: str, start: int, end: int) -> str:
        """The key of the sealed segment holding chunks ``[start, end)``."""
        return f"{self.folder(run_id, gen)}seg/{start:013d}-{end:013d}.ndjson"

    def spill_key(self, run_id: str, gen: str, start: int, epoch: int, write_id: str) -> str:
        """The key of one spilled append (unique per write: a fenced writer's never collides)."""
        return f"{self.folder(run_id, gen)}spill/{start:013d}-{epoch}-{write_id}.ndjson"

    # --- objects -----------------------------------------------------------------------------------

    def put(self, key: str, raw: bytes, run_id: str) -> None:
        """Write an object of chunks (one per line)."""
        with aws_errors(f"writing chunks of run {run_id!r} to S3"):
            self._s3.put_object(Bucket=self._bucket, Key=key, Body=raw, ContentType="application/x-ndjson")

    def get(self, key: str, n: int, run_id: str) -> tuple[str, ...]:
        """The ``n`` chunks of an object a committed item or the index points at (missing: damage)."""
        try:
            data = self._s3.get_object(Bucket=self._bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if error_code(exc) in ("NoSuchKey", "404"):
                raise StorageError(f"run {run_id!r}: committed chunks {key!r} are missing") from None
            raise translate(exc, f"reading chunks {key!r}") from exc
        except BotoCoreError as exc:
            raise translate(exc, f"reading chunks {key!r}") from exc
        return decode_chunks(data, n, repr(key))

    # --- the index ---------------------------------------------------------------------------------

    def index(self, run_id: str, gen: str) -> IndexItem:
        """A generation's segment index (one strongly consistent GetItem; empty if there is none)."""
        with aws_errors(f"reading the segment index of run {run_id!r}"):
            item = self._ddb.get_item(TableName=self._table, Key=self._key(run_id, gen), ConsistentRead=True).get(
                "Item"
            )
        found = decode_item(item, run_id) if item else None
        return found if isinstance(found, IndexItem) else IndexItem(gen)

    def record(self, run_id: str, gen: str, start: int, end: int, expires_at: int | None) -> int:
        """Record the segment ``[start, end)`` after the index's last; returns what is sealed now.

        Conditional on the index ending at ``start``: when another sealer got there first (or
        this one did, and the reply was lost) nothing changes and the index's end comes back.
        """
        update = "SET #s = :end, #ends = list_append(if_not_exists(#ends, :nil), :new), #f = if_not_exists(#f, :f)"
        values: dict[str, Any] = {
            ":start": {"N": str(start)}, ":end": {"N": str(end)}, ":nil": {"L": []}, ":new": {"L": [{"N": str(end)}]},
            ":f": {"N": str(LOG_FORMAT)},
        }  # fmt: skip
        if expires_at is not None:
            update += ", #x = :x"
            values[":x"] = {"N": str(expires_at)}
        # Created with the run record at 0; a log of no record gets its index (and format) with its first seal.
        condition = "#s = :start" if start else "attribute_not_exists(#s) OR #s = :start"
        names = {k: v for k, v in _NAMES.items() if k in update + condition}
        try:
            self._ddb.update_item(
                TableName=self._table,
                Key=self._key(run_id, gen),
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise translate(exc, f"recording a segment of run {run_id!r}") from exc
            old = error_item(exc) or {}
            return int(old.get("sealed", {}).get("N", "0"))
        except BotoCoreError as exc:
            raise translate(exc, f"recording a segment of run {run_id!r}") from exc
        return end

    @staticmethod
    def _key(run_id: str, gen: str) -> dict[str, Any]:
        return {"pk": {"S": run_id}, "sk": {"S": index_key(gen)}}
