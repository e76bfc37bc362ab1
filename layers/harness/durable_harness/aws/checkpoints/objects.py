"""S3 objects holding what is too large for a DynamoDB item: checkpoint record bodies.

Objects are immutable: each is written under a fresh key (``<prefix><run_id>/state/<name>-<nonce>.json``,
``If-None-Match: *``) *before* the conditional write that points at it, so an item never points
at a missing object, and two writers racing for the same slot never overwrite each other's. An
object whose write then failed is deleted (best effort; the bucket's lifecycle rule is the
backstop).
"""

from __future__ import annotations

import secrets
from contextlib import suppress
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ...errors import StorageError
from ...lru import LRU
from .._errors import aws_errors, object_body

_CACHED_TEXTS = 8


class ObjectGone(Exception):
    """The object an item pointed at was deleted (the item has moved on since it was read)."""


class StateObjects:
    """Offloading of large texts to ``bucket`` through ``s3_client`` (both None: offloading off)."""

    def __init__(self, s3_client: Any | None, bucket: str | None, *, prefix: str, offload_bytes: int) -> None:
        """Offload texts over ``offload_bytes`` under ``prefix``."""
        if (s3_client is None) != (bucket is None):
            raise ValueError("pass both s3_client and bucket to offload large states, or neither")
        self._s3 = s3_client
        self._bucket = bucket
        self._prefix = prefix
        self.offload_bytes = offload_bytes
        self._texts: LRU[str, str] = LRU(_CACHED_TEXTS)  # S3 key -> text (immutable)

    def put(self, run_id: str, name: str, text: str) -> str | None:
        """Write ``text`` to a new object and return its key; ``None`` when it fits in an item.

        Raises ``StorageError`` for a text over the limit when no bucket is set (rather than
        hitting DynamoDB's 400 KB item limit mid-run).
        """
        data = text.encode("utf-8")
        if len(data) <= self.offload_bytes:
            return None
        if self._s3 is None:
            raise StorageError(
                f"run {run_id!r}: a state record of {len(data)} bytes exceeds {self.offload_bytes} and no bucket is set"
            )
        key = f"{self._prefix}{run_id}/state/{name}-{secrets.token_hex(6)}.json"
        with aws_errors(f"offloading the state of run {run_id!r}"):
            self._s3.put_object(
                Bucket=self._bucket, Key=key, Body=data, ContentType="application/json", IfNoneMatch="*"
            )
        self._texts.put(key, text)
        return key

    def text(self, key: str) -> str:
        """The text of object ``key``; raises :class:`ObjectGone` when it no longer exists."""
        cached = self._texts.get(key, touch=True)
        if cached is not None:
            return cached
        if self._s3 is None or self._bucket is None:
            raise StorageError(f"a record points at S3 object {key!r}, but the store has no bucket")
        body = object_body(self._s3, self._bucket, key, f"reading state object {key!r}")
        if body is None:
            raise ObjectGone(key)
        text = body.decode("utf-8")
        self._texts.put(key, text)
        return text

    def delete(self, key: str | None) -> None:
        """Best-effort delete of an object no item points at (lifecycle rules catch misses)."""
        if key is None or self._s3 is None:
            return
        with suppress(ClientError, BotoCoreError):
            self._s3.delete_object(Bucket=self._bucket, Key=key)
        self._texts.pop(key)
