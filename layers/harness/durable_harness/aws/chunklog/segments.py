"""The chunk log's S3 side: sealed segments (the log of record) and spilled appends.

A *seal* copies the committed chunks ``[a, b)`` of one generation into one S3 object,
``<prefix><run_id>/<inc>/seg/<a, 13 digits>-<b, 13 digits>.ndjson`` (one chunk per line; without
an incarnation, ``<prefix><run_id>/seg/...``), and then the writer records it in the generation's
segment index (:meth:`.log.DynamoChunkLog`). The object's key and bytes follow from the committed
chunks alone, so sealing again after a crash between the two writes puts the same object again
and records it: harmless. An object whose record never lands (its sealer lost a race) is never
read, and the bucket's lifecycle rule removes it.

Spilled appends (too large for an item) live under ``.../spill/`` and are read through the item
that points at them.
"""

from __future__ import annotations

from typing import Any

from ...errors import StorageError
from .._errors import aws_errors, object_body
from .items import decode_chunks, gen_inc


class Segments:
    """Writes and reads a chunk log's S3 objects."""

    def __init__(self, *, s3_client: Any, bucket: str, prefix: str) -> None:
        """Use ``bucket`` (keys under ``prefix``) through ``s3_client``."""
        self._s3 = s3_client
        self._bucket = bucket
        self._prefix = prefix

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
        data = object_body(self._s3, self._bucket, key, f"reading chunks {key!r}")
        if data is None:
            raise StorageError(f"run {run_id!r}: committed chunks {key!r} are missing")
        return decode_chunks(data, n, repr(key))
